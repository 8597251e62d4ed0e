// forktrial: trial proposed packs against forks of recorded event logs.
#include <malloc.h>

#include <cstdio>
#include <exception>
#include <string>

#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/terminal.h"

int main(int argc, char** argv) {
  // Built without jemalloc, large blocks always come from mmap, already
  // zeroed. glibc otherwise raises the threshold past any block freed, and
  // LMDB's 2 MiB dirty list, calloc'd at every store opened for writing (each
  // trial's scratch store), would then be served from the heap and cleared
  // byte by byte. With jemalloc this does nothing.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  CLI::App app{
      "forktrial: evaluate proposed plug-in code (packs) against forks of recorded event logs,\n"
      "each trial in a fresh, resource-capped child process; the store is the record."};
  app.require_subcommand(1);
  // What a peer or a store must match: the wire protocol a coordinator and
  // its workers and clients speak, and the store's schema.
  app.set_version_flag(
      "--version", "forktrial " FORKTRIAL_VERSION " (wire protocol " +
                       std::to_string(forktrial::schema::wire::K_PROTOCOL_VERSION) +
                       ", store schema " + std::to_string(forktrial::store::kSchemaVersion) + ")");
  app.footer(forktrial::tools::examples_footer({
      "forktrial pack hash examples/packs/greeter            # the bundle pin of a pack",
      "forktrial pack check examples/packs/greeter           # validate manifest.toml",
      "forktrial run import examples/runs/chat.jsonl --id run_chat   # record a run",
      "forktrial trial --run run_chat --at evt_004 --pack examples/packs/chat_echo \\",
      "    --scenario scenarios/replay.lua                     # trial a pack on a fork",
      "forktrial preflight                                   # can trial children start here?",
      "forktrial batch nightly.toml --workers 2              # a batch on this machine",
      "forktrial <command> --help                            # help on one command",
  }));
  forktrial::tools::add_pack_command(app);
  forktrial::tools::add_run_command(app);
  forktrial::tools::add_trial_command(app);
  forktrial::tools::add_preflight_command(app);
  forktrial::tools::add_cluster_commands(app);
  forktrial::tools::add_store_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const forktrial::tools::ExitStatus& e) {
    return e.code();
  } catch (const forktrial::tools::CommandFailed& e) {
    // Messages quote paths, labels and file contents: never raw to a terminal.
    std::fprintf(stderr, "forktrial: %s\n", forktrial::tools::terminal_text(e.what()).c_str());
    return e.exit_code();
  } catch (const forktrial::Error& e) {
    // A failure no command turned into its own message: its category says
    // what to do and how the command exits.
    const std::string advice = forktrial::tools::advice_for(e.code());
    std::fprintf(stderr, "forktrial: %s: %s%s%s\n",
                 std::string(forktrial::error_code_name(e.code())).c_str(),
                 forktrial::tools::terminal_text(e.what()).c_str(), advice.empty() ? "" : "\n",
                 advice.c_str());
    return forktrial::tools::exit_status_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forktrial: error: %s\n",
                 forktrial::tools::terminal_text(e.what()).c_str());
    return 1;
  }
  return 0;
}

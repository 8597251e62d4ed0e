#include "tools/application.h"

#include <cstdio>
#include <exception>
#include <string>

#include "schema/wire_codec.h"
#include "store/event_store.h"
#include "tools/cli_support.h"
#include "tools/terminal.h"

namespace forktrial::tools {

void describe_app(CLI::App& app) {
  app.description(
      "forktrial: evaluate proposed plug-in code (packs) against forks of recorded event logs,\n"
      "each trial in a fresh, resource-capped child process; the store is the record.");
  app.require_subcommand(1);
  // What a peer or a store must match: the wire protocol a coordinator and
  // its workers and clients speak, and the store's schema.
  app.set_version_flag("--version", "forktrial " FORKTRIAL_VERSION " (wire protocol " +
                                        std::to_string(schema::wire::K_PROTOCOL_VERSION) +
                                        ", store schema " + std::to_string(store::kSchemaVersion) +
                                        ")");
  app.footer(examples_footer({
      "forktrial pack hash examples/packs/greeter            # the bundle pin of a pack",
      "forktrial pack check examples/packs/greeter           # validate manifest.toml",
      "forktrial run import examples/runs/chat.jsonl --id run_chat   # record a run",
      "forktrial trial --run run_chat --at evt_004 --pack examples/packs/chat_echo \\",
      "    --scenario scenarios/replay.lua                     # trial a pack on a fork",
      "forktrial preflight                                   # can trial children start here?",
      "forktrial batch nightly.toml --workers 2              # a batch on this machine",
      "forktrial <command> --help                            # help on one command",
  }));
}

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const ExitStatus& e) {
    return e.code();
  } catch (const CommandFailed& e) {
    // Messages quote paths, labels and file contents: never raw to a terminal.
    std::fprintf(stderr, "forktrial: %s\n", terminal_text(e.what()).c_str());
    return e.exit_code();
  } catch (const Error& e) {
    // A failure no command turned into its own message: its category says
    // what to do and how the command exits.
    const std::string advice = advice_for(e.code());
    std::fprintf(stderr, "forktrial: %s: %s%s%s\n", std::string(error_code_name(e.code())).c_str(),
                 terminal_text(e.what()).c_str(), advice.empty() ? "" : "\n", advice.c_str());
    return exit_status_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "forktrial: error: %s\n", terminal_text(e.what()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace forktrial::tools

// `forktrial run ...`: create, list, inspect, project, fork, export and import
// runs of the event store.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/text.h"
#include "import/activegraph_sqlite.h"
#include "import/jsonl.h"
#include "runtime/graph.h"
#include "store/event_store.h"
#include "store/payload.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/store_access.h"
#include "tools/terminal.h"

namespace forktrial::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using store::EventStore;
using store::RunId;
using store::RunInfo;

// Options every run subcommand shares; filled by CLI11 before the callback.
struct Common {
  std::string store = kDefaultStore;
  bool json = false;
};

// Adds --store and, unless json_help is null, --json.
void add_common(CLI::App* cmd, Common& common,
                const char* json_help = "Print JSON for scripts instead of text") {
  cmd->add_option("--store", common.store, "The store directory")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  if (json_help != nullptr) cmd->add_flag("--json", common.json, json_help);
}

// --label and --id of the commands that create a run.
struct NewRunOptions {
  std::string label;
  std::string id;

  void add_to(CLI::App* cmd, const char* label_help, const char* id_help) {
    cmd->add_option("--label", label, label_help);
    cmd->add_option("--id", id, id_help);
  }
  store::NewRun spec(std::string default_label = {}) const {
    store::NewRun run{.label = label.empty() ? std::move(default_label) : label};
    if (!id.empty()) run.id = RunId(id);
    return run;
  }
};

RunInfo require_run(const store::Snapshot& snap, const std::string& id, const std::string& store) {
  auto run = snap.run(RunId(id));
  if (!run) {
    throw CommandFailed("no run " + id + " in the store at " + store +
                        "; list the runs with `forktrial run ls --store " + store + "`");
  }
  return *run;
}

template <typename T>
T accepted(store::Result<T> result, const std::string& what) {
  if (!result) {
    const std::string advice = advice_for(result.error().code);
    throw CommandFailed(
        what + ": " + result.error().message + (advice.empty() ? "" : "; " + advice),
        exit_status_for(result.error().code));
  }
  return std::move(*result);
}

ordered_json run_json(const RunInfo& run) {
  ordered_json j;
  j["id"] = run.id.str();
  j["label"] = run.label;
  j["created_at"] = run.created_at;
  j["events"] = run.head;
  if (run.fork_of) {
    j["parent"] = {{"run", run.fork_of->parent.str()},
                   {"event_id", run.fork_of->event_id.str()},
                   {"seq", run.fork_of->seq}};
  } else {
    j["parent"] = nullptr;
  }
  auto nullable = [](const std::optional<std::string>& v) -> ordered_json {
    if (!v) return nullptr;
    return *v;
  };
  j["goal"] = nullable(run.goal);
  j["frame_id"] = nullable(run.frame_id);
  return j;
}

std::string fork_text(const RunInfo& run) {
  if (!run.fork_of) return "-";
  return run.fork_of->parent.str() + "@" + run.fork_of->event_id.str() + " (seq " +
         std::to_string(run.fork_of->seq) + ")";
}

void print_created(const RunInfo& run, bool json) {
  if (json) {
    std::cout << json_text(run_json(run)) << '\n';
  } else {
    std::cout << terminal_safe(run.id.str()) << '\n';
  }
}

// A table column: `text` escaped, then cut to `limit` bytes (at a code-point
// boundary, ending in "..." when cut).
std::string column(std::string_view text, std::size_t limit) {
  std::string shown = terminal_safe(text);
  if (shown.size() <= limit) return shown;
  return std::string(utf8_prefix(shown, limit - 3)) + "...";
}

void add_new(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto spec = std::make_shared<NewRunOptions>();
  auto* cmd = run_app.add_subcommand("new", "Create an empty run and print its id");
  add_common(cmd, *common);
  spec->add_to(cmd, "A human-readable label", "The run id (default: run_ + 16 random hex digits)");
  cmd->footer(examples_footer({
      "forktrial run new --label baseline          # prints the new run id",
      "forktrial run new --id run_demo --json      # prints the run as JSON",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, true);
    print_created(accepted(store.create_run(spec->spec()), "cannot create the run"), common->json);
  });
}

// Which runs `run ls` lists: the user's, unless asked for forktrial's own
// (trials' forks, the orchestration log) or one job's forks.
struct ListFilter {
  bool all = false;
  std::string job;
  bool shows(const RunInfo& run) const {
    if (!job.empty()) return run.id.str().starts_with("run_" + job + "_");
    return all || store::run_kind(run.id.str()) == store::RunKind::user;
  }
};

void add_ls(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto filter = std::make_shared<ListFilter>();
  auto* cmd = run_app.add_subcommand(
      "ls",
      "List the runs of the store, oldest first: those imported or made by a user, or with "
      "--all every run, trials' forks and the coordinator's log too");
  add_common(cmd, *common);
  cmd->add_flag("--all,-a", filter->all,
                "Also list the runs forktrial made: trials' forks (run_trial_..., run_job_...) "
                "and the coordinator's orchestration log (forktrial.orchestration)");
  cmd->add_option("--job", filter->job,
                  "List only the forks of this cluster job's trials (run_<JOB>_<index>_a<attempt>)")
      ->excludes("--all");
  cmd->footer(examples_footer({
      "forktrial run ls",
      "forktrial run ls --all                        # trials' forks too",
      "forktrial run ls --job job_0123456789abcdef   # one job's forks",
      "forktrial run ls --store /data/store --json   # a JSON array of runs",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    std::vector<RunInfo> runs;
    std::size_t hidden = 0;
    for (RunInfo& run : store.snapshot().runs()) {
      if (filter->shows(run)) {
        runs.push_back(std::move(run));
      } else {
        ++hidden;
      }
    }
    if (common->json) {
      ordered_json all = ordered_json::array();
      for (const RunInfo& run : runs) all.push_back(run_json(run));
      std::cout << json_text(all) << '\n';
      return;
    }
    std::printf("%-24s %8s  %-27s  %-20s  %s\n", "RUN", "EVENTS", "CREATED", "LABEL", "FORK OF");
    for (const RunInfo& run : runs) {
      std::printf("%-24s %8llu  %-27s  %-20s  %s\n", terminal_safe(run.id.str()).c_str(),
                  static_cast<unsigned long long>(run.head), terminal_safe(run.created_at).c_str(),
                  column(run.label, 20).c_str(), terminal_safe(fork_text(run)).c_str());
    }
    if (runs.empty() && !filter->job.empty()) {
      std::fprintf(stderr, "(no fork of job %s: its trials' forks are run_%s_<index>_a<attempt>)\n",
                   terminal_safe(filter->job).c_str(), terminal_safe(filter->job).c_str());
    } else if (hidden > 0 && filter->job.empty()) {
      std::fprintf(stderr,
                   "(%zu run%s forktrial made not shown: trials' forks, the orchestration log; "
                   "--all lists them)\n",
                   hidden, hidden == 1 ? "" : "s");
    }
  });
}

void add_show(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto run_id = std::make_shared<std::string>();
  auto* cmd = run_app.add_subcommand("show", "Show a run: label, size, lineage, failures");
  add_common(cmd, *common);
  cmd->add_option("RUN", *run_id, "The run id")->required();
  cmd->footer(examples_footer({
      "forktrial run show run_1f2e3d4c5b6a7988",
      "forktrial run show run_1f2e3d4c5b6a7988 --json",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    auto snap = store.snapshot();
    RunInfo run = require_run(snap, *run_id, common->store);
    std::vector<RunInfo> lineage;
    for (RunInfo current = run; current.fork_of;) {
      current = require_run(snap, current.fork_of->parent.str(), common->store);
      lineage.push_back(current);
    }
    std::uint64_t inherited = run.fork_of ? run.fork_of->seq : 0;
    // What the runtime records for each error of a behavior.
    auto failures = snap.events_of_type(run, "behavior.failed");
    if (common->json) {
      ordered_json j = run_json(run);
      j["own_events"] = run.head - inherited;
      ordered_json chain = ordered_json::array();
      for (const RunInfo& ancestor : lineage) chain.push_back(run_json(ancestor));
      j["lineage"] = chain;
      j["behavior_failures"] = failures.size();
      std::cout << json_text(j) << '\n';
      return;
    }
    std::printf("run        %s\n", terminal_safe(run.id.str()).c_str());
    std::printf("label      %s\n", terminal_safe(run.label).c_str());
    std::printf("created    %s\n", terminal_safe(run.created_at).c_str());
    if (run.goal) std::printf("goal       %s\n", terminal_safe(*run.goal).c_str());
    if (run.frame_id) std::printf("frame      %s\n", terminal_safe(*run.frame_id).c_str());
    std::printf("events     %llu (%llu inherited, %llu own)\n",
                static_cast<unsigned long long>(run.head),
                static_cast<unsigned long long>(inherited),
                static_cast<unsigned long long>(run.head - inherited));
    std::printf("failures   %zu behavior.failed\n", failures.size());
    if (!run.fork_of) {
      std::printf("lineage    root run\n");
    } else {
      std::printf("lineage    %s\n", terminal_safe(fork_text(run)).c_str());
      for (const RunInfo& ancestor : lineage) {
        const std::string origin =
            ancestor.fork_of ? " forked from " + fork_text(ancestor) : std::string(" (root)");
        std::printf("           %s\n", terminal_safe(ancestor.id.str() + origin).c_str());
      }
    }
  });
}

// A JSON value on one line, as a terminal shows it, cut to `width` bytes.
std::string compact(const ordered_json& value, std::size_t width = 60) {
  std::string text =
      terminal_safe(value.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
  if (text.size() > width) text = text.substr(0, width - 3) + "...";
  return text;
}

void add_graph(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto run_id = std::make_shared<std::string>();
  auto at = std::make_shared<std::string>();
  auto* cmd = run_app.add_subcommand(
      "graph",
      "Project a run's history (up to an event, or whole) into its graph: objects, relations "
      "and patches, as activegraph's projector builds them");
  add_common(cmd, *common,
             "Print the state as JSON: {\"objects\", \"relations\", \"patches\"}, each item "
             "as activegraph's to_dict() lays it out");
  cmd->add_option("RUN", *run_id, "The run id")->required();
  cmd->add_option("--at", *at, "Project up to and including this event (default: the whole run)");
  cmd->footer(examples_footer({
      "forktrial run graph run_chat",
      "forktrial run graph run_chat --at evt_009 --json",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    auto snap = store.snapshot();
    RunInfo run = require_run(snap, *run_id, common->store);
    std::uint64_t last = run.head;
    if (!at->empty()) {
      auto event = snap.find_event(run, store::EventId(*at));
      if (!event) {
        throw CommandFailed("run " + *run_id + " has no event " + *at +
                            "; list its events with `forktrial run events " + *run_id + "`");
      }
      last = event->seq;
    }
    runtime::Graph graph;
    std::optional<std::string> problem;
    snap.for_each_event(run, 1, [&](const store::EventView& e) {
      if (e.seq > last) return false;
      if (!runtime::Graph::changes_state(e.type)) return true;
      const std::string where = "event " + std::string(e.id) + " (" + std::string(e.type) +
                                ", seq " + std::to_string(e.seq) + ")";
      if (auto deep = store::payload_depth_problem(e.payload)) {
        problem = where + ": its payload is " + *deep;
        return false;
      }
      auto payload = ordered_json::parse(e.payload, nullptr, false);
      if (payload.is_discarded()) {
        problem = where + ": its payload is not JSON";
      } else if (auto applied = graph.apply(e.type, payload); !applied) {
        problem = where + ": " + applied.error().message;
      }
      return !problem;
    });
    if (problem) {
      throw CommandFailed("cannot project run " + *run_id + ": " + terminal_safe(*problem) +
                          "; activegraph's projector would stop there too");
    }
    if (common->json) {
      std::cout << json_text(graph.to_json()) << '\n';
      return;
    }
    const auto objects = graph.objects();
    std::printf("OBJECTS (%zu)\n", objects.size());
    for (const auto* o : objects) {
      std::printf("  %-16s %-12s v%-3lld %s\n", terminal_safe(o->id).c_str(),
                  terminal_safe(o->type).c_str(), static_cast<long long>(o->version),
                  compact(o->data).c_str());
    }
    const auto relations = graph.relations();
    std::printf("RELATIONS (%zu)\n", relations.size());
    for (const auto* r : relations) {
      std::printf("  %-10s %s -%s-> %s\n", terminal_safe(r->id).c_str(),
                  terminal_safe(r->source).c_str(), terminal_safe(r->type).c_str(),
                  terminal_safe(r->target).c_str());
    }
    const auto patches = graph.patches();
    std::printf("PATCHES (%zu)\n", patches.size());
    for (const auto* p : patches) {
      std::string status = terminal_safe(p->status);
      if (p->rejection_reason.is_string()) status += ": " + compact(p->rejection_reason);
      std::printf("  %-10s %-16s %-8s %s\n", terminal_safe(p->id).c_str(),
                  terminal_safe(p->target).c_str(), terminal_safe(p->op).c_str(), status.c_str());
    }
  });
}

void add_events(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto run_id = std::make_shared<std::string>();
  auto from = std::make_shared<std::uint64_t>(1);
  auto type = std::make_shared<std::string>();
  auto limit = std::make_shared<std::uint64_t>(0);
  auto* cmd = run_app.add_subcommand("events",
                                     "List a run's events, inherited ones included, oldest first");
  add_common(cmd, *common, "Print JSON Lines (one event per line, with seq)");
  cmd->add_option("RUN", *run_id, "The run id")->required();
  cmd->add_option("--from", *from, "Start at this seq")->capture_default_str();
  cmd->add_option("--type", *type, "Only events of this type");
  cmd->add_option("--limit", *limit, "Print at most this many events (0: all)");
  cmd->footer(examples_footer({
      "forktrial run events run_1f2e3d4c5b6a7988",
      "forktrial run events run_1f2e3d4c5b6a7988 --type behavior.failed --json",
      "forktrial run events run_1f2e3d4c5b6a7988 --from 120 --limit 20",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    auto snap = store.snapshot();
    RunInfo run = require_run(snap, *run_id, common->store);
    if (!common->json) {
      std::printf("%8s  %-16s  %-24s  %-12s  %-32s  %s\n", "SEQ", "ID", "TYPE", "ACTOR",
                  "TIMESTAMP", "PAYLOAD");
    }
    std::uint64_t printed = 0;
    snap.for_each_event(run, *from, [&](const store::EventView& e) {
      if (!type->empty() && e.type != *type) return true;
      if (common->json) {
        // Spliced rather than re-parsed, so the payload keeps its bytes.
        std::string line = import::jsonl::to_line(e);
        line.pop_back();
        std::cout << line << ", \"seq\": " << e.seq << "}\n";
      } else {
        std::printf("%8llu  %-16s  %-24s  %-12s  %-32s  %s\n",
                    static_cast<unsigned long long>(e.seq), column(e.id, 16).c_str(),
                    column(e.type, 24).c_str(), column(e.actor.value_or("-"), 12).c_str(),
                    terminal_safe(e.timestamp).c_str(), column(e.payload, 60).c_str());
      }
      return *limit == 0 || ++printed < *limit;
    });
  });
}

void add_fork(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto run_id = std::make_shared<std::string>();
  auto at = std::make_shared<std::string>();
  auto spec = std::make_shared<NewRunOptions>();
  auto* cmd = run_app.add_subcommand(
      "fork", "Fork a run at one of its events (O(1): nothing is copied) and print the fork's id");
  add_common(cmd, *common);
  cmd->add_option("RUN", *run_id, "The run to fork")->required();
  cmd->add_option("--at", *at, "The event id the fork branches after (inclusive)")->required();
  spec->add_to(cmd, "A human-readable label", "The fork's run id (default: generated)");
  cmd->footer(examples_footer({
      "forktrial run fork run_1f2e3d4c5b6a7988 --at evt_042 --label 'retry from 42'",
      "forktrial run fork run_1f2e3d4c5b6a7988 --at evt_042 --json",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    auto fork = store.fork(RunId(*run_id), store::EventId(*at), spec->spec());
    if (!fork && fork.error().kind == store::Refused::unknown_event) {
      throw CommandFailed(fork.error().message + "; list its events with `forktrial run events " +
                          *run_id + "`");
    }
    print_created(accepted(std::move(fork), "cannot fork"), common->json);
  });
}

void add_export(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto run_id = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>();
  auto* cmd = run_app.add_subcommand(
      "export", "Write a run's whole history (lineage included) as activegraph JSON Lines");
  add_common(cmd, *common, nullptr);
  cmd->add_option("RUN", *run_id, "The run id")->required();
  cmd->add_option("-o,--output", *output, "Write to this file instead of stdout");
  cmd->footer(examples_footer({
      "forktrial run export run_1f2e3d4c5b6a7988 > run.jsonl",
      "forktrial run export run_1f2e3d4c5b6a7988 -o run.jsonl",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, false);
    auto snap = store.snapshot();
    RunInfo run = require_run(snap, *run_id, common->store);
    auto write_lines = [&](std::ostream& out) {
      snap.for_each_event(run, 1, [&](const store::EventView& e) {
        out << import::jsonl::to_line(e) << '\n';
        return true;
      });
      out.flush();
      if (!out) throw CommandFailed("writing the export of run " + *run_id + " failed");
    };
    if (output->empty()) {
      write_lines(std::cout);
      return;
    }
    // Write to a temporary file renamed into place, so a failed export never
    // leaves a file that looks complete, and remove it on failure.
    fs::path partial(*output + ".partial");
    try {
      std::ofstream file(partial, std::ios::binary | std::ios::trunc);
      if (!file) throw CommandFailed("cannot write " + partial.string());
      write_lines(file);
      file.close();
      fs::rename(partial, *output);
    } catch (...) {
      std::error_code ignored;
      fs::remove(partial, ignored);
      throw;
    }
  });
}

void add_import(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto input = std::make_shared<std::string>();
  auto spec = std::make_shared<NewRunOptions>();
  auto fork_of = std::make_shared<std::string>();
  auto at = std::make_shared<std::string>();
  auto* cmd = run_app.add_subcommand(
      "import", "Import activegraph JSON Lines (one event per line) into a new run, or a fork");
  add_common(cmd, *common);
  cmd->add_option("FILE", *input, "The JSON Lines file, or - for stdin")->required();
  spec->add_to(cmd, "A label for the new run (default: the file name)",
               "The new run's id (default: generated)");
  auto* parent = cmd->add_option("--fork-of", *fork_of,
                                 "Import the file as a fork of this stored run (with --at). The "
                                 "file may repeat the parent's history up to the fork point, as "
                                 "activegraph's export of a fork does; it must then match it");
  cmd->add_option("--at", *at, "The parent's event the fork branches after (with --fork-of)")
      ->needs(parent);
  parent->needs("--at");
  cmd->footer(examples_footer({
      "forktrial run import examples/runs/chat.jsonl --id run_chat",
      "forktrial run import examples/runs/chat-whatif.jsonl --fork-of run_chat --at evt_009",
      "forktrial run export run_a | forktrial run import - --store other-store",
  }));
  cmd->callback([=] {
    std::ifstream file;
    if (*input != "-") {
      file.open(*input, std::ios::binary);
      if (!file) throw CommandFailed("cannot read " + *input + ": no such file or not readable");
    }
    std::istream& in = *input == "-" ? std::cin : file;
    auto events = import::jsonl::parse_events(in);
    if (!events) {
      throw CommandFailed(*input + ": " + events.error().message + "; nothing was imported");
    }
    EventStore store = open_store(common->store, fork_of->empty());
    // The default label is the file name, which may be any bytes: a label is
    // plain text (store/event.h), so it is the name as a terminal shows it.
    const std::string label =
        *input == "-" ? "stdin" : terminal_safe(fs::path(*input).filename().string());
    auto run = fork_of->empty()
                   ? store.import_run(spec->spec(label), *events)
                   : import::jsonl::import_fork(store, RunId(*fork_of), store::EventId(*at),
                                                spec->spec(label), std::move(*events));
    print_created(accepted(std::move(run), "cannot import " + *input), common->json);
  });
}

void add_import_sqlite(CLI::App& run_app) {
  auto common = std::make_shared<Common>();
  auto input = std::make_shared<std::string>();
  auto* cmd = run_app.add_subcommand(
      "import-sqlite",
      "Import every run of an activegraph SQLite store, keeping ids, events and lineage");
  add_common(cmd, *common);
  cmd->add_option("FILE", *input, "The activegraph SQLite database")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->footer(examples_footer({
      "forktrial run import-sqlite ~/activegraph/store.db",
      "forktrial run import-sqlite store.db --json    # the imported runs as JSON",
  }));
  cmd->callback([=] {
    EventStore store = open_store(common->store, true);
    auto runs = accepted(import::import_activegraph_sqlite(store, *input),
                         "cannot import " + *input + " (nothing was imported)");
    if (common->json) {
      ordered_json all = ordered_json::array();
      for (const RunInfo& run : runs) all.push_back(run_json(run));
      std::cout << json_text(all) << '\n';
      return;
    }
    for (const RunInfo& run : runs) {
      std::printf("%s  %llu events  %s\n", terminal_safe(run.id.str()).c_str(),
                  static_cast<unsigned long long>(run.head), terminal_safe(fork_text(run)).c_str());
    }
  });
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* run_app = app.add_subcommand(
      "run", "Runs of the event store: create, list, inspect, fork, export, import");
  run_app->require_subcommand(1);
  run_app->footer(examples_footer({
      "forktrial run import session.jsonl --label session   # prints the new run id",
      "forktrial run fork run_1f2e3d4c5b6a7988 --at evt_042  # O(1) fork",
      "forktrial run show <fork id>                          # lineage and counts",
      "forktrial run <command> --help                        # help on one command",
  }));
  add_new(*run_app);
  add_ls(*run_app);
  add_show(*run_app);
  add_events(*run_app);
  add_graph(*run_app);
  add_fork(*run_app);
  add_export(*run_app);
  add_import(*run_app);
  add_import_sqlite(*run_app);
}

}  // namespace forktrial::tools

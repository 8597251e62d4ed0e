// `forktrial trial` and `forktrial preflight`: run one candidate pack against a
// fork of a recorded run in an isolated child, and check that children can
// start on this machine.
#include <signal.h>
#include <string.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pack/bundle_hash.h"
#include "sandbox/activegraph_child.h"
#include "sandbox/limit_units.h"
#include "sandbox/trial.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/stop_signals.h"
#include "tools/store_access.h"
#include "tools/terminal.h"

namespace forktrial::tools {
namespace {

using nlohmann::ordered_json;

// A limit in human units (sandbox/limit_units.h); one that does not parse is
// a usage error naming the option. Its range is checked with the others, by
// check_trial_limits, before anything runs.
template <typename T>
T parse_limit(std::expected<T, Status> parsed, const char* option) {
  if (!parsed)
    throw CommandFailed(std::string(option) + ": " + parsed.error().message, kUsageError);
  return *parsed;
}

// A pin given on the command line, refused before anything runs when it is
// not a whole "sha256:" + 64 lowercase hex digits.
Digest parse_pin(const std::string& text, const std::string& option) {
  if (auto malformed = pack::check_pin_form(text)) {
    throw CommandFailed(option + ": " + malformed->message +
                            "\nnothing was forked or recorded; `forktrial pack hash DIR` prints a "
                            "pack's whole pin",
                        kUsageError);
  }
  return *Digest::parse(text);
}

sandbox::PackSource pack_source(const std::string& arg, const char* option) {
  sandbox::PackSource source;
  auto eq = arg.find("=sha256:");
  if (eq == std::string::npos) eq = arg.rfind('=');
  source.root_dir = arg.substr(0, eq);
  if (eq != std::string::npos) {
    source.expected_bundle_hash = parse_pin(arg.substr(eq + 1), std::string(option) + " " + arg);
  }
  if (source.root_dir.empty()) {
    throw CommandFailed(std::string(option) + " " + arg + ": no directory given; write DIR or " +
                        "DIR=sha256:<pin>");
  }
  return source;
}

struct TrialOptions {
  std::string store = kDefaultStore;
  std::string run;
  std::string at;
  std::string pack;
  std::string expect;
  std::vector<std::string> extra_packs;
  std::string scenario;
  std::string wall_clock = "120";
  std::string max_rss;
  std::uint64_t max_events = 2000;
  std::string max_cpu;
  std::uint64_t max_appended_events = sandbox::TrialLimits::kDefaultMaxAppendedEvents;
  std::string max_appended_bytes;
  std::vector<std::string> env_pass;
  std::string label = "trial";
  std::string spec_file;  // --spec: the whole trial as a TrialSpecification
  sandbox::Isolation isolation = sandbox::Isolation::standard;
  std::string python = "python3";  // activegraph packs' interpreter
  bool json = false;
};

// A trial specification file (forktrial's or activegraph's JSON); every
// problem is a usage error, before anything is forked or recorded.
sandbox::TrialSpecification read_spec_file(const std::string& path) {
  constexpr std::size_t kMaxSpecBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw CommandFailed("--spec " + path + ": cannot open it: " + std::strerror(errno),
                        kUsageError);
  }
  std::string text(kMaxSpecBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxSpecBytes) {
    throw CommandFailed("--spec " + path + ": larger than 1 MiB; a trial specification is small",
                        kUsageError);
  }
  auto spec = sandbox::parse_trial_specification(text);
  if (!spec) {
    std::string message = "--spec " + path + ": not a trial specification forktrial can run:";
    for (const auto& problem : spec.error().list) message += "\n  " + problem;
    message += "\nnothing was forked or recorded; see docs/trials.md, \"TrialSpecification\"";
    throw CommandFailed(message, kUsageError);
  }
  if (spec->store_path && !spec->store_path->empty()) {
    // activegraph's spec names its SQLite store; forktrial runs against its
    // own store, into which such a run is imported (`run import-sqlite`).
    std::fprintf(stderr,
                 "forktrial: warning: --spec %s: store_path \"%s\" is ignored; the trial runs "
                 "against the store given by --store (or FORKTRIAL_STORE)\n",
                 terminal_safe(path).c_str(), terminal_safe(*spec->store_path).c_str());
  }
  return *spec;
}

int exit_status(Outcome outcome) {
  return outcome == Outcome::crashed ? 60 : sandbox::exit_code_of(outcome);
}

ordered_json report_json(const sandbox::TrialReport& r) {
  ordered_json j;
  j["outcome"] = std::string(outcome_name(r.outcome));
  j["fork_run_id"] = r.fork_run_id;
  j["events_appended"] = r.events_appended;
  j["behavior_failures"] = r.behavior_failures;
  j["behavior_failures_after_fork"] = r.behavior_failures_after_fork;
  j["exit_code"] = r.exit_code;
  j["detail"] = r.detail;
  j["warnings"] = r.warnings;
  j["isolation"] = ordered_json::parse(sandbox::isolation_json(r.isolation));
  j["executor"] = {{"name", r.executor}, {"version", r.executor_version}};
  j["limit"] = r.net == Net::none ? ordered_json(nullptr) : ordered_json(net_name(r.net));
  return j;
}

// The detail and the warnings hold the candidate's error text: each line is
// escaped, so none can rewrite the lines above it.
void print_report(const sandbox::TrialReport& r) {
  std::printf("outcome            %s\n", std::string(outcome_name(r.outcome)).c_str());
  std::printf("fork run           %s\n", terminal_safe(r.fork_run_id).c_str());
  std::printf("events appended    %llu\n", static_cast<unsigned long long>(r.events_appended));
  std::printf("behavior failures  %llu (%llu after the fork point)\n",
              static_cast<unsigned long long>(r.behavior_failures),
              static_cast<unsigned long long>(r.behavior_failures_after_fork));
  std::printf("child exit code    %d\n", r.exit_code);
  if (r.net != Net::none) {
    std::printf("limit              %s\n", std::string(net_name(r.net)).c_str());
  }
  std::printf(
      "executor           %s\n",
      terminal_safe(r.executor_version.empty() ? r.executor : r.executor + " " + r.executor_version)
          .c_str());
  std::string isolation(sandbox::isolation_name(r.isolation.level));
  for (const auto state : {sandbox::NetState::degraded, sandbox::NetState::off}) {
    std::string names;
    for (const auto& net : r.isolation.nets) {
      if (net.state == state) names += (names.empty() ? "" : ", ") + net.name;
    }
    if (!names.empty())
      isolation += "; " + std::string(sandbox::net_state_name(state)) + ": " + names;
  }
  std::printf("isolation          %s\n", isolation.c_str());
  for (const auto& warning : r.warnings) {
    std::printf("warning            %s\n", terminal_safe(warning).c_str());
  }
  if (!r.detail.empty()) {
    std::printf("detail\n");
    for (const auto& line : terminal_lines(r.detail)) std::printf("  %s\n", line.c_str());
  }
}

sandbox::TrialSpecification spec_from_options(const TrialOptions& o) {
  sandbox::TrialLimits limits;
  limits.wall_clock_seconds =
      parse_limit(sandbox::parse_duration_seconds(o.wall_clock), "--wall-clock");
  if (!o.max_rss.empty()) {
    limits.max_rss_bytes = parse_limit(sandbox::parse_byte_size(o.max_rss), "--max-rss");
  }
  limits.max_events = o.max_events;
  if (!o.max_cpu.empty()) {
    const auto cpu = parse_limit(sandbox::parse_whole_seconds(o.max_cpu), "--max-cpu");
    if (cpu > 0) limits.max_cpu_seconds = cpu;
  }
  limits.max_appended_events = o.max_appended_events;
  if (!o.max_appended_bytes.empty()) {
    limits.max_appended_bytes =
        parse_limit(sandbox::parse_byte_size(o.max_appended_bytes), "--max-appended-bytes");
  }
  limits.env_passthrough = o.env_pass;
  sandbox::TrialSpecification spec;
  spec.parent_run_id = store::RunId(o.run);
  spec.at_event = store::EventId(o.at);
  spec.label = o.label;
  spec.candidate = sandbox::PackSource{o.pack, std::nullopt, true};
  if (!o.expect.empty()) spec.candidate.expected_bundle_hash = parse_pin(o.expect, "--expect");
  for (const auto& extra : o.extra_packs) {
    spec.extra_packs.push_back(pack_source(extra, "--extra-pack"));
  }
  spec.scenario = o.scenario;
  spec.limits = limits;
  return spec;
}

void run_trial_command(const TrialOptions& o) {
  const sandbox::TrialSpecification spec =
      o.spec_file.empty() ? spec_from_options(o) : read_spec_file(o.spec_file);

  sandbox::Cancellation cancellation;
  sandbox::ChildOptions child_options;
  child_options.cancellation = &cancellation;
  child_options.isolation = o.isolation;
  child_options.python = o.python;
  sandbox::TrialReport report;
  bool stopped = false;
  {
    const StopSignals stop(cancellation);
    store::EventStore store = open_store(o.store, false);
    try {
      report = sandbox::run_trial(store, spec, child_options);
    } catch (const sandbox::Cancelled&) {
      stopped = true;
    } catch (const sandbox::TrialSetupError& e) {
      if (e.kind() == sandbox::TrialSetupError::Kind::invalid_specification) {
        throw CommandFailed(std::string("cannot start the trial: ") + e.what() +
                                "\nnothing was forked or recorded; fix the options above (see "
                                "`forktrial trial --help`)",
                            kUsageError);
      }
      throw CommandFailed(std::string("cannot start the trial: ") + e.what() +
                          "; list runs with `forktrial run ls` and events with `forktrial run "
                          "events RUN`");
    }
  }
  const int signal = stop_signal_received();
  if (stopped) {
    std::fprintf(stderr,
                 "forktrial: trial interrupted by SIG%s: the trial was stopped, its scratch store "
                 "removed, and nothing was recorded in the store\n",
                 ::sigabbrev_np(signal));
    end_by(signal);
  }
  if (o.json) {
    std::cout << json_text(report_json(report), 2) << '\n';
  } else {
    print_report(report);
  }
  std::fflush(stdout);
  if (signal != 0) {
    // The signal came after the trial was recorded: it is reported above,
    // and the command still ends as the signal asked.
    std::fprintf(stderr, "forktrial: trial interrupted by SIG%s after it was recorded\n",
                 ::sigabbrev_np(signal));
    end_by(signal);
  }
  if (report.outcome != Outcome::completed) throw ExitStatus(exit_status(report.outcome));
}

}  // namespace

void add_isolation_option(CLI::App* cmd, sandbox::Isolation& level) {
  const std::map<std::string, sandbox::Isolation> levels{{"standard", sandbox::Isolation::standard},
                                                         {"strict", sandbox::Isolation::strict}};
  cmd->add_option("--isolation", level,
                  "standard: a fresh resource-capped process per trial; strict: also new user, "
                  "mount, PID, network and IPC namespaces, a seccomp filter and a cgroup "
                  "(what this host cannot apply is a warning in each report; see `forktrial "
                  "preflight --isolation strict`)")
      ->transform(CLI::CheckedTransformer(levels))
      ->default_str("standard")
      ->envname("FORKTRIAL_ISOLATION");
}

void add_trial_command(CLI::App& app) {
  auto o = std::make_shared<TrialOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trial",
      "Trial a candidate pack against a fork of a recorded run, in a fresh resource-capped\n"
      "child process. Prints the report; exits 0 only when the outcome is completed\n"
      "(30 scenario_failed, 40 limits_exceeded, 50 materialization_failed, 60 crashed).");
  cmd->add_option("--store", o->store, "the store holding the recorded run")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_option("--spec", o->spec_file,
                  "the whole trial as a TrialSpecification JSON file, forktrial's or "
                  "activegraph's (instead of --run, --at, --pack and the other trial options; "
                  "activegraph's store_path is ignored with a warning)");
  cmd->add_option("--run", o->run, "the recorded (parent) run (required without --spec)");
  cmd->add_option("--at", o->at,
                  "fork point: the parent's event id to fork at, inclusive (required without "
                  "--spec)");
  cmd->add_option("--pack", o->pack, "the candidate pack directory (required without --spec)");
  cmd->add_option("--expect", o->expect, "the candidate's bundle pin (sha256:...)");
  cmd->add_option("--extra-pack", o->extra_packs,
                  "a trusted pack loaded before the candidate: DIR or DIR=sha256:<pin>");
  cmd->add_option("--scenario", o->scenario,
                  "file.lua or file.lua::fn inside the candidate (default: run until idle)");
  cmd->add_option("--wall-clock", o->wall_clock,
                  "wall-clock limit: seconds, or 10s / 500ms / 2m (0: none)")
      ->capture_default_str();
  cmd->add_option("--max-rss", o->max_rss,
                  "memory cap: bytes, or 256M / 1G (default 1G; 0 turns the net off, which the "
                  "report then says)");
  cmd->add_option("--max-events", o->max_events, "event budget")->capture_default_str();
  cmd->add_option("--max-cpu", o->max_cpu,
                  "CPU net: whole seconds, or 30s / 2m (default, or 0: wall clock + 5 s)");
  cmd->add_option("--max-appended-events", o->max_appended_events,
                  "write budget: events the trial may append to its fork (0: none)")
      ->capture_default_str();
  cmd->add_option("--max-appended-bytes", o->max_appended_bytes,
                  "write budget: bytes of event text the trial may append (default 64M)");
  cmd->add_option("--env-pass", o->env_pass, "an environment variable to pass to the child");
  cmd->add_option("--label", o->label, "label of the fork run")->capture_default_str();
  add_isolation_option(cmd, o->isolation);
  cmd->add_option("--python", o->python,
                  "the interpreter an activegraph pack runs with (a path, or a name on PATH)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "print the report as JSON");
  cmd->footer(examples_footer({
      "forktrial run import examples/runs/chat.jsonl --id run_chat",
      "forktrial trial --run run_chat --at evt_004 --pack examples/packs/chat_echo \\",
      "    --expect $(forktrial pack hash examples/packs/chat_echo) --scenario "
      "scenarios/replay.lua",
      "forktrial trial --run run_chat --at evt_004 --pack examples/candidates/runaway \\",
      "    --wall-clock 2 --max-rss 256M --json",
      "forktrial trial --run run_chat --at evt_004 --pack examples/packs/chat_echo --isolation "
      "strict",
  }));
  cmd->callback([o, cmd] {
    // --spec carries the whole trial: an option that would change it is
    // refused rather than silently dropped or merged.
    static constexpr const char* kTrialOptions[] = {"--run",
                                                    "--at",
                                                    "--pack",
                                                    "--expect",
                                                    "--extra-pack",
                                                    "--scenario",
                                                    "--wall-clock",
                                                    "--max-rss",
                                                    "--max-events",
                                                    "--max-cpu",
                                                    "--max-appended-events",
                                                    "--max-appended-bytes",
                                                    "--env-pass",
                                                    "--label"};
    if (!o->spec_file.empty()) {
      std::string given;
      for (const char* name : kTrialOptions) {
        if (cmd->count(name) > 0) given += std::string(given.empty() ? "" : ", ") + name;
      }
      if (!given.empty()) {
        throw CommandFailed("--spec gives the whole trial; " + given +
                                " cannot be combined with it (put the value in the "
                                "specification instead)",
                            kUsageError);
      }
    } else {
      std::string missing;
      for (const char* name : {"--run", "--at", "--pack"}) {
        if (cmd->count(name) == 0) missing += std::string(missing.empty() ? "" : ", ") + name;
      }
      if (!missing.empty()) {
        throw CommandFailed(missing +
                                " required (or give the whole trial with --spec FILE); see "
                                "`forktrial trial --help`",
                            kUsageError);
      }
    }
    run_trial_command(*o);
  });
}

void add_preflight_command(CLI::App& app) {
  auto max_rss = std::make_shared<std::string>("256M");
  auto wall_clock = std::make_shared<std::string>("120");
  auto json = std::make_shared<bool>(false);
  auto isolation = std::make_shared<sandbox::Isolation>(sandbox::Isolation::standard);
  auto python = std::make_shared<std::string>("python3");
  CLI::App* cmd = app.add_subcommand(
      "preflight",
      "Check that a trial child can start on this machine under the given nets. Prints the\n"
      "nets that degraded here (none: every net applies), or the child's startup error; with\n"
      "--isolation strict, also which of strict isolation's nets this host can apply. Then\n"
      "the executors: lua (forktrial's own child) and activegraph (activegraph's trial child,\n"
      "for activegraph Python packs), with the version of activegraph found, or why none was.");
  cmd->add_option("--python", *python,
                  "the interpreter activegraph packs run with (a path, or a name on PATH)")
      ->capture_default_str();
  cmd->add_option("--max-rss", *max_rss, "memory cap to probe")->capture_default_str();
  cmd->add_option("--wall-clock", *wall_clock, "wall clock to probe: seconds, or 10s / 2m")
      ->capture_default_str();
  add_isolation_option(cmd, *isolation);
  cmd->add_flag("--json", *json,
                "print {\"ok\", \"child\", \"isolation\", \"nets\", \"warnings\", "
                "\"executors\"} as JSON");
  cmd->footer(examples_footer({"forktrial preflight", "forktrial preflight --max-rss 1G --json",
                               "forktrial preflight --isolation strict"}));
  cmd->callback([=] {
    sandbox::TrialLimits limits;
    limits.max_rss_bytes = parse_limit(sandbox::parse_byte_size(*max_rss), "--max-rss");
    limits.wall_clock_seconds =
        parse_limit(sandbox::parse_duration_seconds(*wall_clock), "--wall-clock");
    sandbox::ChildOptions options;
    options.isolation = *isolation;
    std::vector<sandbox::StrictNet> nets;
    if (*isolation == sandbox::Isolation::strict) nets = sandbox::probe_strict_nets();
    std::vector<std::string> warnings;
    try {
      warnings = sandbox::preflight(limits, std::chrono::seconds(30), options);
    } catch (const sandbox::SandboxStartupError& e) {
      throw CommandFailed(std::string(e.what()) +
                          "\ncheck that forktrial-child is installed beside forktrial or in "
                          "../libexec/forktrial, or name it with FORKTRIAL_CHILD");
    } catch (const sandbox::TrialSetupError& e) {
      throw CommandFailed(std::string(e.what()) +
                              "\nfix the options above (see `forktrial "
                              "preflight --help`)",
                          kUsageError);
    }
    const std::string child = sandbox::default_child_path().string();
    // activegraph: found where the interpreter looks, and its child answers.
    auto activegraph = sandbox::find_activegraph(*python);
    std::optional<Status> activegraph_problem;
    if (!activegraph) {
      activegraph_problem = activegraph.error();
    } else {
      activegraph_problem = sandbox::activegraph_preflight(*activegraph);
    }
    if (*json) {
      ordered_json out{{"ok", true},
                       {"child", child},
                       {"isolation", std::string(sandbox::isolation_name(*isolation))}};
      out["nets"] = ordered_json::array();
      for (const auto& net : nets) {
        out["nets"].push_back({{"name", net.name}, {"applies", net.applies}, {"how", net.how}});
      }
      out["warnings"] = warnings;
      ordered_json ag{{"name", "activegraph"}, {"ok", !activegraph_problem}};
      if (activegraph) {
        ag["version"] = activegraph->version;
        ag["python"] = activegraph->python.string();
        ag["python_path"] = activegraph->python_path;
      }
      if (activegraph_problem) ag["why"] = activegraph_problem->message;
      out["executors"] = ordered_json::array({ordered_json{{"name", "lua"}, {"ok", true}}, ag});
      std::cout << json_text(out, 2) << '\n';
      return;
    }
    for (const auto& net : nets) {
      std::printf("%-16s %-8s %s\n", net.applies ? "applies" : "cannot apply", net.name.c_str(),
                  terminal_safe(net.how).c_str());
    }
    if (warnings.empty()) {
      std::printf("ok: a trial child starts here and every net applies\n");
    } else {
      std::printf("ok, with degraded nets:\n");
      for (const auto& w : warnings) std::printf("  %s\n", terminal_safe(w).c_str());
    }
    std::printf("child: %s\n", terminal_safe(child).c_str());
    std::printf("executor lua: ok\n");
    if (activegraph_problem) {
      std::printf("executor activegraph: not available: %s\n",
                  terminal_safe(activegraph_problem->message).c_str());
    } else {
      std::printf(
          "executor activegraph: ok, activegraph %s with %s\n",
          terminal_safe(activegraph->version.empty() ? "(no version)" : activegraph->version)
              .c_str(),
          terminal_safe(activegraph->python.string()).c_str());
    }
  });
}

}  // namespace forktrial::tools

// `forktrial gc`, `forktrial compact` and `forktrial store check`: a
// long-lived store's upkeep. gc
// deletes the trials' forks a retention policy no longer keeps, and the blobs
// no unfinished job needs (coordinator/retention.h); compact writes a copy of the store without the
// room deleted runs left, since LMDB's file never shrinks. store check says
// what is wrong with a store (who holds it, log records that do not apply)
// and repairs what can be.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "coordinator/orchestration_log.h"
#include "coordinator/retention.h"
#include "coordinator/scheduler.h"
#include "coordinator/server.h"
#include "store/event_store.h"
#include "store/writer_lock.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/store_access.h"
#include "tools/terminal.h"

namespace forktrial::tools {
namespace {

namespace fs = std::filesystem;
using coordinator::KeepForks;
using nlohmann::ordered_json;

// "7d", "12h", "30m", "90s", "0": an age, given to `option`.
coordinator::Duration parse_age(const std::string& option, const std::string& text) {
  if (auto age = coordinator::parse_retention_age(text)) return *age;
  throw CommandFailed(option + ": \"" + text +
                          "\" is not an age; give a number and a unit, such as 7d, 12h, 30m or 0",
                      kUsageError);
}

// "12.3 MiB".
std::string bytes_text(std::uint64_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

std::uint64_t file_bytes(const fs::path& store) {
  std::error_code error;
  const auto size = fs::file_size(store / "data.mdb", error);
  return error ? 0 : size;
}

struct GcOptions {
  std::string store = kDefaultStore;
  std::string keep;
  std::string older_than = "0";
  std::string blob_grace = "1h";
  std::size_t batch = 1000;
  bool dry_run = false;
  bool json = false;
};

void run_gc(const GcOptions& o) {
  const auto keep = coordinator::parse_keep_forks(o.keep);
  if (!keep) {
    throw CommandFailed("--keep: \"" + o.keep + "\" is not a policy; give all, failures or none",
                        kUsageError);
  }
  const coordinator::RetentionPolicy policy{*keep, parse_age("--older-than", o.older_than)};
  const coordinator::Duration grace = parse_age("--blob-grace", o.blob_grace);
  store::EventStore store = open_store(o.store, false);
  const auto now =
      std::chrono::time_point_cast<coordinator::Duration>(std::chrono::system_clock::now());
  auto plan = coordinator::plan_gc(store.snapshot(), policy, now, grace);
  if (!plan) {
    throw CommandFailed("cannot plan the collection: " + plan.error().message +
                        "; the store's orchestration log is corrupt, and nothing was deleted");
  }
  const bool progress = !o.json && !plan->forks.empty();
  coordinator::GcResult result;
  store::DeletedBlobs blobs;
  if (!o.dry_run) {
    result = coordinator::apply_gc(store, plan->forks, o.batch, [&](std::uint64_t done) {
      if (progress) {
        std::fprintf(stderr, "gc: %llu of %zu forks deleted\r",
                     static_cast<unsigned long long>(done), plan->forks.size());
      }
    });
    if (progress) std::fprintf(stderr, "\n");
    // After the forks: a blob is deleted only if it is still older than the
    // grace in the transaction deleting it (touched since the plan: kept).
    blobs = coordinator::apply_gc_blobs(store, plan->blobs, plan->blobs_stored_before, o.batch,
                                        nullptr);
    store.touch_blobs(plan->blobs_unstamped);
  }
  const std::uint64_t file = file_bytes(store.path());
  if (o.json) {
    ordered_json doc{{"dry_run", o.dry_run},
                     {"keep", std::string(coordinator::keep_forks_name(*keep))},
                     {"older_than_ms", policy.after.count()},
                     {"forks_planned", plan->forks.size()},
                     {"forks_deleted", result.deleted.runs},
                     {"events_deleted", result.deleted.events},
                     {"bytes_freed", result.deleted.bytes},
                     {"forks_kept", plan->forks_kept},
                     {"forks_already_gone", plan->forks_gone},
                     {"forks_forked_from", plan->forks_forked_from},
                     {"local_forks_planned", plan->local_forks},
                     {"local_forks_kept", plan->local_forks_kept},
                     {"jobs_collected", plan->jobs_collected},
                     {"jobs_too_recent", plan->jobs_too_recent},
                     {"jobs_unfinished", plan->jobs_unfinished},
                     {"jobs_own_policy", plan->jobs_own_policy},
                     {"blob_grace_ms", grace.count()},
                     {"blobs_planned", plan->blobs.size()},
                     {"blob_bytes_planned", plan->blob_bytes},
                     {"blobs_deleted", blobs.blobs},
                     {"blob_bytes_freed", blobs.bytes},
                     {"blobs_needed", plan->blobs_needed},
                     {"blobs_recent", plan->blobs_recent + blobs.kept_recent},
                     {"blobs_unstamped", plan->blobs_unstamped.size() + blobs.kept_unstamped},
                     {"skipped", result.skipped},
                     {"store_file_bytes", file}};
    std::cout << json_text(doc) << '\n';
    return;
  }
  if (o.dry_run) {
    std::printf(
        "would delete %zu fork(s) (%llu of local trials) and %zu blob(s) (%s); nothing was "
        "deleted\n",
        plan->forks.size(), static_cast<unsigned long long>(plan->local_forks), plan->blobs.size(),
        bytes_text(plan->blob_bytes).c_str());
  } else {
    std::printf("deleted %llu fork(s): %llu events, %s freed inside the store\n",
                static_cast<unsigned long long>(result.deleted.runs),
                static_cast<unsigned long long>(result.deleted.events),
                bytes_text(result.deleted.bytes).c_str());
    std::printf("deleted %llu blob(s): %s freed inside the store\n",
                static_cast<unsigned long long>(blobs.blobs), bytes_text(blobs.bytes).c_str());
  }
  std::printf(
      "kept %llu blob(s) unfinished jobs need, %llu stored or used less than %s ago, %llu of "
      "unknown age (stored by an older forktrial: %s)\n",
      static_cast<unsigned long long>(plan->blobs_needed),
      static_cast<unsigned long long>(plan->blobs_recent + blobs.kept_recent),
      terminal_safe(o.blob_grace).c_str(),
      static_cast<unsigned long long>(plan->blobs_unstamped.size() + blobs.kept_unstamped),
      o.dry_run ? "a gc that is not a dry run dates them, and one a grace later collects them"
                : "dated now, collected by a gc a grace from now");
  std::printf(
      "kept %llu fork(s) by the policy (--keep %s%s), %llu that other runs fork from, "
      "%llu local trials' forks\n",
      static_cast<unsigned long long>(plan->forks_kept), o.keep.c_str(),
      plan->jobs_own_policy == 0
          ? ""
          : ("; " + std::to_string(plan->jobs_own_policy) + " job(s) by their own").c_str(),
      static_cast<unsigned long long>(plan->forks_forked_from),
      static_cast<unsigned long long>(plan->local_forks_kept));
  const std::string recent = policy.after.count() == 0
                                 ? ""
                                 : std::to_string(plan->jobs_too_recent) + " finished less than " +
                                       terminal_safe(o.older_than) + " ago, ";
  std::printf(
      "finished jobs collected: %llu; %s%llu unfinished (untouched); every result is "
      "kept\n",
      static_cast<unsigned long long>(plan->jobs_collected), recent.c_str(),
      static_cast<unsigned long long>(plan->jobs_unfinished));
  for (const std::string& skipped : result.skipped) {
    std::printf("skipped %s\n", terminal_safe(skipped).c_str());
  }
  if (result.deleted.runs > 0 || blobs.blobs > 0) {
    std::printf(
        "the store's file stays %s: LMDB reuses the room but never shrinks its file; "
        "`forktrial compact --store %s --output NEW` writes a copy without it\n",
        bytes_text(file).c_str(), terminal_safe(o.store).c_str());
  }
}

void add_gc(CLI::App& app) {
  auto o = std::make_shared<GcOptions>();
  auto* cmd = app.add_subcommand(
      "gc",
      "Delete the trials' forks a retention policy no longer keeps: of finished jobs, every fork, "
      "or only those of trials that completed, once the job has been finished a while; and the "
      "blobs (bundles, segments) no unfinished job needs, once unused for --blob-grace. Results "
      "and verdicts are never deleted, nor runs a user imported or made");
  cmd->add_option("--store", o->store, "The store directory (a coordinator may be running on it)")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_option("--keep", o->keep,
                  "What to keep of a finished job's forks: all, failures (the forks of trials "
                  "whose outcome is not completed) or none (results only)")
      ->required();
  cmd->add_option("--older-than", o->older_than,
                  "Collect only jobs finished at least this long ago (7d, 12h, 30m; 0: all). A "
                  "local trial's fork (run_trial_...) goes with --keep none once this old")
      ->capture_default_str();
  cmd->add_option("--blob-grace", o->blob_grace,
                  "Keep a blob stored, uploaded or found by a client's findMissing less than this "
                  "long ago, whatever needs it: a client's upload before its submission (1h, 30m)")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "Forks, or blobs, deleted per transaction")
      ->capture_default_str()
      ->check(CLI::Range(1, 1'000'000));
  cmd->add_flag("--dry-run", o->dry_run, "Say what would be deleted, and delete nothing");
  cmd->add_flag("--json", o->json, "Print JSON for scripts instead of text");
  cmd->footer(examples_footer({
      "forktrial gc --keep failures --older-than 7d   # a week after a job, drop completed forks",
      "forktrial gc --keep none --older-than 30d --dry-run",
      "forktrial gc --keep none --json",
  }));
  cmd->callback([o] { run_gc(*o); });
}

void add_compact(CLI::App& app) {
  auto store_dir = std::make_shared<std::string>(kDefaultStore);
  auto output = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand(
      "compact",
      "Write a compacted copy of the store to a new directory: the room gc freed goes back to the "
      "disk once the copy replaces the store (stop the coordinator, move the copy in place)");
  cmd->add_option("--store", *store_dir, "The store directory")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_option("--output,-o", *output, "The new directory to write the copy into")->required();
  cmd->add_flag("--json", *json, "Print JSON for scripts instead of text");
  cmd->footer(examples_footer({
      "forktrial compact --store /var/lib/forktrial/store --output /var/lib/forktrial/store.new",
  }));
  cmd->callback([=] {
    if (fs::exists(*output)) {
      throw CommandFailed("--output " + *output + " exists; give a new directory", kUsageError);
    }
    std::uint64_t before = 0;
    {
      store::EventStore store = open_store(*store_dir, false);
      before = file_bytes(store.path());
      store.copy_compacted(*output);
    }
    const std::uint64_t after = file_bytes(*output);
    if (*json) {
      std::cout << json_text(ordered_json{{"store", *store_dir},
                                          {"output", *output},
                                          {"bytes_before", before},
                                          {"bytes_after", after}})
                << '\n';
      return;
    }
    std::printf("wrote %s (%s; the store's file is %s)\n", terminal_safe(*output).c_str(),
                bytes_text(after).c_str(), bytes_text(before).c_str());
    std::printf("to use it: stop what uses %s, move it aside, move %s in its place\n",
                terminal_safe(*store_dir).c_str(), terminal_safe(*output).c_str());
  });
}

}  // namespace

ordered_json set_aside_json(const std::vector<coordinator::SetAside>& records) {
  ordered_json out = ordered_json::array();
  for (const auto& record : records) {
    out.push_back({{"record", record.ordinal}, {"type", record.type}, {"why", record.why}});
  }
  return out;
}

void add_store_check(CLI::App& app) {
  auto* group = app.add_subcommand("store", "Look after a store: check it, repair it");
  group->require_subcommand(1);
  auto store_dir = std::make_shared<std::string>(kDefaultStore);
  auto repair = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto* cmd = group->add_subcommand(
      "check",
      "Say what is wrong with a store: who holds it, and the records of its orchestration log "
      "that do not apply to the state the others build (as after two coordinators wrote it). "
      "Exit 0 when nothing is, 1 when something is. --repair sets those records aside for good: "
      "as a coordinator's start does, then compacting the log without them");
  cmd->add_option("--store", *store_dir, "The store directory")
      ->capture_default_str()
      ->envname("FORKTRIAL_STORE");
  cmd->add_flag("--repair", *repair,
                "Repair what can be: replay the log as a coordinator's start does, setting aside "
                "what does not apply, and compact it (needs the store free of a coordinator)");
  cmd->add_flag("--json", *json, "Print JSON for scripts instead of text");
  cmd->footer(examples_footer({
      "forktrial store check --store /var/lib/forktrial",
      "forktrial store check --store /var/lib/forktrial --repair",
  }));
  cmd->callback([=] {
    if (!fs::exists(fs::path(*store_dir) / "data.mdb")) {
      throw CommandFailed("no store at " + *store_dir + " (it has no data.mdb); give --store",
                          kUsageError);
    }
    const auto holder = store::WriterLock::holder(*store_dir);
    std::vector<coordinator::SetAside> set_aside;
    std::uint64_t records = 0;
    {
      store::EventStore store = open_store(*store_dir, false);
      coordinator::Scheduler scheduler;
      auto replayed = coordinator::replay_setting_aside(
          store.snapshot(), [&] { scheduler = coordinator::Scheduler(); },
          [&](coordinator::OrchestrationRecord&& record) { scheduler.replay(std::move(record)); },
          [](const store::EventView&) {});
      if (!replayed) {
        throw CommandFailed("the orchestration log of " + *store_dir +
                            " cannot be read, and cannot be repaired by setting records aside: " +
                            replayed.error().message);
      }
      set_aside = std::move(replayed->set_aside);
      records = replayed->records;
    }
    bool repaired = false;
    if (*repair && !set_aside.empty()) {
      coordinator::ServerConfig config;
      config.store = *store_dir;
      const Log log = [](LogLevel level, const std::string& message) {
        if (level >= LogLevel::warn) {
          std::fprintf(stderr, "forktrial: %s\n", terminal_safe(message).c_str());
        }
      };
      coordinator::repair_log(config, log);
      repaired = true;
    }
    if (*json) {
      ordered_json doc{{"store", *store_dir},
                       {"writer", holder ? ordered_json{{"pid", holder->pid},
                                                        {"host", holder->host},
                                                        {"command", holder->command}}
                                         : ordered_json(nullptr)},
                       {"log_records", records},
                       {"set_aside", set_aside_json(set_aside)},
                       {"repaired", repaired}};
      std::cout << json_text(doc) << '\n';
    } else {
      std::printf("store %s\n", terminal_safe(*store_dir).c_str());
      std::printf(
          "  writer: %s\n",
          holder ? ("held by a coordinator, " + terminal_safe(store::describe(*holder))).c_str()
                 : "none (no coordinator runs on it)");
      std::printf("  orchestration log: %llu records apply",
                  static_cast<unsigned long long>(records));
      if (set_aside.empty()) {
        std::printf("; none is set aside\n");
      } else {
        std::printf(
            "; %zu do not apply to the state the others build%s:\n", set_aside.size(),
            repaired ? " and are set aside for good (the log is compacted without them)" : "");
        for (const auto& record : set_aside) {
          std::printf("    %s\n", terminal_safe(coordinator::describe(record)).c_str());
        }
        if (!repaired) {
          std::printf(
              "  a coordinator's start sets them aside and compacts its log; or, with no "
              "coordinator on the store: forktrial store check --store %s --repair\n",
              terminal_safe(*store_dir).c_str());
        }
      }
    }
    if (!set_aside.empty() && !repaired) throw ExitStatus(1);
  });
}

void add_store_commands(CLI::App& app) {
  add_gc(app);
  add_compact(app);
  add_store_check(app);
}

}  // namespace forktrial::tools

// The coordinator's metrics after known sequences of a real Scheduler's
// inputs: each count by hand, the exposition strict, the gauges rebuilt after
// a replay, and every metric listed in docs/cluster.md.
#include "coordinator/metrics.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

#include "store/event_store.h"
#include "tests/coordinator/scheduler_support.h"
#include "tests/support/exposition.h"
#include "transport/metrics_endpoint.h"

namespace forktrial::coordinator {
namespace {

using testing::at;
using testing::Logged;
using testing::trial;
using Exposition = forktrial::testing::Exposition;

constexpr SchedulerConfig kConfig{Duration{10'000}, Duration{20'000}, 2};

Exposition scrape(const CoordinatorMetrics& metrics) {
  const std::string text = transport::metrics_text(*metrics.registry());
  auto parsed = forktrial::testing::parse_exposition(text);
  INFO(text);
  REQUIRE(parsed.has_value());
  return *parsed;
}

// A scheduler's inputs, committed to the metrics as the server does: the
// records since the last commit, then the gauges observed.
struct Watched {
  Logged s{kConfig};
  CoordinatorMetrics metrics;
  std::size_t committed = 0;

  void commit(bool store_full = false) {
    metrics.committed(std::span(s.log).subspan(committed));
    committed = s.log.size();
    metrics.observe(s.scheduler, store_full);
  }
  void tick(Instant now) {
    metrics.ticked(s.tick(now));
    commit();
  }
};

std::string read_doc(const std::string& name) {
  std::ifstream in(std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "docs" / name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("the coordinator's metrics count a known sequence of leases, reports and lapses",
          "[coordinator][metrics]") {
  Watched w;
  w.s.submit(testing::job("a", 0, 3), at(0));
  w.s.submit(testing::job("b", 0, 1), at(0));
  w.s.join("w1", 2, at(0));
  w.s.join("w2", 1, at(0));
  REQUIRE(testing::names(w.s.work("w1", 2, at(100))) == std::vector<std::string>{"a#0", "b#0"});
  REQUIRE(testing::names(w.s.work("w2", 1, at(100))) == std::vector<std::string>{"a#1"});
  w.commit();
  Exposition m = scrape(w.metrics);
  CHECK(m.at("forktrial_trials{status=\"queued\"}") == 1);
  CHECK(m.at("forktrial_trials{status=\"leased\"}") == 3);
  CHECK(m.at("forktrial_job_queued_trials{job_id=\"a\"}") == 1);
  CHECK(m.at("forktrial_job_queued_trials{job_id=\"b\"}") == 0);
  CHECK(m.at("forktrial_jobs{state=\"active\"}") == 2);
  CHECK(m.at("forktrial_cluster_slots") == 3);
  CHECK(m.at("forktrial_cluster_slots_busy") == 3);
  CHECK(m.at("forktrial_workers_alive") == 2);
  CHECK(m.at("forktrial_trial_attempts_total") == 3);

  // Two reports reconciled, one of them finishing job b.
  REQUIRE(w.s.report("w1", trial("a", 0), 1, at(1'000)).verdict == ReportVerdict::accepted);
  REQUIRE(w.s.report("w1", trial("b", 0), 1, at(1'000)).verdict == ReportVerdict::accepted);
  w.commit();
  w.s.reconcile(trial("a", 0), at(1'010), Outcome::completed);
  w.metrics.reconciled(Outcome::completed, std::chrono::milliseconds(2),
                       std::chrono::milliseconds(800));
  w.s.reconcile(trial("b", 0), at(1'010), Outcome::scenario_failed);
  w.metrics.reconciled(Outcome::scenario_failed, std::chrono::milliseconds(30),
                       std::chrono::milliseconds(4'000));
  w.s.heartbeat("w1", {}, at(5'000));
  w.commit();
  // w2's lease of a#1 lapses (w2 itself is not silent long enough to be
  // lost), and its late report is fenced.
  w.tick(at(10'100));
  REQUIRE(w.s.report("w2", trial("a", 1), 1, at(10'200)).verdict == ReportVerdict::fenced);
  w.commit();
  w.metrics.rejected(ErrorCode::invalid_argument);
  w.metrics.rejected(ErrorCode::invalid_argument);
  w.metrics.rejected(ErrorCode::unavailable);
  w.metrics.blob_bytes(BlobDirection::uploaded, 100);
  w.metrics.blob_bytes(BlobDirection::served, 40);
  w.metrics.blob_bytes(BlobDirection::served, 60);
  w.metrics.undelivered();

  m = scrape(w.metrics);
  CHECK(m.at("forktrial_trials{status=\"queued\"}") == 2);
  CHECK(m.at("forktrial_trials{status=\"leased\"}") == 0);
  CHECK(m.at("forktrial_trials{status=\"reconciled\"}") == 2);
  CHECK(m.at("forktrial_trials{status=\"abandoned\"}") == 0);
  CHECK(m.at("forktrial_job_queued_trials{job_id=\"a\"}") == 2);
  CHECK_FALSE(m.has("forktrial_job_queued_trials{job_id=\"b\"}"));  // finished: its series went
  CHECK(m.at("forktrial_jobs{state=\"active\"}") == 1);
  CHECK(m.at("forktrial_jobs{state=\"finished\"}") == 1);
  CHECK(m.at("forktrial_cluster_slots_busy") == 0);
  CHECK(m.at("forktrial_trial_attempts_total") == 3);
  CHECK(m.at("forktrial_trials_requeued_total") == 1);
  CHECK(m.at("forktrial_trials_abandoned_total") == 0);
  CHECK(m.at("forktrial_lease_expiries_total") == 1);
  CHECK(m.at("forktrial_reports_fenced_total") == 1);
  CHECK(m.at("forktrial_jobs_submitted_total") == 2);
  CHECK(m.at("forktrial_workers_joined_total") == 2);
  CHECK(m.at("forktrial_workers_lost_total") == 0);
  CHECK(m.at("forktrial_trials_reconciled_total{outcome=\"completed\"}") == 1);
  CHECK(m.at("forktrial_trials_reconciled_total{outcome=\"scenario_failed\"}") == 1);
  CHECK(m.at("forktrial_trials_reconciled_total{outcome=\"crashed\"}") == 0);
  CHECK(m.at("forktrial_trial_duration_seconds_count{outcome=\"completed\"}") == 1);
  CHECK(m.at("forktrial_trial_duration_seconds_sum{outcome=\"completed\"}") == Approx(0.8));
  CHECK(m.at("forktrial_trial_duration_seconds_bucket{le=\"0.5\",outcome=\"completed\"}") == 0);
  CHECK(m.at("forktrial_trial_duration_seconds_bucket{le=\"1\",outcome=\"completed\"}") == 1);
  CHECK(m.at("forktrial_trial_duration_seconds_bucket{le=\"2.5\",outcome=\"scenario_failed\"}") ==
        0);
  CHECK(m.at("forktrial_trial_duration_seconds_bucket{le=\"5\",outcome=\"scenario_failed\"}") == 1);
  CHECK(m.at("forktrial_reconciliation_duration_seconds_count") == 2);
  CHECK(m.at("forktrial_reconciliation_duration_seconds_sum") == Approx(0.032));
  CHECK(m.at("forktrial_reconciliation_duration_seconds_bucket{le=\"0.0025\"}") == 1);
  CHECK(m.at("forktrial_messages_rejected_total{reason=\"invalid_argument\"}") == 2);
  CHECK(m.at("forktrial_messages_rejected_total{reason=\"unavailable\"}") == 1);
  CHECK(m.at("forktrial_messages_rejected_total{reason=\"not_found\"}") == 0);
  CHECK(m.at("forktrial_blob_bytes_total{direction=\"uploaded\"}") == 100);
  CHECK(m.at("forktrial_blob_bytes_total{direction=\"served\"}") == 100);
  CHECK(m.at("forktrial_replies_undelivered_total") == 1);
  CHECK(m.at("forktrial_store_full") == 0);
  CHECK(m.types.at("forktrial_trials_reconciled_total") == "counter");
  CHECK(m.types.at("forktrial_trials") == "gauge");
  CHECK(m.types.at("forktrial_reconciliation_duration_seconds") == "histogram");

  // The last attempt of a#1 lapses while w2, silent since it joined, is
  // lost: one abandonment, one worker lost.
  REQUIRE(w.s.work("w1", 2, at(10'300)).size() == 2);
  w.s.heartbeat("w1", {}, at(19'000));
  w.tick(at(20'300));
  m = scrape(w.metrics);
  CHECK(m.at("forktrial_workers_lost_total") == 1);
  CHECK(m.at("forktrial_workers_alive") == 1);
  CHECK(m.at("forktrial_cluster_slots") == 2);
  CHECK(m.at("forktrial_trials_abandoned_total") == 1);
  CHECK(m.at("forktrial_trials_requeued_total") == 2);
  CHECK(m.at("forktrial_lease_expiries_total") == 3);
  CHECK(m.at("forktrial_trial_attempts_total") == 5);
  w.metrics.observe(w.s.scheduler, true);
  CHECK(scrape(w.metrics).at("forktrial_store_full") == 1);
}

TEST_CASE("a trial answered from the result cache is counted as cached, not as a report or a lease",
          "[coordinator][metrics][cache]") {
  Watched w;
  w.s.submit(testing::job("a", 0, 2), at(0));
  w.s.keep(w.s.scheduler.cached(trial("a", 1), trial("z", 0), Outcome::completed, at(1)));
  w.commit();
  const Exposition m = scrape(w.metrics);
  CHECK(m.at("forktrial_trials_cached_total") == 1);
  CHECK(m.at("forktrial_trials{status=\"reconciled\"}") == 1);
  CHECK(m.at("forktrial_trials{status=\"queued\"}") == 1);
  CHECK(m.at("forktrial_trial_attempts_total") == 0);
  CHECK(m.at("forktrial_trials_reconciled_total{outcome=\"completed\"}") == 0);
}

TEST_CASE("lease expiries are the failed attempts a tick decides after its last lost worker",
          "[coordinator][metrics]") {
  const auto requeued = [](std::uint32_t index) {
    return TrialRequeued{trial("a", index), 1, "r", at(0)};
  };
  const auto lost = [](const std::string& worker) {
    return WorkerLost{WorkerId{worker}, "silent", at(0)};
  };
  CHECK(lease_expiries_in({}) == 0);
  CHECK(lease_expiries_in({requeued(0), requeued(1)}) == 2);
  CHECK(lease_expiries_in({requeued(0), lost("w1"), requeued(1),
                           TrialAbandoned{trial("a", 2), 2, {"x", "y"}, at(0)}}) == 2);
  CHECK(lease_expiries_in({requeued(0), lost("w1"), requeued(1), lost("w2")}) == 0);

  // The order it relies on, from a real tick: w2 is lost holding a#1, and
  // w1's lease of a#0 lapses in the same tick.
  Logged s(kConfig);
  s.submit(testing::job("a", 0, 2), at(0));
  s.join("w1", 1, at(0));
  s.join("w2", 1, at(0));
  REQUIRE(s.work("w1", 1, at(15'000)).size() == 1);
  REQUIRE(s.work("w2", 1, at(15'000)).size() == 1);
  s.heartbeat("w1", {}, at(15'000));  // w1 stays alive; its lease is not renewed
  const Records tick = s.tick(at(25'000));
  REQUIRE(tick.size() == 3);
  CHECK(lease_expiries_in(tick) == 1);
  CHECK(std::get<TrialRequeued>(tick.back()).reason.starts_with("lease on worker w1 expired"));
}

TEST_CASE("expiries of a tick undone by a full store are not counted", "[coordinator][metrics]") {
  Watched w;
  w.s.submit(testing::job("a", 0, 1), at(0));
  w.s.join("w1", 1, at(0));
  REQUIRE(w.s.work("w1", 1, at(0)).size() == 1);
  w.commit();
  w.metrics.ticked(w.s.tick(at(10'000)));
  w.metrics.undone();
  w.metrics.committed({});
  CHECK(scrape(w.metrics).at("forktrial_lease_expiries_total") == 0);
}

TEST_CASE("after a restart the gauges show the replayed state and the counters start at 0",
          "[coordinator][metrics]") {
  Watched w;
  busy_morning(w.s);
  w.commit();
  const Exposition before = scrape(w.metrics);
  CHECK(before.at("forktrial_trial_attempts_total") > 0);

  const Scheduler restarted = testing::replayed(w.s.log, kConfig);
  CoordinatorMetrics fresh;
  fresh.resync(restarted);
  fresh.observe(restarted, false);
  const Exposition after = scrape(fresh);
  std::size_t gauges = 0;
  for (const auto& [series, value] : before.samples) {
    const std::string family = series.substr(0, series.find('{'));
    INFO(series);
    if (before.types.contains(family) && before.types.at(family) == "gauge") {
      CHECK(after.at(series) == value);
      ++gauges;
    } else if (before.types.contains(family) && before.types.at(family) == "counter") {
      CHECK(after.at(series) == 0);
    }
  }
  CHECK(gauges >= 12);
  // Every job of the morning and its statuses, from the scheduler itself.
  std::uint64_t queued = 0;
  std::uint64_t total = 0;
  for (const JobStatus& job : restarted.jobs()) {
    queued += job.count(TrialStatus::queued);
    total += job.trials;
  }
  CHECK(after.at("forktrial_trials{status=\"queued\"}") == queued);
  double summed = 0;
  for (std::size_t s = 0; s < kTrialStatusCount; ++s) {
    summed += after.at("forktrial_trials{status=\"" +
                       std::string(trial_status_name(static_cast<TrialStatus>(s))) + "\"}");
  }
  CHECK(summed == total);
}

TEST_CASE("the store's room, the log's length and the build are gauges of their own",
          "[coordinator][metrics]") {
  CoordinatorMetrics metrics;
  Exposition m = scrape(metrics);
  CHECK(m.at("forktrial_build_info{store_schema=\"" + std::to_string(store::kSchemaVersion) +
             "\",version=\"" FORKTRIAL_VERSION_FOR_TESTS "\",wire_protocol=\"" +
             std::to_string(schema::wire::K_PROTOCOL_VERSION) + "\"}") == 1);
  CHECK(m.at("forktrial_store_disk_free_bytes") == 0);  // nothing looked at yet

  metrics.observe_store(StoreDisk{5'000, 1'000, 4'096, 8'192}, 77);
  m = scrape(metrics);
  CHECK(m.at("forktrial_store_disk_free_bytes") == 5'000);
  CHECK(m.at("forktrial_store_bytes") == 1'000);
  CHECK(m.at("forktrial_store_map_bytes") == 4'096);
  CHECK(m.at("forktrial_store_map_limit_bytes") == 8'192);
  CHECK(m.at("forktrial_orchestration_log_records") == 77);
  // What could not be told this time keeps its last value.
  metrics.observe_store(StoreDisk{std::nullopt, 2'000, 4'096, 8'192}, std::nullopt);
  m = scrape(metrics);
  CHECK(m.at("forktrial_store_disk_free_bytes") == 5'000);
  CHECK(m.at("forktrial_store_bytes") == 2'000);
  CHECK(m.at("forktrial_orchestration_log_records") == 77);
  for (const char* family :
       {"forktrial_store_bytes", "forktrial_orchestration_log_records", "forktrial_build_info",
        "process_open_fds", "process_resident_memory_bytes", "process_start_time_seconds"}) {
    INFO(family);
    CHECK(m.types.at(family) == "gauge");
  }
  metrics.observe_process(std::chrono::steady_clock::time_point{});
  CHECK(scrape(metrics).at("process_open_fds") >= 3);
}

TEST_CASE("the cluster's slots and busy slots are two families, each summed once",
          "[coordinator][metrics]") {
  Watched w;
  w.s.join("w1", 4, at(0));
  w.s.join("w2", 2, at(0));
  w.s.submit(testing::job("a", 0, 3), at(0));
  REQUIRE(w.s.work("w1", 4, at(0)).size() == 3);
  w.commit();
  const Exposition m = scrape(w.metrics);
  CHECK(m.at("forktrial_cluster_slots") == 6);
  CHECK(m.at("forktrial_cluster_slots_busy") == 3);
  for (const auto& [series, value] : m.samples) {
    INFO(series);
    CHECK_FALSE(series.starts_with("forktrial_cluster_slots{"));  // no label to sum across
  }
}

TEST_CASE("docs/cluster.md lists every metric the coordinator serves", "[coordinator][metrics]") {
  Watched w;  // with a job, so that the per-job family has a series
  w.s.submit(testing::job("a", 0, 1), at(0));
  w.commit();
  const std::string doc = read_doc("cluster.md");
  const Exposition m = scrape(w.metrics);
  CHECK(m.types.size() == 33);
  for (const auto& [family, type] : m.types) {
    INFO(family);
    CHECK(doc.find("`" + family + "`") != std::string::npos);
  }
}

TEST_CASE("the store's commits and flushes are counters that catch up with its totals",
          "[coordinator][metrics]") {
  CoordinatorMetrics metrics;
  metrics.store_writes(3, 2);
  metrics.store_writes(5, 2);
  auto m = scrape(metrics);
  CHECK(m.at("forktrial_store_commits_total") == 5);
  CHECK(m.at("forktrial_store_syncs_total") == 2);
  CHECK(m.types.at("forktrial_store_commits_total") == "counter");
  // Totals never go back: an older reading changes nothing.
  metrics.store_writes(4, 1);
  m = scrape(metrics);
  CHECK(m.at("forktrial_store_commits_total") == 5);
  CHECK(m.at("forktrial_store_syncs_total") == 2);
}

}  // namespace
}  // namespace forktrial::coordinator

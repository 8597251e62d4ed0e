// A worker's metrics after a known sequence of what its loop tells them: each
// count by hand, the exposition strict, and every metric listed in
// docs/cluster.md. The daemon itself is scraped by the cluster tests.
#include "worker/metrics.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/support/exposition.h"
#include "transport/metrics_endpoint.h"

namespace forktrial::worker {
namespace {

using Exposition = forktrial::testing::Exposition;
using std::chrono::milliseconds;

Exposition scrape(const WorkerMetrics& metrics) {
  const std::string text = transport::metrics_text(*metrics.registry());
  auto parsed = forktrial::testing::parse_exposition(text);
  INFO(text);
  REQUIRE(parsed.has_value());
  return *parsed;
}

TEST_CASE("a worker's metrics count a known sequence of trials, fetches and refusals",
          "[worker][metrics]") {
  WorkerMetrics metrics;
  Exposition m = scrape(metrics);
  CHECK(m.at("forktrial_worker_trials_total{outcome=\"completed\"}") == 0);
  CHECK(m.at("forktrial_worker_slots") == 0);

  metrics.trial_reported(Outcome::completed, milliseconds(1'200));
  metrics.trial_reported(Outcome::completed, milliseconds(40));
  metrics.trial_reported(Outcome::crashed, milliseconds(300));
  metrics.attempt_failed();
  metrics.trial_stopped();
  metrics.trial_stopped();
  for (const bool hit : {false, false, true, true, true}) metrics.cache_lookup(hit);
  metrics.cache_evicted();
  metrics.blob_bytes_received(65'536);
  metrics.blob_bytes_received(100);
  metrics.rejected(ErrorCode::unavailable);
  metrics.rejected(ErrorCode::failed_precondition);
  metrics.rejected(ErrorCode::failed_precondition);
  metrics.unreadable();
  metrics.unsent();
  metrics.observe({.slots = 4,
                   .busy_slots = 3,
                   .assignments = 5,
                   .cache_bytes = 1'000,
                   .cache_capacity = 4'096,
                   .corrupt_drops = 2,
                   .at = std::chrono::steady_clock::time_point{}});
  metrics.observe({.slots = 4,
                   .busy_slots = 1,
                   .assignments = 2,
                   .cache_bytes = 900,
                   .cache_capacity = 4'096,
                   .corrupt_drops = 3,
                   .at = std::chrono::steady_clock::time_point{}});
  CHECK(scrape(metrics).at("process_open_fds") >= 3);  // the worker process's own

  m = scrape(metrics);
  CHECK(m.at("forktrial_worker_trials_total{outcome=\"completed\"}") == 2);
  CHECK(m.at("forktrial_worker_trials_total{outcome=\"crashed\"}") == 1);
  CHECK(m.at("forktrial_worker_trials_total{outcome=\"limits_exceeded\"}") == 0);
  CHECK(m.at("forktrial_worker_trial_duration_seconds_count{outcome=\"completed\"}") == 2);
  CHECK(m.at("forktrial_worker_trial_duration_seconds_sum{outcome=\"completed\"}") == Approx(1.24));
  CHECK(m.at("forktrial_worker_trial_duration_seconds_bucket{le=\"0.05\",outcome=\"completed\"}") ==
        1);
  CHECK(m.at("forktrial_worker_trial_duration_seconds_bucket{le=\"1\",outcome=\"completed\"}") ==
        1);
  CHECK(m.at("forktrial_worker_trial_duration_seconds_bucket{le=\"2.5\",outcome=\"completed\"}") ==
        2);
  CHECK(m.at("forktrial_worker_attempts_failed_total") == 1);
  CHECK(m.at("forktrial_worker_trials_stopped_total") == 2);
  CHECK(m.at("forktrial_worker_cache_hits_total") == 3);
  CHECK(m.at("forktrial_worker_cache_misses_total") == 2);
  CHECK(m.at("forktrial_worker_cache_evictions_total") == 1);
  CHECK(m.at("forktrial_worker_cache_corrupt_drops_total") == 3);
  CHECK(m.at("forktrial_worker_blob_bytes_received_total") == 65'636);
  CHECK(m.at("forktrial_worker_messages_rejected_total{reason=\"unavailable\"}") == 1);
  CHECK(m.at("forktrial_worker_messages_rejected_total{reason=\"failed_precondition\"}") == 2);
  CHECK(m.at("forktrial_worker_messages_rejected_total{reason=\"invalid_argument\"}") == 0);
  CHECK(m.at("forktrial_worker_messages_unreadable_total") == 1);
  CHECK(m.at("forktrial_worker_messages_unsent_total") == 1);
  CHECK(m.at("forktrial_worker_slots") == 4);
  CHECK(m.at("forktrial_worker_slots_busy") == 1);
  CHECK(m.at("forktrial_worker_assignments") == 2);
  CHECK(m.at("forktrial_worker_cache_bytes") == 900);
  CHECK(m.at("forktrial_worker_cache_capacity_bytes") == 4'096);
  CHECK(m.types.at("forktrial_worker_trials_total") == "counter");
  CHECK(m.types.at("forktrial_worker_cache_bytes") == "gauge");
  CHECK(m.types.at("forktrial_worker_trial_duration_seconds") == "histogram");
}

TEST_CASE("docs/cluster.md lists every metric a worker serves", "[worker][metrics]") {
  WorkerMetrics metrics;
  std::ifstream in(std::filesystem::path(FORKTRIAL_SOURCE_DIR) / "docs" / "cluster.md");
  const std::string doc(std::istreambuf_iterator<char>(in), {});
  const Exposition m = scrape(metrics);
  CHECK(m.types.size() == 20);
  for (const auto& [family, type] : m.types) {
    INFO(family);
    // Its own, or a process's under Prometheus's standard names.
    CHECK((family.starts_with("forktrial_worker_") || family.starts_with("process_")));
    CHECK(doc.find("`" + family + "`") != std::string::npos);
  }
}

}  // namespace
}  // namespace forktrial::worker

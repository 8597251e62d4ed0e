// 100,000 queued trials: what they cost in memory, and a drain that would not
// finish within the test's time limit if an assignment scanned the queue.
// Timings are the benchmarks' business; this test asserts none.
#include <catch2/catch.hpp>
#include <cstdint>
#include <fstream>
#include <string>

#include "coordinator/scheduler.h"
#include "tests/coordinator/scheduler_support.h"

namespace forktrial::coordinator {
namespace {

using testing::at;

constexpr std::uint32_t kTrials = 100'000;
constexpr std::uint32_t kJobs = 4;
constexpr std::uint32_t kWorkers = 50;
constexpr std::uint32_t kSlots = 8;

// The resident set of this process in bytes (VmRSS of /proc/self/status).
std::uint64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      std::uint64_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

TEST_CASE("a hundred thousand queued trials stay small and drain without a scan of the queue",
          "[coordinator][scale]") {
  Scheduler s;
  const std::uint64_t before = resident_bytes();
  for (std::uint32_t j = 0; j < kJobs; ++j) {
    JobSubmission job{JobId{"job" + std::to_string(j)}, static_cast<int>(j % 2), "", {}};
    job.trials.reserve(kTrials / kJobs);
    for (std::uint32_t i = 0; i < kTrials / kJobs; ++i) {
      // A payload the size of a small specification; 500 segments, 2 bundles.
      job.trials.push_back(TrialInput{std::string(200, 'p'),
                                      testing::digest(i % 500),
                                      {testing::digest(1000 + static_cast<int>(j % 2))}});
    }
    REQUIRE(s.submit(std::move(job), at(0)));
  }
  const std::uint64_t queued_cost = resident_bytes() - before;
  INFO("resident set grew by " << queued_cost / (1 << 20) << " MiB for " << kTrials
                               << " queued trials");
  CHECK(s.queued_trials() == kTrials);
  CHECK(s.job_status(JobId{"job3"})->count(TrialStatus::queued) == kTrials / kJobs);
#ifndef FORKTRIAL_SANITIZED
  CHECK(queued_cost < std::uint64_t{300} << 20);
#endif

  for (std::uint32_t w = 0; w < kWorkers; ++w) {
    REQUIRE(s.worker_joined(
        WorkerHello{
            WorkerId{"w" + std::to_string(w)}, kSlots, 0, {testing::digest(static_cast<int>(w))}},
        at(0)));
  }
  std::uint64_t reconciled = 0;
  std::int64_t now = 0;
  while (s.queued_trials() > 0) {
    ++now;
    for (std::uint32_t w = 0; w < kWorkers; ++w) {
      const WorkerId worker{"w" + std::to_string(w)};
      const auto work = s.request_work(worker, kSlots, at(now));
      REQUIRE(work);
      for (const Assignment& assignment : work->assignments) {
        REQUIRE(s.on_report(worker, assignment.trial, assignment.attempt, at(now)).verdict ==
                ReportVerdict::accepted);
        REQUIRE(s.reconciled(assignment.trial, Outcome::completed, at(now)));
        ++reconciled;
      }
    }
  }
  CHECK(reconciled == kTrials);
  for (const JobStatus& job : s.jobs()) CHECK(job.finished());
  CHECK(now == kTrials / (kWorkers * kSlots));
}

}  // namespace
}  // namespace forktrial::coordinator

// Which trial children a stop from outside the worker killed: their deaths
// are not the trials' outcomes.
#include <signal.h>

#include <catch2/catch.hpp>

#include "worker/worker.h"

using forktrial::sandbox::TrialVerdict;
using forktrial::worker::stopped_from_outside;

namespace {

TrialVerdict killed_by(int signal) {
  TrialVerdict verdict;
  verdict.exit_code = -signal;
  return verdict;
}

}  // namespace

TEST_CASE("a child killed by a stop signal was stopped from outside the worker", "[worker][stop]") {
  for (int signal : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    CHECK(stopped_from_outside(killed_by(signal)) == signal);
  }
}

TEST_CASE("a child's own deaths and the sandbox's kills are the trial's outcome",
          "[worker][stop]") {
  // A crash of the child itself.
  for (int signal : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSYS}) {
    CHECK(stopped_from_outside(killed_by(signal)) == 0);
  }
  // The sandbox's own kills: SIGKILL (wall clock, memory) and the CPU net.
  CHECK(stopped_from_outside(killed_by(SIGKILL)) == 0);
  CHECK(stopped_from_outside(killed_by(SIGXCPU)) == 0);
  // An exit, whatever its code.
  TrialVerdict exited;
  exited.exit_code = 0;
  CHECK(stopped_from_outside(exited) == 0);
  exited.exit_code = 143;  // an exit code, even 128 + SIGTERM, is the child's own doing
  CHECK(stopped_from_outside(exited) == 0);
  // A net that stopped the child decides, whatever the signal.
  TrialVerdict netted = killed_by(SIGTERM);
  netted.stopped_by_net = true;
  CHECK(stopped_from_outside(netted) == 0);
}

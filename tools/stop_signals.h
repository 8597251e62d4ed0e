// SIGTERM and SIGINT as requests to stop: while a StopSignals lives, they
// cancel a Cancellation instead of ending the process, so the command can
// kill its children, remove its scratch directories and record nothing half
// done; then end_by() ends the process the way the signal would have.
#pragma once

#include <csignal>

#include "sandbox/cancellation.h"

namespace forktrial::tools {

// The signal that came while a StopSignals was installed, or 0.
int stop_signal_received();

// While alive, SIGTERM and SIGINT cancel `cancellation`; the destructor puts
// the previous dispositions back. A signal the command was started with
// ignored (a shell's background job ignores SIGINT) stays ignored. No
// SA_RESTART: a blocking call the signal interrupts returns.
class StopSignals {
 public:
  explicit StopSignals(sandbox::Cancellation& cancellation);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kSignals[] = {SIGTERM, SIGINT};
  struct sigaction previous_[std::size(kSignals)]{};
  bool installed_[std::size(kSignals)] = {};
};

// Ends the process the way `signal` would have, once nothing is left to clean
// up: a shell then sees a death by that signal (status 128 + signal) and, for
// SIGINT, stops the script that ran the command.
[[noreturn]] void end_by(int signal);

}  // namespace forktrial::tools

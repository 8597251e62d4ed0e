#include "tools/stop_signals.h"

#include <signal.h>
#include <string.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"

namespace forktrial::tools {
namespace {

// The cancellation a SIGTERM or SIGINT sets, and the signal that came.
// Written by the handlers, hence atomics: a handler may run at any point.
std::atomic<sandbox::Cancellation*> stop_target{nullptr};
volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int signal) {
  stop_signal = signal;
  if (sandbox::Cancellation* target = stop_target.load()) target->cancel();
}

}  // namespace

int stop_signal_received() {
  return stop_signal;
}

StopSignals::StopSignals(sandbox::Cancellation& cancellation) {
  stop_target = &cancellation;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  for (int signal : kSignals) sigaddset(&action.sa_mask, signal);
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    const std::string name = std::string("SIG") + ::sigabbrev_np(kSignals[i]);
    if (::sigaction(kSignals[i], nullptr, &previous_[i]) != 0) {
      throw SystemError("sigaction(" + name + ", nullptr, &previous)", errno);
    }
    installed_[i] = previous_[i].sa_handler != SIG_IGN;
    if (installed_[i] && ::sigaction(kSignals[i], &action, nullptr) != 0) {
      throw SystemError("sigaction(" + name + ", on_stop_signal)", errno);
    }
  }
}

StopSignals::~StopSignals() {
  for (std::size_t i = 0; i < std::size(kSignals); ++i) {
    if (installed_[i]) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  stop_target = nullptr;
}

void end_by(int signal) {
  std::fflush(stdout);
  std::fflush(stderr);
  ::signal(signal, SIG_DFL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal);
  ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
  ::raise(signal);
  std::_Exit(128 + signal);
}

}  // namespace forktrial::tools

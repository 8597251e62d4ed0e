// The executor seam: what runs a TrialSpecification. The local executor runs
// it in a forktrial-child on this machine; the distributed half will run it on
// a worker. Every executor states its isolation guarantees honestly, so a
// caller (or a coordinator choosing workers) knows what a trial is and is not
// protected from.
//
// Executors are not required to be thread-safe; LocalSubprocessExecutor is
// (each execute() call owns its child and scratch store).
#pragma once

#include <string>
#include <vector>

#include "sandbox/isolation.h"
#include "sandbox/trial.h"
#include "sandbox/trial_types.h"
#include "store/event_store.h"

namespace forktrial::sandbox {

struct Guarantee {
  bool provided = false;
  std::string how;  // what provides it, or why it is not provided
};

struct IsolationGuarantees {
  Isolation level = Isolation::standard;  // what the executor was asked for
  Guarantee process;           // a fresh process per trial; the caller survives any crash
  Guarantee filesystem;        // the trial cannot read or write outside what it is given
  Guarantee network;           // the trial cannot reach the network
  Guarantee syscalls;          // system calls are filtered
  Guarantee environment;       // only an allow-listed environment reaches the trial
  Guarantee security_sandbox;  // safe against deliberately hostile code
};

class TrialExecutor {
 public:
  virtual ~TrialExecutor() = default;
  virtual const IsolationGuarantees& isolation() const = 0;
  // Runs one trial against `store` (which holds the parent run) and returns
  // its report. Throws only for setup problems (see run_trial).
  virtual TrialReport execute(store::EventStore& store, const TrialSpecification& spec) = 0;
};

// Runs each trial in a forktrial-child subprocess on this machine. Under
// strict isolation the constructor probes the host (probe_strict_nets), so
// the guarantees say which nets apply here and what provides them.
class LocalSubprocessExecutor final : public TrialExecutor {
 public:
  explicit LocalSubprocessExecutor(ChildOptions options = {});
  const IsolationGuarantees& isolation() const override { return isolation_; }
  TrialReport execute(store::EventStore& store, const TrialSpecification& spec) override;

 private:
  void add_strict_guarantees();
  ChildOptions options_;
  IsolationGuarantees isolation_;
};

}  // namespace forktrial::sandbox

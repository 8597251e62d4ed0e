# What a trial child tells its parent (the "tail"), written once on the
# child's fd 3 just before it exits. It is a signal only: the parent re-reads
# the store for every number and the store wins any disagreement.
#
# Ordinals are explicit and never reused; fields are only ever added.
@0xd3b5f0c1a2e49b07;

$import "/capnp/c++.capnp".namespace("forktrial::schema");

enum TrialOutcome {
  completed @0;
  scenarioFailed @1;
  limitsExceeded @2;
  materializationFailed @3;
  crashed @4;
}

# Which net stopped a trial whose outcome is limitsExceeded.
enum Net {
  none @0;
  eventBudget @1;
  memory @2;       # the Lua allocator cap or RLIMIT_AS
  cpu @3;
  wallClock @4;
  writeBudget @5;  # max_appended_events or max_appended_bytes
}

struct TrialTail {
  outcome @0 :TrialOutcome;
  net @1 :Net;
  eventsAppended @2 :UInt64;    # events the child appended after the fork point
  behaviorFailures @3 :UInt64;  # behavior.failed events among them
  lastSeq @4 :UInt64;           # the seq of the last event the child appended
  detail @5 :Text;
  warnings @6 :List(Text);      # nets that degraded on this host
}

# Events and run records as the store keeps them (see docs/store-format.md).
#
# Ordinals are explicit and never reused: a field is only ever added with the
# next ordinal, so a reader built from an older copy of this file still reads
# newer records. A change that would make an older reader misread a record
# bumps the store's schema version instead (store/store_format.h).
@0x862b35740bc77cf5;

$import "/capnp/c++.capnp".namespace("forktrial::schema");

# One entry of a run's append-only log. The fields follow activegraph's event
# shape; `seq` is the store's position of the event in the run's history
# (1-based, continuous through a fork's lineage).
struct Event {
  id @0 :Text;          # "evt_001": unique within the run's history
  type @1 :Text;        # "goal.created", "behavior.failed", ...
  payload @2 :Text;     # a JSON object, as compact JSON text
  timestamp @3 :Text;   # ISO-8601, UTC
  seq @4 :UInt64;

  # Nullable fields are unions, so "absent" and "empty string" stay distinct.
  actor :union {
    noActor @5 :Void;
    actorName @6 :Text;
  }
  frame :union {
    noFrame @7 :Void;
    frameId @8 :Text;
  }
  cause :union {
    noCause @9 :Void;
    causedBy @10 :Text;
  }
}

# Where a fork branches off its parent: the parent's history up to and
# including this event is the fork's inherited prefix.
struct ForkPoint {
  parentRun @0 :Text;
  eventId @1 :Text;
  seq @2 :UInt64;
}

# The immutable description of a run. A run's head is not stored here: it is
# derived from the events table (see docs/store-format.md), so a run record is
# written exactly once.
struct RunRecord {
  id @0 :Text;
  label @1 :Text;
  createdAt @2 :Text;   # ISO-8601, UTC
  number @3 :UInt64;    # the store-internal run number used in event keys

  lineage :union {
    root @4 :Void;
    forkOf @5 :ForkPoint;
  }

  # activegraph's runs.goal and runs.frame_id; records written before these
  # fields read as noGoal / noFrame.
  goal :union {
    noGoal @6 :Void;
    goalText @7 :Text;
  }
  frame :union {
    noFrame @8 :Void;
    frameId @9 :Text;
  }

  # Who may fork the run through a coordinator: the public key (Z85) of the
  # client that imported it there, or absent (records written before this
  # field, runs imported into the store directly by its operators, runs
  # imported without keys): every client may.
  owner @10 :Text;
  # The digest of the file a client imported the run from (absent for other
  # runs): a resend of the same import is answered again, another file
  # under the same id is refused.
  source @11 :Data;
}

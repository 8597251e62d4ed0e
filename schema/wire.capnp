# The messages between the coordinator, its workers and command-line
# clients (docs/wire-protocol.md). Every ZeroMQ message is one frame holding
# one Envelope; the coordinator's ROUTER adds the peer's routing id in front.
#
# Ordinals are explicit and never reused within a protocol version: a field
# or a union arm is only ever added with the next ordinal. A peer answers an
# arm it does not know with an Error (code invalidArgument), never by
# crashing; a change an older peer would misread bumps kProtocolVersion
# instead, and peers of different versions refuse each other's frames before
# reading them.
@0xb0c7f54c3e1a9d62;

$import "/capnp/c++.capnp".namespace("forktrial::schema::wire");

using Trial = import "trial.capnp";

# 2: every field with a closed set of values is an enum (Report.outcome and
# isolation, ReportAck.verdict), and ReportAck says why it refused.
# 3: ErrorCode is forktrial's error categories (the ordinals changed meaning).
const kProtocolVersion :UInt32 = 3;

# The most bytes a blob chunk carries.
const kMaxChunkBytes :UInt32 = 1048576;

struct Envelope {
  version @0 :UInt32;   # kProtocolVersion of the sender
  requestId @1 :UInt64; # chosen by the asker, echoed in the answer
  union {
    error @2 :Error;

    # worker -> coordinator
    workerHello @3 :WorkerHello;
    requestWork @4 :RequestWork;
    heartbeat @5 :Heartbeat;
    report @6 :Report;
    attemptFailed @7 :AttemptFailed;
    fetchBlob @8 :FetchBlob;

    # coordinator -> worker
    welcome @9 :Welcome;
    assignments @10 :Assignments;
    blobChunk @11 :BlobChunk;
    reportAck @12 :ReportAck;
    stopTrials @13 :StopTrials;

    # client -> coordinator
    clientHello @14 :Void;
    findMissing @15 :DigestList;
    putBlob @16 :BlobChunk;
    submitJob @17 :SubmitJob;
    statusRequest @18 :JobQuery;
    cancelJob @19 :JobQuery;
    resultsRequest @20 :ResultsRequest;
    workersRequest @21 :Void;

    # coordinator -> client
    missing @22 :DigestList;
    jobAccepted @23 :JobAccepted;
    jobStatus @24 :Json;
    results @25 :Results;
    workers @26 :Json;
    ok @27 :Void;

    # client -> coordinator, and its answer
    importRun @28 :ImportRun;
    runImported @29 :Json;

    # worker -> coordinator
    workerGoodbye @30 :WorkerGoodbye;
  }
}

# A worker that stops (SIGTERM, SIGINT) says so, after killing its trials, so
# that the coordinator requeues what it held at once rather than when its
# leases lapse. Answered `ok`; the worker does not wait long for it.
struct WorkerGoodbye {
  reason @0 :Text;             # why it stops, for people: "stopped by SIGTERM"
}

# Import a run of activegraph JSON Lines into the coordinator's store, as
# `forktrial run import` does into a local one. The file is uploaded first
# as a blob (findMissing, putBlob), then named here.
struct ImportRun {
  blob @0 :Digest;     # the JSON Lines file's bytes
  runId @1 :Text;      # the new run's id (the client chooses it, so a resend is recognised)
  label @2 :Text;
  forkOf @3 :Text;     # "": a root run; else the stored run it forks
  at @4 :Text;         # with forkOf: the parent's event it branches after
}

# forktrial's error categories (base/error.h ErrorCode), one to one and in
# the same order: an error on the wire is a Status. What a peer does with
# each is in docs/wire-protocol.md, "Errors".
enum ErrorCode {
  notFound @0;            # an unknown job, trial, worker or blob
  invalidArgument @1;     # malformed, another protocol version, an arm not for this peer,
                          # a field out of range: sending it again will not help
  failedPrecondition @2;  # the session is not in the state the message needs (a worker
                          # message before its hello, an upload chunk out of order): say
                          # hello again, or start over
  conflict @3;            # taken already: a job id submitted before
  resourceExhausted @4;   # over a limit: the frame, a blob, the queue
  unavailable @5;         # cannot be taken now (the store is full): send it again later
  cancelled @6;           # the job was cancelled
  internal @7;            # the coordinator broke: its log says more
}

struct Error {
  code @0 :ErrorCode;
  message @1 :Text;
}

struct Digest {
  sha256 @0 :Data;  # 32 bytes
}

struct DigestList {
  digests @0 :List(Digest);
}

# A JSON document (a status, a list of workers): the human-facing views the
# command line prints, versioned by their own fields.
struct Json {
  text @0 :Text;
}

struct TrialRef {
  job @0 :Text;
  index @1 :UInt32;
  attempt @2 :UInt32;
}

struct WorkerHello {
  workerId @0 :Text;
  slots @1 :UInt32;
  warnings @2 :List(Text);     # nets preflight says degrade on this host
  isolation @3 :Text;          # its guarantees, as JSON
  cached @4 :List(Digest);     # what its cache holds (bounded)
  prefetch @5 :UInt32;         # assignments it holds beyond its slots, ready to start
  executors @6 :List(ExecutorOffer);  # what it can run; empty: Lua alone (a worker before them)
}

# An executor a worker offers (docs/pack-format.md "Executors"): "lua" or
# "activegraph", and the version it runs, which the worker's results carry.
struct ExecutorOffer {
  name @0 :Text;
  version @1 :Text;
}

struct Welcome {
  leaseMillis @0 :UInt64;      # how often to heartbeat: well inside this
}

struct RequestWork {
  freeSlots @0 :UInt32;
}

struct Assignment {
  trial @0 :TrialRef;
  spec @1 :Text;               # canonical TrialSpecification JSON; pack roots are bundles
  forkRunId @2 :Text;          # the run the fork will be recorded as
  segment @3 :Digest;          # the parent's history up to the fork point
  bundles @4 :List(Bundle);    # every pack of the trial, candidate last
  leaseExpiresMillis @5 :Int64;
  parentRun @6 :ParentRun;     # set for an activegraph pack's trial: what its fork inherits
}

# activegraph's runs.goal and runs.frame_id of a trial's parent run, which
# activegraph's child finds on the fork's row; absent is NULL there.
struct ParentRun {
  goal :union {
    noGoal @0 :Void;
    goalText @1 :Text;
  }
  frame :union {
    noFrame @2 :Void;
    frameId @3 :Text;
  }
}

struct Bundle {
  pin @0 :Digest;              # the bundle hash the directory must have
  archive @1 :Digest;          # the blob holding the pack's archive
}

struct Assignments {
  assignments @0 :List(Assignment);
}

struct Heartbeat {
  running @0 :List(TrialRef);
}

struct StopTrials {
  trials @0 :List(TrialRef);   # kill these; their reports will be fenced
}

struct FetchBlob {
  digest @0 :Digest;
  offset @1 :UInt64;
  length @2 :UInt32;           # at most kMaxChunkBytes
}

struct BlobChunk {
  digest @0 :Digest;
  totalSize @1 :UInt64;
  offset @2 :UInt64;
  bytes @3 :Data;
}

struct Event {
  id @0 :Text;
  type @1 :Text;
  payload @2 :Text;
  timestamp @3 :Text;
  actor :union {
    noActor @4 :Void;
    actorName @5 :Text;
  }
  frame :union {
    noFrame @6 :Void;
    frameId @7 :Text;
  }
  cause :union {
    noCause @8 :Void;
    causedBy @9 :Text;
  }
}

struct Report {
  trial @0 :TrialRef;
  outcome @1 :Trial.TrialOutcome;
  detail @2 :Text;
  warnings @3 :List(Text);
  exitCode @4 :Int32;
  stoppedByNet @5 :Bool;
  wallClockKilled @6 :Bool;
  hasClaim @7 :Bool;
  claimedEvents @8 :UInt64;
  claimedFailures @9 :UInt64;
  forkSeq @10 :UInt64;
  events @11 :List(Event);     # the accepted delta, oldest first
  durationMillis @12 :UInt64;
  isolation @13 :IsolationLevel;  # the level the trial ran at
  executor @14 :ExecutorOffer;    # what ran the candidate, as the worker's hello offered it
  net @15 :Trial.Net;             # which net stopped a limitsExceeded trial; none otherwise
}

enum IsolationLevel {
  standard @0;
  strict @1;
}

# What the coordinator made of a report or an attemptFailed.
enum ReportVerdict {
  accepted @0;   # recorded: reconciled (a report) or requeued / abandoned (a failure)
  fenced @1;     # not the live lease of this worker (superseded, cancelled): nothing recorded
  duplicate @2;  # accepted before; nothing changes
  unknown @3;    # that attempt of that trial was never leased
  refused @4;    # breaks a rule every delta is held to, or the store refused it: the attempt failed
}

struct ReportAck {
  trial @0 :TrialRef;
  verdict @1 :ReportVerdict;
  reason @2 :Text;             # why, for fenced, unknown and refused; "" otherwise
}

struct AttemptFailed {
  trial @0 :TrialRef;
  reason @1 :Text;
}

struct SubmitJob {
  name @0 :Text;
  priority @1 :Int32;
  specs @2 :List(Text);        # canonical TrialSpecification JSON, pack roots as bundles
  bundles @3 :List(Bundle);    # every pack the specs name
  token @4 :Text;              # optional, 16 lowercase hex digits: the job is job_<token>,
                               # and the same submission sent again is answered with it
  part @5 :UInt32;             # a job too large for one message comes in `parts` messages
  parts @6 :UInt32;            # under one token, part 0 first; 0 or 1: the whole job here
  keepForks @7 :Text;          # the job's retention: "all", "failures", "none"; "": the
                               # policy `forktrial gc` is given (docs/cluster.md, "Retention")
  keepForksAfterMillis @8 :UInt64;  # once the job has been finished this long
  noCache @9 :Bool;            # every trial runs: none is answered from the result cache,
                               # and none's result is kept in it (`--no-cache`)
}

struct JobAccepted {
  job @0 :Text;
  total @1 :UInt64;
}

struct JobQuery {
  job @0 :Text;                # "" for every job
  holdMillis @1 :UInt32;       # statusRequest of one job: answer when it finishes, or after
                               # this long (at most 10 s), whichever comes first; 0: at once
}

struct ResultsRequest {
  job @0 :Text;
  after @1 :UInt32;            # results of trials with index >= after
  limit @2 :UInt32;
}

struct Results {
  lines @0 :List(Text);        # one JSON object per trial
  next @1 :UInt32;             # the index to ask from next; total when done
  total @2 :UInt32;
}

// The job a parent hands a trial child on stdin: the trial specification, the
// fork the child works on, and where that fork's scratch store lives. JSON,
// since it crosses one pipe once and is read before any candidate code runs.
// Candidate code cannot reach the job.
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "sandbox/trial_types.h"
#include "store/event_store.h"

namespace forktrial::sandbox {

struct ChildJob {
  bool preflight = false;  // a null job: apply the nets, start the runtime, report
  TrialLimits limits;      // the nets to apply (a trial's are those of its specification)
  std::optional<TrialSpecification> spec;  // absent for a preflight job
  std::string fork_run_id;
  std::uint64_t fork_seq = 0;  // the seq of the fork point in the fork's history
  std::string scratch_store;   // directory of the scratch store holding only the fork
  std::string trial_id;        // seeds the runtime's randomness
  int parent_pid = 0;          // the supervising process; the child exits if it is gone
  // Strict isolation (sandbox/confine.h): the child confines itself; in its
  // namespaces it mounts its new root on `strict_root`, an empty directory.
  bool strict = false;
  std::string strict_root;
  // Launch mode: instead of running a Lua trial, the child confines itself
  // as above, applies the nets, and replaces itself with `exec_argv` (a
  // program the parent chose: activegraph's trial child), with `exec_env`
  // as its environment and `exec_stdin` on its stdin. `exec_read_only` are
  // the directories that program reads (the interpreter, its packages),
  // shown read-only besides the packs. Its own warnings go on fd 3 as a
  // tail, which it closes before the exec.
  std::vector<std::string> exec_argv;
  std::vector<std::string> exec_env;
  std::string exec_stdin;
  std::vector<std::string> exec_read_only;
  friend bool operator==(const ChildJob&, const ChildJob&) = default;
};

// The options parent and child both open the scratch store with: no fsync (a
// crash of the child still keeps every committed event, and the store is
// thrown away after the trial), and a small initial map, since the map counts
// against the child's RLIMIT_AS; it grows as the trial writes.
store::StoreOptions scratch_store_options();

std::string encode_job(const ChildJob& job);
std::expected<ChildJob, Status> decode_job(std::string_view text);

}  // namespace forktrial::sandbox

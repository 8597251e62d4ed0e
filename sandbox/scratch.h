// Scratch directories: where the parent of a trial seeds the scratch store
// the child appends to. Each is `forktrial-scratch-XXXXXX` in its parent
// directory (ChildOptions::scratch_parent, else $TMPDIR, else /tmp) and is
// removed with everything in it when its owner, a ScratchDir, is destroyed.
//
// An owner that dies without running its destructor (SIGKILL, a crash, a
// power cut) leaves its directory behind; the next ScratchDir created in the
// same parent directory removes it. Ownership is a lock, not a pid: the owner
// holds an exclusive flock on the directory's own descriptor for the
// directory's whole life, and takes it before the directory has its final
// name (it is made as `.forktrial-scratch-XXXXXX`, locked, then renamed
// without replacing anything). So a directory with the final name whose lock
// someone else can take has no owner left, and pid reuse cannot fool the
// sweep. A hidden directory is unlocked only between mkdtemp and flock; one
// is swept when it is older than a minute and its lock can be taken.
//
// Directories of other users, and `forktrial-trial-*` directories of
// forktrial versions that did not lock them, are never swept.
//
// Thread-safety: a ScratchDir belongs to one thread; any number of them may be
// created, swept and removed concurrently, by threads of one process or by
// several processes.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace forktrial::sandbox {

class ScratchDir {
 public:
  // Sweeps `parent` (empty: $TMPDIR, else /tmp), then creates, locks and
  // names a fresh directory there. Throws SystemError naming the call and the
  // path when the directory cannot be created, locked or named. The sweep
  // never fails the constructor.
  explicit ScratchDir(const std::filesystem::path& parent = {});
  // Removes the directory and everything in it, then releases the lock.
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  UniqueFd lock_;  // the directory's own descriptor, flock(LOCK_EX) held, close-on-exec
};

// What a sweep removed, and what it found abandoned but could not remove
// (each problem names the path and why; it is tried again by the next sweep).
struct Sweep {
  std::vector<std::filesystem::path> removed;
  std::vector<std::string> problems;
};

// Removes the scratch directories in `parent` (empty: $TMPDIR, else /tmp)
// whose owners are gone, as described above. Never throws for what it finds;
// a `parent` that cannot be read is one problem.
Sweep sweep_scratch_dirs(const std::filesystem::path& parent = {});

}  // namespace forktrial::sandbox

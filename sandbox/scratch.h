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

#include <cstddef>
#include <filesystem>
#include <memory>
#include <mutex>
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
  // The directory's own descriptor (close-on-exec), valid for the owner's life.
  int fd() const { return lock_.get(); }

 private:
  std::filesystem::path path_;
  UniqueFd lock_;  // the directory's own descriptor, flock(LOCK_EX) held, close-on-exec
};

// Scratch directories kept for reuse by one side that runs trial after trial
// (a worker's slots), each holding a scratch store's directory with its two
// files, `store/data.mdb` and `store/lock.mdb`, empty. Reusing one
// spares a trial the creation, locking and removal of two directories and
// two files, which cost a disk file system more CPU than the rest of the
// trial's parent side together.
//
// A trial's child has written the directory, so it is taken back only as it
// was given out: it is reset when its lease ends and checked again when it
// is leased. Each directory, its `store` and both files are held open by
// the pool; a directory is reused only when every one of them is still the
// inode the pool made, under its name, with no other name (a single link),
// its mode unchanged and no extended attributes but `security.*` ones; both
// directories hold exactly the names the pool made; and both files are
// empty, made anew at the reset (the old ones, with what the trial wrote,
// are unlinked). Anything else, or a reset that fails,
// discards the directory (removed with its contents, as a ScratchDir is)
// and a fresh one is made. So no store data of a trial survives into the
// next, and nothing a child left can be read by a later trial through its
// scratch directory. Under standard isolation a child can still write
// elsewhere what its user may (no filesystem net); under strict isolation
// trials do not reuse scratch directories.
//
// Thread-safety: a ScratchPool may be used from any number of threads at
// once; a Lease belongs to one thread. Idle directories are at most as many
// as were ever leased at once.
class ScratchPool {
  struct Entry;

 public:
  // Directories are made in `parent` (empty: $TMPDIR, else /tmp), when a
  // lease finds none idle. Nothing is made before the first lease.
  explicit ScratchPool(std::filesystem::path parent = {});
  // Removes every idle directory. Every Lease must have ended.
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  // One scratch directory, the lease holder's until the lease ends; then
  // reset and idle in the pool (or discarded).
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    // The scratch directory, and the empty store directory in it.
    const std::filesystem::path& path() const;
    std::filesystem::path store_path() const;

   private:
    friend class ScratchPool;
    Lease(ScratchPool& pool, std::unique_ptr<Entry> entry);
    ScratchPool* pool_;
    std::unique_ptr<Entry> entry_;
  };

  // An idle directory that is as the pool made it, or a new one. Throws
  // SystemError, naming the call and the path, when a new one cannot be
  // made.
  Lease lease();

  // Directories idle in the pool now, and discarded so far because a reset
  // or a check found them changed.
  std::size_t idle() const;
  std::size_t discarded() const;

 private:
  void give_back(std::unique_ptr<Entry> entry) noexcept;

  const std::filesystem::path parent_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> idle_;  // guarded by mutex_
  std::size_t discarded_ = 0;                 // guarded by mutex_
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

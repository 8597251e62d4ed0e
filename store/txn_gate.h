// Counts the transactions this process has open on one LMDB environment, so
// that the environment's map changes size only while none is open. Private to
// the store.
//
// LMDB changes the size of a map by mapping the file anew
// (mdb_env_set_mapsize), which it allows only while no transaction of the
// process is active, and a Snapshot hands out views into the map that stay
// valid for its whole life. So the store enters every transaction here before
// it begins it, leaves once it has ended, and changes the map only through
// resize().
//
// A transaction is left, not unlocked: any thread may leave it. A Snapshot
// may end on another thread than the one that opened it, which a lock does
// not allow (a std::shared_mutex may be unlocked only by the thread that
// locked it).
//
// Every open transaction is held by one thread: the one that entered it, until
// another calls Ticket::hold_here(). resize() needs to know, because a thread
// that waited for the transactions it holds itself would wait for ever.
//
// Thread-safety: a TxnGate may be used from any number of threads at once. A
// Ticket is used by one thread at a time (handing it to another thread must
// synchronize, as for any object), and must not outlive its gate.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace forktrial::store {

class TxnGate {
 public:
  // One open transaction: entered by TxnGate::enter, left by the destructor
  // (or by moving another ticket into it). Move-only.
  class Ticket {
   public:
    Ticket() = default;
    ~Ticket() { leave(); }
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

    // Makes the calling thread the holder of this transaction. Cheap when it
    // already is (no lock is taken).
    void hold_here();

   private:
    friend class TxnGate;
    Ticket(TxnGate* gate, std::thread::id holder) : gate_(gate), holder_(holder) {}
    void leave() noexcept;

    TxnGate* gate_ = nullptr;  // null: not open
    std::thread::id holder_;   // changed only under gate_->mutex_
  };

  // Why resize() did not run its change.
  struct Blocked {
    std::size_t open = 0;       // transactions of the process open when it gave up
    std::size_t held_here = 0;  // of them, held by the calling thread
  };

  TxnGate() = default;
  TxnGate(const TxnGate&) = delete;
  TxnGate& operator=(const TxnGate&) = delete;

  // Enters one transaction, held by the calling thread. Blocks only while a
  // resize() is running its change.
  Ticket enter();

  // Runs `change` while no transaction of the process is open, and none can
  // be entered until it returns. If the calling thread holds open
  // transactions, returns Blocked at once, without waiting; otherwise waits up
  // to `wait` for the open transactions to be left, and returns Blocked if
  // some still are. Transactions entered while it waits are waited for too:
  // readers are not held back by a resize that may never come. An exception
  // thrown by `change` propagates.
  std::optional<Blocked> resize(std::chrono::milliseconds wait,
                                const std::function<void()>& change);

  // The transactions of the process open now (a count that may change as
  // soon as it is returned, unless the caller holds them all).
  std::size_t open() const;

 private:
  void leave(std::thread::id holder) noexcept;
  void drop_hold(std::thread::id holder) noexcept;  // with mutex_ held

  mutable std::mutex mutex_;
  std::condition_variable idle_;  // notified when open_ drops to 0
  // Guarded by mutex_: the open transactions, and how many each thread holds
  // (threads holding none have no entry).
  std::size_t open_ = 0;
  std::unordered_map<std::thread::id, std::size_t> held_;
};

}  // namespace forktrial::store

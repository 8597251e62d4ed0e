#include "store/txn_gate.h"

#include <utility>

namespace forktrial::store {

TxnGate::Ticket::Ticket(Ticket&& other) noexcept
    : gate_(std::exchange(other.gate_, nullptr)), holder_(other.holder_) {}

TxnGate::Ticket& TxnGate::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    leave();
    gate_ = std::exchange(other.gate_, nullptr);
    holder_ = other.holder_;
  }
  return *this;
}

void TxnGate::Ticket::hold_here() {
  const std::thread::id me = std::this_thread::get_id();
  // Only the thread using the ticket writes holder_, so reading it here
  // without the lock sees its own (or a synchronized hand-over's) value.
  if (gate_ == nullptr || holder_ == me) return;
  std::lock_guard lock(gate_->mutex_);
  gate_->drop_hold(holder_);
  ++gate_->held_[me];
  holder_ = me;
}

void TxnGate::Ticket::leave() noexcept {
  if (gate_ != nullptr) std::exchange(gate_, nullptr)->leave(holder_);
}

TxnGate::Ticket TxnGate::enter() {
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard lock(mutex_);
  ++open_;
  ++held_[me];
  return Ticket(this, me);
}

std::size_t TxnGate::open() const {
  std::lock_guard lock(mutex_);
  return open_;
}

void TxnGate::leave(std::thread::id holder) noexcept {
  std::lock_guard lock(mutex_);
  drop_hold(holder);
  if (--open_ == 0) idle_.notify_all();
}

void TxnGate::drop_hold(std::thread::id holder) noexcept {
  if (auto it = held_.find(holder); it != held_.end() && --it->second == 0) held_.erase(it);
}

std::optional<TxnGate::Blocked> TxnGate::resize(std::chrono::milliseconds wait,
                                                const std::function<void()>& change) {
  std::unique_lock lock(mutex_);
  if (auto it = held_.find(std::this_thread::get_id()); it != held_.end()) {
    return Blocked{open_, it->second};
  }
  if (!idle_.wait_for(lock, wait, [&] { return open_ == 0; })) return Blocked{open_, 0};
  // Still under the lock: enter() waits until the map has its new size.
  change();
  return std::nullopt;
}

}  // namespace forktrial::store

#include "transport/loop_handoff.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <exception>

namespace forktrial::transport {

LoopHandoff::LoopHandoff(LoopHandoffLimits limits)
    : limits_(limits), wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (!wake_) throw SystemError("eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)", errno);
}

void LoopHandoff::wake() {
  const std::uint64_t one = 1;
  // EAGAIN: the counter is full, so the descriptor is readable anyway.
  while (::write(wake_.get(), &one, sizeof one) < 0 && errno == EINTR) {
  }
  // After the write: a serve() that sees the flag reads after it, so it
  // drains this write or a later one's flag makes the next serve() drain.
  woken_.store(true, std::memory_order_release);
}

HttpResponse LoopHandoff::ask(const HttpRequest& request) {
  const std::string key = request.path + "?" + request.query;
  std::unique_lock lock(mutex_);
  if (closed_) return http_text(503, "stopping");
  const auto now = std::chrono::steady_clock::now();
  if (auto kept = reused_.find(key); kept != reused_.end() && now < kept->second.until) {
    return kept->second.response;
  }
  // The same request already waiting: its answer is this one's too.
  std::shared_ptr<Pending> pending;
  for (const auto& other : waiting_) {
    if (other->key == key) pending = other;
  }
  if (!pending) {
    pending = std::make_shared<Pending>(Pending{request, key, std::nullopt, 0});
    waiting_.push_back(pending);
    waiting_count_.fetch_add(1, std::memory_order_release);
    wake();
  }
  ++pending->askers;
  const bool answered =
      answered_.wait_for(lock, limits_.patience, [&] { return pending->response.has_value(); });
  --pending->askers;
  if (answered) return *pending->response;
  // Nobody else wants it: the loop need not answer it at all.
  if (pending->askers == 0) {
    if (auto it = std::find(waiting_.begin(), waiting_.end(), pending); it != waiting_.end()) {
      waiting_.erase(it);
      waiting_count_.fetch_sub(1, std::memory_order_release);
    }
  }
  return http_text(503, "the daemon's loop did not answer within " +
                            std::to_string(limits_.patience.count()) +
                            " ms; it is busy or stalled (/healthz says which)");
}

HttpHandler LoopHandoff::handler() {
  return [this](const HttpRequest& request) { return ask(request); };
}

void LoopHandoff::keep_for_reuse(const std::string& key, const HttpResponse& response,
                                 std::chrono::steady_clock::time_point until) {
  if (reused_.size() >= limits_.max_reused) {
    const auto now = std::chrono::steady_clock::now();
    std::erase_if(reused_, [&](const auto& entry) { return entry.second.until <= now; });
    // Still full: the keys are the clients' choice, so none is kept longer.
    if (reused_.size() >= limits_.max_reused) reused_.clear();
  }
  reused_.insert_or_assign(key, Reused{response, until});
}

void LoopHandoff::serve(const Answer& answer) {
  // Drained even with nothing waiting: an asker that gave up took its
  // request back but not its wake-up.
  if (woken_.load(std::memory_order_relaxed) && woken_.exchange(false, std::memory_order_acq_rel)) {
    std::uint64_t drained = 0;
    while (::read(wake_.get(), &drained, sizeof drained) < 0 && errno == EINTR) {
    }
  }
  if (waiting_count_.load(std::memory_order_acquire) == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + limits_.turn_budget;
  for (;;) {
    std::shared_ptr<Pending> pending;
    {
      const std::lock_guard lock(mutex_);
      if (waiting_.empty()) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        wake();  // the rest next turn, without waiting for the tick
        return;
      }
      pending = waiting_.front();
      waiting_.pop_front();
      waiting_count_.fetch_sub(1, std::memory_order_release);
    }
    const auto start = std::chrono::steady_clock::now();
    HttpResponse response;
    try {
      response = answer(pending->request);
    } catch (const std::exception& e) {
      response = http_text(500, std::string("this page failed: ") + e.what());
    }
    const auto end = std::chrono::steady_clock::now();
    const auto life = std::max<std::chrono::steady_clock::duration>(
        limits_.reuse, (end - start) * limits_.reuse_factor);
    {
      const std::lock_guard lock(mutex_);
      keep_for_reuse(pending->key, response, end + life);
      pending->response = std::move(response);
    }
    answered_.notify_all();
  }
}

void LoopHandoff::close() {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
    for (const auto& pending : waiting_) pending->response = http_text(503, "stopping");
    waiting_.clear();
    waiting_count_.store(0, std::memory_order_release);
  }
  answered_.notify_all();
}

}  // namespace forktrial::transport

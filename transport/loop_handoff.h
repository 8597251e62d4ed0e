// HTTP requests handed from the HTTP server's threads to a daemon's loop
// thread, which answers them between its turns: a handler never reads the
// state the loop owns, and the loop never waits for a handler, a socket or a
// client.
//
//   handler thread                          loop thread
//   ask(request) ─ queue, wake fd() ──────▶ poll sees fd() readable
//        waits (at most `patience`)         serve(answer): answer(request)
//   ◀──────────────── the answer ─────────  for each one waiting, then goes on
//   writes it to its client (slowly, if the client is slow: the loop is
//   not involved any more)
//
// What one answer costs the loop is bounded three ways: an answer is reused
// for the same request (path and query) for `reuse`, or for `reuse_factor`
// times what it cost the loop when that is longer, so however often a
// request comes the loop spends at most about 1/reuse_factor of its time on
// it; askers of one request that is already waiting share its answer; and
// one serve() answers for at most `turn_budget`, leaving the rest for the
// next turn. With nobody asking, the loop pays two atomic loads per turn.
//
// Thread-safe: ask() from any number of threads; fd(), serve() and close()
// from the loop thread only. A LoopHandoff must outlive the HttpServer whose
// handlers ask it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/unique_fd.h"
#include "transport/http_server.h"

namespace forktrial::transport {

struct LoopHandoffLimits {
  std::chrono::milliseconds patience{5000};   // a handler's wait for the loop; then 503
  std::chrono::milliseconds reuse{250};       // an answer's shortest reuse
  unsigned reuse_factor = 20;                 // ... or this many times its cost
  std::chrono::milliseconds turn_budget{20};  // the loop's time answering, per serve()
  std::size_t max_reused = 64;                // answers kept for reuse, at most
};

class LoopHandoff {
 public:
  using Answer = std::function<HttpResponse(const HttpRequest&)>;

  // Throws SystemError when the wake-up descriptor (an eventfd) cannot be made.
  explicit LoopHandoff(LoopHandoffLimits limits = {});
  LoopHandoff(const LoopHandoff&) = delete;
  LoopHandoff& operator=(const LoopHandoff&) = delete;

  // For handler threads: the loop's answer (or one reused), or 503 when the
  // loop did not answer within `patience` or has stopped.
  HttpResponse ask(const HttpRequest& request);
  // A route's handler that asks.
  HttpHandler handler();

  // For the loop thread: a descriptor to poll for reading; readable while
  // requests wait.
  int fd() const { return wake_.get(); }
  // For the loop thread: answers the waiting requests with `answer` (a throw
  // answers 500), until the turn budget is spent. Costs two atomic loads when
  // none waits.
  void serve(const Answer& answer);
  // For the loop thread, as it stops: every waiting request, and every one
  // asked later, is answered 503.
  void close();

 private:
  struct Pending {
    HttpRequest request;
    std::string key;
    std::optional<HttpResponse> response;
    unsigned askers = 0;
  };
  struct Reused {
    HttpResponse response;
    std::chrono::steady_clock::time_point until;
  };

  void wake();
  void keep_for_reuse(const std::string& key, const HttpResponse& response,
                      std::chrono::steady_clock::time_point until);

  const LoopHandoffLimits limits_;
  UniqueFd wake_;  // eventfd: written by askers, drained by serve()
  // Set after each write to wake_, cleared by the serve() that drains it:
  // wake_ is never left readable with nothing to answer (the loop would
  // spin), and serve() reads it only when it was written.
  std::atomic<bool> woken_{false};
  std::atomic<std::size_t> waiting_count_{0};
  std::mutex mutex_;
  std::condition_variable answered_;
  std::deque<std::shared_ptr<Pending>> waiting_;  // guarded by mutex_
  std::map<std::string, Reused> reused_;          // guarded by mutex_
  bool closed_ = false;                           // guarded by mutex_
};

}  // namespace forktrial::transport

// The daemons' HTTP endpoint: a small read-only server for what watches a
// process from outside: Prometheus's /metrics, the liveness and readiness
// probes of an orchestrator, the coordinator's status page and its JSON.
//
// It answers GET and HEAD only (anything else is 405: nothing here changes
// state), on exact paths given at construction (anything else is 404), one
// request a connection (Connection: close). One I/O thread reads every
// request and writes every answer without blocking, so a slow client costs
// a descriptor, never a thread; /healthz and /readyz are answered on it at
// once, other paths by one of 4 handler threads. A handler never runs on
// the daemon's loop thread, so it reads only what is safe to read from
// there: a snapshot the loop publishes, atomics, a thread-safe metrics
// registry. A handler that throws answers 500, and the exception is logged.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace forktrial::transport {

// Where to listen: "HOST:PORT", ":PORT" or "PORT" (loopback, 127.0.0.1,
// unless a host is given: these endpoints are for the machine's own watchers
// until the operator opens them). PORT 0 takes any free port.
struct HttpAddress {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string str() const;  // "127.0.0.1:7680"
};
// The address, or a message saying what is wrong with the text.
std::expected<HttpAddress, Status> parse_http_address(std::string_view text);

struct HttpRequest {
  std::string method;  // GET or HEAD
  std::string path;    // "/metrics"
  std::string query;   // what followed '?', undecoded; empty when none
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // added to the defaults
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// A plain text answer: `status` with `text` and a newline.
HttpResponse http_text(int status, std::string text);

// The value of the first `name=value` of a query string (what followed '?'),
// percent-decoded, '+' read as a space; nullopt when it is not there or does
// not decode (a '%' without two hex digits).
std::optional<std::string> query_parameter(std::string_view query, std::string_view name);

class HttpServer {
 public:
  using Routes = std::vector<std::pair<std::string, HttpHandler>>;  // exact path, handler

  // Listens on `address` and serves `routes` until destroyed. Throws
  // forktrial::Error (unavailable) when it cannot listen there: the port is
  // taken, the host is not an address of this machine.
  HttpServer(const HttpAddress& address, Routes routes, Log log);
  ~HttpServer();  // stops listening, and waits for the handlers running now
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port it listens on (the one the system chose, when asked for 0).
  std::uint16_t port() const;
  // The address it listens on, with that port.
  HttpAddress address() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What an orchestrator's probes read of a daemon, published by its loop:
//   /healthz  200 while the loop turns; 503 when no turn came for `stall`
//             (a wedged loop: restarting the process is the cure);
//   /readyz   200 when the daemon is ready for work, else 503 with why not
//             (waiting is the cure: nothing is wrong with the process).
// turned() and set_ready() are for the loop thread; routes() are served by
// an HttpServer's threads. The Probes must outlive the server.
class Probes {
 public:
  explicit Probes(std::chrono::seconds stall = std::chrono::seconds(30)) : stall_(stall) {}
  void turned();
  void set_ready(bool ready, const std::string& why_not = {});
  HttpServer::Routes routes() const;

 private:
  std::chrono::seconds stall_;
  std::atomic<std::int64_t> last_turn_ns_{0};  // steady clock; 0: not yet
  mutable std::mutex mutex_;
  bool ready_ = false;                // guarded by mutex_
  std::string why_not_ = "starting";  // guarded by mutex_
};

}  // namespace forktrial::transport

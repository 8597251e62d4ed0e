#include "transport/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "base/unique_fd.h"

namespace forktrial::transport {

std::string HttpAddress::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::expected<HttpAddress, Status> parse_http_address(std::string_view text) {
  HttpAddress address;
  std::string_view port_text = text;
  if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    std::string_view host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host == "localhost") host = "127.0.0.1";
    if (!host.empty()) address.host = std::string(host);
  }
  unsigned port = 0;
  const auto [end, error] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || error != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535) {
    return failure(ErrorCode::invalid_argument,
                   "\"" + std::string(text) +
                       "\" is not HOST:PORT or PORT (e.g. 127.0.0.1:7680, 0.0.0.0:7680, 7680)");
  }
  address.port = static_cast<std::uint16_t>(port);
  unsigned char scratch[16];
  if (::inet_pton(AF_INET, address.host.c_str(), scratch) != 1 &&
      ::inet_pton(AF_INET6, address.host.c_str(), scratch) != 1) {
    return failure(ErrorCode::invalid_argument,
                   "\"" + address.host +
                       "\" is not an IP address: give one of this machine's addresses "
                       "(127.0.0.1 for this machine alone, 0.0.0.0 for every interface)");
  }
  return address;
}

HttpResponse http_text(int status, std::string text) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(text) + "\n";
  return response;
}

std::optional<std::string> query_parameter(std::string_view query, std::string_view name) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    const auto equals = pair.find('=');
    if (pair.substr(0, equals) != name) continue;
    const std::string_view raw =
        equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
    std::string value;
    value.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '+') {
        value += ' ';
      } else if (raw[i] != '%') {
        value += raw[i];
      } else if (i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
        value += static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
        i += 2;
      } else {
        return std::nullopt;
      }
    }
    return value;
  }
  return std::nullopt;
}

namespace {

// A request head may hold this much, its line and headers together; a
// client sending more is answered 431 and closed.
constexpr std::size_t kMaxHeadBytes = 16 << 10;
// Connections open at once. Past it, the one that has waited longest for its
// request is closed to make room: a flood of idle connections cannot keep a
// probe out.
constexpr std::size_t kMaxConnections = 512;
// Requests waiting for a handler thread; past it the server answers 503.
constexpr std::size_t kMaxQueued = 64;
// The bytes of answers held for clients that have not taken them yet, over
// every connection: past it an answer is 503 instead, so that clients that
// ask and never read cannot make the daemon hold a copy each of a large
// answer (a hundred readers of a status page's failures once held 1.8 GB).
constexpr std::size_t kMaxHeldAnswerBytes = std::size_t{64} << 20;
constexpr std::size_t kHandlerThreads = 4;
// A client has this long to send its request, and to take the answer.
constexpr auto kClientTimeout = std::chrono::seconds(10);
// The paths answered on the I/O thread itself, never queued behind other
// requests: the probes, whose handlers only read atomics (Probes below).
bool answered_inline(std::string_view path) {
  return path == "/healthz" || path == "/readyz";
}

std::string_view reason_of(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

// The percent-decoded path; nullopt when a '%' is not followed by two hex
// digits or it decodes to a NUL.
std::optional<std::string> decoded_path(std::string_view raw) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string path;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      path += raw[i];
    } else if (i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      const char c = static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2]));
      if (c == '\0') return std::nullopt;
      path += c;
      i += 2;
    } else {
      return std::nullopt;
    }
  }
  return path;
}

// A parsed request head, or the status to answer a malformed one with.
std::expected<HttpRequest, int> parse_head(std::string_view head) {
  const auto line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  const auto first = line.find(' ');
  const auto last = line.rfind(' ');
  if (first == std::string_view::npos || last == first ||
      !line.substr(last + 1).starts_with("HTTP/")) {
    return std::unexpected(400);
  }
  HttpRequest request;
  request.method = std::string(line.substr(0, first));
  const std::string_view target = line.substr(first + 1, last - first - 1);
  if (target.empty() || target.front() != '/') return std::unexpected(400);
  const auto question = target.find('?');
  auto path = decoded_path(target.substr(0, question));
  if (!path) return std::unexpected(400);
  request.path = std::move(*path);
  if (question != std::string_view::npos) request.query = std::string(target.substr(question + 1));
  return request;
}

}  // namespace

// One I/O thread reads every request head and writes every answer, without
// blocking (poll): a slow or silent client costs a descriptor and a buffer,
// never a thread. Complete requests go to a few handler threads; the probes
// are answered on the I/O thread at once, so they answer whatever the status
// page's clients do.
struct HttpServer::Impl {
  Routes routes;
  Log log;
  HttpAddress address;
  UniqueFd listener;
  UniqueFd wake;  // an eventfd: handlers' answers are ready, or stop

  std::mutex mutex;
  std::condition_variable work;
  std::deque<std::pair<std::uint64_t, HttpRequest>> queued;     // guarded by mutex
  std::vector<std::pair<std::uint64_t, std::string>> answered;  // guarded by mutex
  bool stopping = false;                                        // guarded by mutex

  std::thread io;
  std::vector<std::thread> handlers;

  const HttpHandler* find(std::string_view path) const {
    for (const auto& [route, handler] : routes) {
      if (route == path) return &handler;
    }
    return nullptr;
  }

  HttpResponse answer(const HttpRequest& request) const {
    if (request.method != "GET" && request.method != "HEAD") {
      HttpResponse refusal = http_text(405, "only GET and HEAD: nothing here changes state");
      refusal.headers.emplace_back("Allow", "GET, HEAD");
      return refusal;
    }
    const HttpHandler* handler = find(request.path);
    if (handler == nullptr) return http_text(404, "no such page: " + request.path);
    try {
      return (*handler)(request);
    } catch (const std::exception& e) {
      log(LogLevel::error, "http: " + request.path + " failed: " + e.what());
      return http_text(500, "this page failed; the daemon's log says why");
    }
  }

  static std::string bytes_of(const HttpResponse& response, bool head_only) {
    std::string out = "HTTP/1.1 " + std::to_string(response.status) + " " +
                      std::string(reason_of(response.status)) +
                      "\r\nContent-Type: " + response.content_type +
                      "\r\nContent-Length: " + std::to_string(response.body.size()) +
                      "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                      "\r\nConnection: close\r\n";
    for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
    out += "\r\n";
    if (!head_only) out += response.body;
    return out;
  }

  void signal() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto written = ::write(wake.get(), &one, sizeof one);
  }

  void handle_requests() {
    for (;;) {
      std::pair<std::uint64_t, HttpRequest> job;
      {
        std::unique_lock lock(mutex);
        work.wait(lock, [&] { return stopping || !queued.empty(); });
        if (stopping) return;
        job = std::move(queued.front());
        queued.pop_front();
      }
      std::string bytes = bytes_of(answer(job.second), job.second.method == "HEAD");
      {
        const std::lock_guard lock(mutex);
        answered.emplace_back(job.first, std::move(bytes));
      }
      signal();
    }
  }

  struct Connection {
    UniqueFd fd;
    std::string in;
    std::string out;
    std::size_t sent = 0;
    bool writing = false;  // false: reading its request, or waiting for a handler
    bool waiting = false;  // its request is with a handler
    std::chrono::steady_clock::time_point deadline;
  };

  void serve() {
    std::map<std::uint64_t, Connection> connections;
    std::uint64_t next_id = 0;
    std::vector<pollfd> polled;
    std::vector<std::uint64_t> ids;
    for (;;) {
      {
        const std::lock_guard lock(mutex);
        if (stopping) return;
        for (auto& [id, bytes] : answered) {
          auto c = connections.find(id);
          if (c == connections.end()) continue;
          c->second.waiting = false;
          hold(c->second, std::move(bytes));
        }
        answered.clear();
      }
      const auto now = std::chrono::steady_clock::now();
      for (auto c = connections.begin(); c != connections.end();) {
        const bool expired = !c->second.waiting && c->second.deadline <= now;
        c = expired ? drop(connections, c) : std::next(c);
      }
      polled.assign({pollfd{listener.get(), POLLIN, 0}, pollfd{wake.get(), POLLIN, 0}});
      ids.assign({0, 0});
      for (auto& [id, c] : connections) {
        if (c.waiting) continue;
        polled.push_back(pollfd{c.fd.get(), static_cast<short>(c.writing ? POLLOUT : POLLIN), 0});
        ids.push_back(id);
      }
      if (::poll(polled.data(), polled.size(), 1000) < 0 && errno != EINTR) {
        log(LogLevel::error, std::string("http: poll: ") + std::strerror(errno));
        return;
      }
      if (polled[1].revents != 0) {
        std::uint64_t count = 0;
        [[maybe_unused]] const auto read = ::read(wake.get(), &count, sizeof count);
      }
      for (std::size_t i = 2; i < polled.size(); ++i) {
        if (polled[i].revents == 0) continue;
        auto c = connections.find(ids[i]);
        if (c == connections.end()) continue;
        if (!step(ids[i], c->second)) drop(connections, c);
      }
      if (polled[0].revents & POLLIN) accept_all(connections, next_id);
    }
  }

  void accept_all(std::map<std::uint64_t, Connection>& connections, std::uint64_t& next_id) {
    for (;;) {
      const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (connections.size() >= kMaxConnections) {
        // Room for the newcomer: the reader that has waited longest goes.
        auto oldest = connections.end();
        for (auto c = connections.begin(); c != connections.end(); ++c) {
          if (c->second.waiting || c->second.writing) continue;
          if (oldest == connections.end() || c->second.deadline < oldest->second.deadline) {
            oldest = c;
          }
        }
        if (oldest == connections.end()) {
          ::close(fd);
          continue;
        }
        drop(connections, oldest);
      }
      Connection c;
      c.fd.reset(fd);
      c.deadline = std::chrono::steady_clock::now() + kClientTimeout;
      connections.emplace(next_id++, std::move(c));
    }
  }

  // Reads or writes what the connection can take now; false when it is done.
  bool step(std::uint64_t id, Connection& c) {
    if (c.writing) {
      while (c.sent < c.out.size()) {
        const ssize_t n = ::send(c.fd.get(), c.out.data() + c.sent, c.out.size() - c.sent,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
        c.sent += static_cast<std::size_t>(n);
      }
      return false;  // all sent: closed
    }
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
        break;
      }
      c.in.append(buffer, static_cast<std::size_t>(n));
      if (c.in.find("\r\n\r\n") != std::string::npos || c.in.size() > kMaxHeadBytes) break;
    }
    const auto end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (c.in.size() <= kMaxHeadBytes) return true;  // more to come
      respond(c, http_text(431, "the request's head is over 16 KiB"), false);
      return true;
    }
    auto request = parse_head(std::string_view(c.in).substr(0, end));
    if (!request) {
      respond(c, http_text(request.error(), "not an HTTP request"), false);
      return true;
    }
    if (answered_inline(request->path)) {
      respond(c, answer(*request), request->method == "HEAD");
      return true;
    }
    {
      const std::lock_guard lock(mutex);
      if (queued.size() < kMaxQueued) {
        queued.emplace_back(id, std::move(*request));
        c.waiting = true;
      }
    }
    if (!c.waiting) {
      respond(c, http_text(503, "busy: too many requests at once; try again"), false);
      return true;
    }
    work.notify_one();
    return true;
  }

  void respond(Connection& c, const HttpResponse& response, bool head_only) {
    hold(c, bytes_of(response, head_only));
  }

  // Gives the connection its answer to send, within kMaxHeldAnswerBytes of
  // answers held for every connection (I/O thread only).
  void hold(Connection& c, std::string bytes) {
    if (held_bytes + bytes.size() > kMaxHeldAnswerBytes) {
      bytes = bytes_of(
          http_text(503, "busy: answers not yet taken by their clients hold " +
                             std::to_string(held_bytes) + " bytes; try again once they are read"),
          false);
    }
    held_bytes += bytes.size();
    c.out = std::move(bytes);
    c.writing = true;
    c.deadline = std::chrono::steady_clock::now() + kClientTimeout;
  }

  // Closes the connection, and lets go of the answer it held.
  std::map<std::uint64_t, Connection>::iterator drop(
      std::map<std::uint64_t, Connection>& connections,
      std::map<std::uint64_t, Connection>::iterator c) {
    held_bytes -= c->second.out.size();
    return connections.erase(c);
  }

  std::size_t held_bytes = 0;  // of every connection's `out`; the I/O thread's
};

HttpServer::HttpServer(const HttpAddress& address, Routes routes, Log log)
    : impl_(std::make_unique<Impl>()) {
  impl_->routes = std::move(routes);
  impl_->log = std::move(log);
  const std::string where = address.str();
  const auto fail = [&](const std::string& what) {
    throw Error(ErrorCode::unavailable,
                "cannot serve HTTP on " + where + ": " + what + ": " + std::strerror(errno));
  };
  sockaddr_storage storage{};
  socklen_t size = 0;
  int family = AF_INET;
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
      ::inet_pton(AF_INET, address.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(address.port);
    size = sizeof *v4;
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    if (::inet_pton(AF_INET6, address.host.c_str(), &v6->sin6_addr) != 1) {
      errno = EINVAL;
      fail("not an IP address");
    }
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(address.port);
    size = sizeof *v6;
    family = AF_INET6;
  }
  impl_->listener.reset(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (impl_->listener.get() < 0) fail("socket");
  const int on = 1;
  ::setsockopt(impl_->listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(impl_->listener.get(), reinterpret_cast<sockaddr*>(&storage), size) != 0) {
    fail("bind");
  }
  if (::listen(impl_->listener.get(), 128) != 0) fail("listen");
  if (::getsockname(impl_->listener.get(), reinterpret_cast<sockaddr*>(&storage), &size) == 0) {
    impl_->address = address;
    impl_->address.port =
        ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&storage)->sin_port
                                : reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port);
  }
  impl_->wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (impl_->wake.get() < 0) fail("eventfd");
  for (std::size_t i = 0; i < kHandlerThreads; ++i) {
    impl_->handlers.emplace_back([impl = impl_.get()] { impl->handle_requests(); });
  }
  impl_->io = std::thread([impl = impl_.get()] { impl->serve(); });
}

HttpServer::~HttpServer() {
  {
    const std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work.notify_all();
  impl_->signal();
  impl_->io.join();
  for (auto& handler : impl_->handlers) handler.join();
}

void Probes::turned() {
  last_turn_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                      std::memory_order_relaxed);
}

void Probes::set_ready(bool ready, const std::string& why_not) {
  const std::lock_guard lock(mutex_);
  if (ready_ == ready && why_not_ == why_not) return;
  ready_ = ready;
  why_not_ = why_not;
}

HttpServer::Routes Probes::routes() const {
  return {
      {"/healthz",
       [this](const HttpRequest&) {
         const std::int64_t last = last_turn_ns_.load(std::memory_order_relaxed);
         if (last == 0) return http_text(503, "starting");
         const auto idle = std::chrono::steady_clock::now().time_since_epoch() -
                           std::chrono::steady_clock::duration(last);
         if (idle > stall_) {
           return http_text(
               503,
               "stalled: the loop has not turned for " +
                   std::to_string(std::chrono::duration_cast<std::chrono::seconds>(idle).count()) +
                   " s");
         }
         return http_text(200, "ok");
       }},
      {"/readyz",
       [this](const HttpRequest&) {
         const std::lock_guard lock(mutex_);
         return ready_ ? http_text(200, "ready") : http_text(503, "not ready: " + why_not_);
       }},
  };
}

std::uint16_t HttpServer::port() const {
  return impl_->address.port;
}

HttpAddress HttpServer::address() const {
  return impl_->address;
}

}  // namespace forktrial::transport

#include "transport/http_server.h"

#include <arpa/inet.h>
#include <civetweb.h>

#include <charconv>
#include <ctime>
#include <exception>
#include <mutex>

#include "base/error.h"

// civetweb, as Debian builds it (without REENTRANT_TIME), formats the Date
// header of every response with gmtime(), whose result is one buffer for the
// whole process: two HTTP threads answering in the same instant write it
// together, and one may send the other's date, or a torn one. A definition
// in the executable comes before libc's for every library the process
// loads, so this one gives each thread a buffer of its own.
extern "C" struct tm* gmtime(const time_t* when) {
  thread_local struct tm result;
  return ::gmtime_r(when, &result);
}

namespace forktrial::transport {
namespace {

// What civetweb said while mg_start ran on this thread: the reason it
// failed, when it did.
thread_local std::string start_complaint;

void init_civetweb_once() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

}  // namespace

std::string HttpAddress::str() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::expected<HttpAddress, std::string> parse_http_address(std::string_view text) {
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
    return std::unexpected("\"" + std::string(text) +
                           "\" is not HOST:PORT or PORT (e.g. 127.0.0.1:7680, 0.0.0.0:7680, 7680)");
  }
  address.port = static_cast<std::uint16_t>(port);
  unsigned char scratch[16];
  if (::inet_pton(AF_INET, address.host.c_str(), scratch) != 1 &&
      ::inet_pton(AF_INET6, address.host.c_str(), scratch) != 1) {
    return std::unexpected("\"" + address.host +
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

struct HttpServer::Impl {
  Routes routes;
  Log log;
  mg_context* context = nullptr;
  HttpAddress address;

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

  static int serve(mg_connection* connection, void* data) {
    const auto* self = static_cast<const Impl*>(data);
    const mg_request_info* info = mg_get_request_info(connection);
    HttpRequest request;
    request.method = info->request_method != nullptr ? info->request_method : "";
    request.path = info->local_uri != nullptr ? info->local_uri : "";
    request.query = info->query_string != nullptr ? info->query_string : "";
    const HttpResponse response = self->answer(request);
    std::string head = "HTTP/1.1 " + std::to_string(response.status) + " " +
                       mg_get_response_code_text(connection, response.status) +
                       "\r\nContent-Type: " + response.content_type +
                       "\r\nContent-Length: " + std::to_string(response.body.size()) +
                       "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff"
                       "\r\nConnection: close\r\n";
    for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
    head += "\r\n";
    mg_write(connection, head.data(), head.size());
    if (request.method != "HEAD") mg_write(connection, response.body.data(), response.body.size());
    return response.status;
  }

  static int complain(const mg_connection* connection, const char* message) {
    if (connection == nullptr) {
      start_complaint = message;
      return 1;
    }
    const mg_context* context = mg_get_context(connection);
    const auto* self = static_cast<const Impl*>(mg_get_user_data(context));
    if (self == nullptr || self->context == nullptr) {
      start_complaint = message;
    } else {
      self->log(LogLevel::debug, std::string("http: ") + message);
    }
    return 1;
  }
};

HttpServer::HttpServer(const HttpAddress& address, Routes routes, Log log)
    : impl_(std::make_unique<Impl>()) {
  init_civetweb_once();
  impl_->routes = std::move(routes);
  impl_->log = std::move(log);
  const std::string ports = address.str();
  const char* options[] = {
      "listening_ports", ports.c_str(),       "num_threads", "4",    "request_timeout_ms",
      "10000",           "enable_keep_alive", "no",          nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = &Impl::complain;
  start_complaint.clear();
  impl_->context = mg_start(&callbacks, impl_.get(), options);
  if (impl_->context == nullptr) {
    throw Error(
        ErrorCode::unavailable,
        "cannot serve HTTP on " + ports + ": " +
            (start_complaint.empty() ? std::string("civetweb would not start") : start_complaint));
  }
  mg_set_request_handler(impl_->context, "/", &Impl::serve, impl_.get());
  impl_->address = address;
  mg_server_port bound[4] = {};
  const int count = mg_get_server_ports(impl_->context, 4, bound);
  if (count > 0) impl_->address.port = static_cast<std::uint16_t>(bound[0].port);
}

HttpServer::~HttpServer() {
  if (impl_->context != nullptr) mg_stop(impl_->context);
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

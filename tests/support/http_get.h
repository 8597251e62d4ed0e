// A minimal HTTP/1.0 client for tests of the daemons' HTTP endpoints: one
// request on a fresh connection to 127.0.0.1, the whole answer read until the
// server closes. Throws std::runtime_error when it cannot connect or read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace forktrial::testing {

struct HttpAnswer {
  int status = 0;
  std::string headers;  // the status line and headers, as sent
  std::string body;
};

// A TCP port on 127.0.0.1 that nothing listens on now (the system's choice).
std::uint16_t free_port();

// GETs `path` every 50 ms until it answers `status`, for at most `seconds`;
// returns the last answer (status 0 while nothing listened).
HttpAnswer http_wait_for(std::uint16_t port, std::string_view path, int status, int seconds = 20);

HttpAnswer http_request(std::uint16_t port, std::string_view method, std::string_view path);
inline HttpAnswer http_get(std::uint16_t port, std::string_view path) {
  return http_request(port, "GET", path);
}

}  // namespace forktrial::testing

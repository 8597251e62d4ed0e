#include "tests/support/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace forktrial::testing {

HttpAnswer http_request(std::uint16_t port, std::string_view method, std::string_view path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error("connect to 127.0.0.1:" + std::to_string(port) + ": " +
                             std::strerror(errno));
  }
  const std::string request =
      std::string(method) + " " + std::string(path) + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  for (std::size_t sent = 0; sent < request.size();) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    sent += static_cast<std::size_t>(n);
  }
  std::string all;
  char buffer[8192];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
    if (n == 0) break;
    all.append(buffer, static_cast<std::size_t>(n));
  }
  const auto end = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.", 0) != 0 || end == std::string::npos) {
    throw std::runtime_error("not an HTTP answer: " + all.substr(0, 80));
  }
  HttpAnswer answer;
  answer.status = std::stoi(all.substr(9, 3));
  answer.headers = all.substr(0, end);
  answer.body = all.substr(end + 4);
  return answer;
}

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error(std::string("bind 127.0.0.1:0: ") + std::strerror(errno));
  return ntohs(address.sin_port);
}

HttpAnswer http_wait_for(std::uint16_t port, std::string_view path, int status, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  HttpAnswer last;
  for (;;) {
    try {
      last = http_get(port, path);
    } catch (const std::runtime_error&) {
      last = HttpAnswer{};  // not listening yet
    }
    if (last.status == status || std::chrono::steady_clock::now() >= until) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace forktrial::testing

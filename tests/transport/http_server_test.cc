#include "transport/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <ctime>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "tests/support/http_get.h"

namespace forktrial::transport {
namespace {

using testing::http_get;
using testing::http_request;

const Log kQuiet = [](LogLevel, const std::string&) {};

TEST_CASE("parse_http_address takes HOST:PORT, :PORT and PORT, loopback by default") {
  auto full = parse_http_address("0.0.0.0:7680");
  REQUIRE(full.has_value());
  CHECK(full->host == "0.0.0.0");
  CHECK(full->port == 7680);
  auto port_only = parse_http_address("7681");
  REQUIRE(port_only.has_value());
  CHECK(port_only->str() == "127.0.0.1:7681");
  CHECK(parse_http_address(":9000")->str() == "127.0.0.1:9000");
  CHECK(parse_http_address("localhost:9000")->host == "127.0.0.1");
  CHECK(parse_http_address("[::1]:9000")->str() == "[::1]:9000");
}

TEST_CASE("parse_http_address refuses what is not an address, saying what it wants") {
  for (const char* bad :
       {"", "http", "127.0.0.1:", "127.0.0.1:70000", "1.2.3.4:-1", "example.com:80", "7680x"}) {
    INFO(bad);
    auto parsed = parse_http_address(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK_FALSE(parsed.error().message.empty());
  }
  CHECK(parse_http_address("example.com:80").error().message.find("not an IP address") !=
        std::string::npos);
}

TEST_CASE("query_parameter finds a name's first value, percent-decoded") {
  CHECK(query_parameter("job=job_1&by=candidate", "by") == "candidate");
  CHECK(query_parameter("job=a&job=b", "job") == "a");
  CHECK(query_parameter("x=%3Cimg%20src%3Dx%3E+y", "x") == "<img src=x> y");
  CHECK(query_parameter("flag&job=", "job") == "");
  CHECK(query_parameter("flag&job=", "flag") == "");
  CHECK_FALSE(query_parameter("jobs=1", "job"));
  CHECK_FALSE(query_parameter("", "job"));
  // A '%' without two hex digits does not decode.
  CHECK_FALSE(query_parameter("job=%4", "job"));
  CHECK_FALSE(query_parameter("job=%zz", "job"));
}

TEST_CASE("HttpServer answers its exact paths, 404 elsewhere, 405 to what would write") {
  HttpServer server(
      *parse_http_address("127.0.0.1:0"),
      {{"/hello", [](const HttpRequest& r) { return http_text(200, "hi " + r.query); }},
       {"/json",
        [](const HttpRequest&) {
          HttpResponse response;
          response.content_type = "application/json";
          response.body = R"({"ok":true})";
          response.headers.emplace_back("X-Test", "1");
          return response;
        }},
       {"/broken", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); }}},
      kQuiet);
  REQUIRE(server.port() != 0);
  CHECK(server.address().host == "127.0.0.1");

  auto hello = http_get(server.port(), "/hello?x=1");
  CHECK(hello.status == 200);
  CHECK(hello.body == "hi x=1\n");
  CHECK(hello.headers.find("Cache-Control: no-store") != std::string::npos);

  auto json = http_get(server.port(), "/json");
  CHECK(json.status == 200);
  CHECK(json.body == R"({"ok":true})");
  CHECK(json.headers.find("Content-Type: application/json") != std::string::npos);
  CHECK(json.headers.find("X-Test: 1") != std::string::npos);

  CHECK(http_get(server.port(), "/hello/more").status == 404);
  CHECK(http_get(server.port(), "/").status == 404);
  auto post = http_request(server.port(), "POST", "/hello");
  CHECK(post.status == 405);
  CHECK(post.headers.find("Allow: GET, HEAD") != std::string::npos);
  CHECK(http_request(server.port(), "DELETE", "/json").status == 405);

  auto head = http_request(server.port(), "HEAD", "/json");
  CHECK(head.status == 200);
  CHECK(head.body.empty());

  auto broken = http_get(server.port(), "/broken");
  CHECK(broken.status == 500);
  CHECK(broken.body.find("boom") == std::string::npos);  // internals stay in the log
}

TEST_CASE("HttpServer holds a bounded sum of answers for clients that do not read them") {
  const std::string big(std::size_t{16} << 20, 'b');  // more than loopback's buffers take
  HttpServer server(*parse_http_address("127.0.0.1:0"),
                    {{"/big",
                      [&](const HttpRequest&) {
                        HttpResponse response;
                        response.body = big;
                        return response;
                      }}},
                    kQuiet);
  // Clients that ask and never read: each answer waits whole for its reader.
  std::vector<int> readers;
  for (int i = 0; i < 10; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(server.port());
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    const std::string request = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
    REQUIRE(::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size()));
    readers.push_back(fd);
    // One at a time, in order: each answered before the next asks.
    pollfd ready{fd, POLLIN, 0};
    REQUIRE(::poll(&ready, 1, 10'000) == 1);
  }
  std::map<std::string, int> statuses;
  for (const int fd : readers) {
    char line[12];
    REQUIRE(::recv(fd, line, sizeof line, MSG_WAITALL) == static_cast<ssize_t>(sizeof line));
    ++statuses[std::string(line + 9, 3)];
  }
  for (const int fd : readers) ::close(fd);
  // 64 MiB at most are held: four answers of 16 MiB, then 503 saying why.
  CHECK(statuses["200"] >= 1);
  CHECK(statuses["200"] <= 5);
  CHECK(statuses["503"] >= 5);
  // Once they are gone, answers are whole again.
  for (int i = 0; i < 100 && http_get(server.port(), "/big").status != 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto again = http_get(server.port(), "/big");
  CHECK(again.status == 200);
  CHECK(again.body.size() == big.size());
}

TEST_CASE("HttpServer says why it cannot listen when the port is taken") {
  HttpServer first(*parse_http_address("127.0.0.1:0"), {}, kQuiet);
  HttpAddress same = first.address();
  try {
    HttpServer second(same, {}, kQuiet);
    FAIL("a second server listened on a taken port");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::unavailable);
    CHECK(std::string(e.what()).find(same.str()) != std::string::npos);
  }
}

TEST_CASE("HttpServer stops listening when destroyed") {
  std::uint16_t port = 0;
  {
    HttpServer server(*parse_http_address("127.0.0.1:0"),
                      {{"/x", [](const HttpRequest&) { return http_text(200, "x"); }}}, kQuiet);
    port = server.port();
    CHECK(http_get(port, "/x").status == 200);
  }
  CHECK_THROWS_AS(http_get(port, "/x"), std::runtime_error);
}

}  // namespace
}  // namespace forktrial::transport

namespace forktrial::transport {
namespace {

TEST_CASE("Probes: healthz follows the loop's turns, readyz what the loop says") {
  Probes probes(std::chrono::seconds(1));
  HttpServer server(*parse_http_address("127.0.0.1:0"), probes.routes(), kQuiet);
  CHECK(testing::http_get(server.port(), "/healthz").status == 503);  // no turn yet
  auto not_ready = testing::http_get(server.port(), "/readyz");
  CHECK(not_ready.status == 503);
  CHECK(not_ready.body == "not ready: starting\n");

  probes.turned();
  CHECK(testing::http_get(server.port(), "/healthz").status == 200);
  probes.set_ready(true);
  CHECK(testing::http_get(server.port(), "/readyz").status == 200);
  probes.set_ready(false, "the store is full");
  CHECK(testing::http_get(server.port(), "/readyz").body == "not ready: the store is full\n");

  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past the stall
  auto stalled = testing::http_get(server.port(), "/healthz");
  CHECK(stalled.status == 503);
  CHECK(stalled.body.find("stalled") != std::string::npos);
}

}  // namespace
}  // namespace forktrial::transport

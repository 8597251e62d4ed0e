#include "transport/loop_handoff.h"

#include <poll.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/http_get.h"

namespace forktrial::transport {
namespace {

using namespace std::chrono_literals;

HttpRequest get(const std::string& path, const std::string& query = "") {
  return HttpRequest{"GET", path, query};
}

bool readable(int fd, int timeout_ms) {
  pollfd item{fd, POLLIN, 0};
  return ::poll(&item, 1, timeout_ms) == 1;
}

// A loop thread of the test: it polls the hand-off's descriptor, as a
// daemon's loop does, and serves it with `answer` until stopped.
class Loop {
 public:
  Loop(LoopHandoff& handoff, LoopHandoff::Answer answer)
      : thread_([this, &handoff, answer = std::move(answer)] {
          while (!stop_) {
            if (readable(handoff.fd(), 10)) handoff.serve(answer);
            ++turns_;
          }
        }) {}
  ~Loop() {
    stop_ = true;
    thread_.join();
  }
  std::thread::id id() const { return thread_.get_id(); }
  int turns() const { return turns_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> turns_{0};
  std::thread thread_;
};

TEST_CASE("a request is answered on the loop's thread, and the asker gets the answer",
          "[transport][handoff]") {
  LoopHandoff handoff;
  CHECK_FALSE(readable(handoff.fd(), 0));
  // Written on the loop thread before it hands the answer over, read after.
  std::thread::id answered_on;
  Loop loop(handoff, [&](const HttpRequest& request) {
    answered_on = std::this_thread::get_id();
    return http_text(200, request.path + " " + request.query);
  });
  const HttpResponse answer = handoff.ask(get("/api/jobs", "a=1"));
  CHECK(answer.status == 200);
  CHECK(answer.body == "/api/jobs a=1\n");
  CHECK(answered_on == loop.id());
  CHECK(answered_on != std::this_thread::get_id());
}

TEST_CASE("an answer is reused for the same request while fresh, not for another",
          "[transport][handoff]") {
  LoopHandoff handoff(LoopHandoffLimits{.reuse = 60'000ms});
  std::atomic<int> answered{0};
  Loop loop(handoff, [&](const HttpRequest& request) {
    ++answered;
    return http_text(200, request.query + " #" + std::to_string(answered.load()));
  });
  CHECK(handoff.ask(get("/x", "a")).body == "a #1\n");
  CHECK(handoff.ask(get("/x", "a")).body == "a #1\n");
  CHECK(handoff.ask(get("/x", "b")).body == "b #2\n");
  CHECK(answered == 2);
}

TEST_CASE("an answer is reused for longer the more it cost the loop", "[transport][handoff]") {
  LoopHandoff handoff(LoopHandoffLimits{.reuse = 1ms, .reuse_factor = 20});
  std::atomic<int> answered{0};
  Loop loop(handoff, [&](const HttpRequest&) {
    ++answered;
    std::this_thread::sleep_for(50ms);  // reused for 20 x 50 ms = 1 s
    return http_text(200, "slow");
  });
  CHECK(handoff.ask(get("/slow")).status == 200);
  std::this_thread::sleep_for(100ms);
  CHECK(handoff.ask(get("/slow")).status == 200);
  CHECK(answered == 1);
}

TEST_CASE("askers of a request already waiting share its one answer", "[transport][handoff]") {
  LoopHandoff handoff;
  std::vector<std::future<HttpResponse>> askers;
  for (int i = 0; i < 4; ++i) {
    askers.push_back(std::async(std::launch::async, [&] { return handoff.ask(get("/same")); }));
  }
  // Every asker is waiting before the loop turns.
  std::this_thread::sleep_for(200ms);
  REQUIRE(readable(handoff.fd(), 0));
  int answered = 0;
  handoff.serve([&](const HttpRequest&) {
    ++answered;
    return http_text(200, "one");
  });
  for (auto& asker : askers) CHECK(asker.get().body == "one\n");
  CHECK(answered == 1);
}

TEST_CASE("a loop that does not answer in time leaves the asker a 503, and answers nothing late",
          "[transport][handoff]") {
  LoopHandoff handoff(LoopHandoffLimits{.patience = 100ms});
  const auto start = std::chrono::steady_clock::now();
  const HttpResponse answer = handoff.ask(get("/api/jobs"));
  CHECK(answer.status == 503);
  CHECK(answer.body.find("did not answer within 100 ms") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // The asker gave up: the loop, turning late, has nothing to answer.
  bool asked = false;
  handoff.serve([&](const HttpRequest&) {
    asked = true;
    return http_text(200, "late");
  });
  CHECK_FALSE(asked);
  // ... and is not woken again: the descriptor is drained, so a loop
  // polling it sleeps rather than spins.
  CHECK_FALSE(readable(handoff.fd(), 0));
}

TEST_CASE("one serve answers for at most its turn budget and leaves the loop awake for the rest",
          "[transport][handoff]") {
  LoopHandoff handoff(LoopHandoffLimits{.turn_budget = 20ms});
  std::vector<std::future<HttpResponse>> askers;
  for (const char* path : {"/a", "/b", "/c"}) {
    askers.push_back(std::async(std::launch::async, [&, path] { return handoff.ask(get(path)); }));
  }
  std::this_thread::sleep_for(200ms);
  const auto slow = [](const HttpRequest& request) {
    std::this_thread::sleep_for(30ms);
    return http_text(200, request.path);
  };
  handoff.serve(slow);  // one answer spends the budget
  CHECK(readable(handoff.fd(), 0));
  int turns = 0;
  while (readable(handoff.fd(), 0) && turns < 10) {
    handoff.serve(slow);
    ++turns;
  }
  CHECK(turns == 2);
  for (auto& asker : askers) CHECK(asker.get().status == 200);
}

TEST_CASE("close answers every waiting asker 503, and every later one", "[transport][handoff]") {
  LoopHandoff handoff;
  auto waiting = std::async(std::launch::async, [&] { return handoff.ask(get("/api/jobs")); });
  std::this_thread::sleep_for(100ms);
  handoff.close();
  CHECK(waiting.get().status == 503);
  CHECK(handoff.ask(get("/api/jobs")).status == 503);
}

TEST_CASE("a loop serving nobody turns on, and an answer that throws is a 500",
          "[transport][handoff]") {
  LoopHandoff handoff;
  Loop loop(handoff, [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); });
  const HttpResponse answer = handoff.ask(get("/broken"));
  CHECK(answer.status == 500);
  CHECK(answer.body.find("boom") != std::string::npos);
  const int before = loop.turns();
  std::this_thread::sleep_for(100ms);
  CHECK(loop.turns() > before);
}

TEST_CASE("an HTTP server's handler asks the loop, which serves it between its turns",
          "[transport][handoff]") {
  LoopHandoff handoff;
  HttpServer server(*parse_http_address("127.0.0.1:0"), {{"/state", handoff.handler()}},
                    [](LogLevel, const std::string&) {});
  int state = 41;  // owned by the loop thread below
  Loop loop(handoff, [&state](const HttpRequest&) {
    ++state;
    return http_text(200, std::to_string(state));
  });
  const auto answer = testing::http_get(server.port(), "/state");
  CHECK(answer.status == 200);
  CHECK(answer.body == "42\n");
}

}  // namespace
}  // namespace forktrial::transport

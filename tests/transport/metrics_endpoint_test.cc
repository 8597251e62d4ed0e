// /metrics serves a registry in Prometheus's text format; the strict reader
// the daemons' tests use (tests/support/exposition.h) is checked here too,
// one test per kind of bad line, so its passes mean something.
#include "transport/metrics_endpoint.h"

#include <catch2/catch.hpp>
#include <string>

#include "tests/support/exposition.h"
#include "tests/support/http_get.h"

namespace forktrial::transport {
namespace {

using testing::parse_exposition;

const Log kQuiet = [](LogLevel, const std::string&) {};

TEST_CASE("/metrics serves counters, labelled gauges and histograms in the text format",
          "[transport][metrics]") {
  auto registry = std::make_shared<prometheus::Registry>();
  add_counter(*registry, "demo_events_total", "Events seen").Increment(3);
  auto& red = add_gauge(*registry, "demo_things", "Things by colour", {{"colour", "red"}});
  add_gauge(*registry, "demo_things", "Things by colour", {{"colour", "blue \"b\""}}).Set(2);
  red.Set(5);
  auto& latency = add_histogram(*registry, "demo_latency_seconds", "Latency", {0.1, 1});
  latency.Observe(0.05);
  latency.Observe(0.5);
  latency.Observe(7);

  HttpServer server(*parse_http_address("127.0.0.1:0"), {metrics_route(registry)}, kQuiet);
  const auto answer = testing::http_get(server.port(), "/metrics");
  REQUIRE(answer.status == 200);
  CHECK(answer.headers.find("Content-Type: text/plain; version=0.0.4; charset=utf-8") !=
        std::string::npos);
  const auto exposition = parse_exposition(answer.body);
  INFO(answer.body);
  REQUIRE(exposition.has_value());
  CHECK(exposition->types.at("demo_events_total") == "counter");
  CHECK(exposition->types.at("demo_things") == "gauge");
  CHECK(exposition->types.at("demo_latency_seconds") == "histogram");
  CHECK(exposition->at("demo_events_total") == 3);
  CHECK(exposition->at("demo_things{colour=\"red\"}") == 5);
  CHECK(exposition->at("demo_things{colour=\"blue \"b\"\"}") == 2);
  CHECK(exposition->at("demo_latency_seconds_bucket{le=\"0.1\"}") == 1);
  CHECK(exposition->at("demo_latency_seconds_bucket{le=\"1\"}") == 2);
  CHECK(exposition->at("demo_latency_seconds_bucket{le=\"+Inf\"}") == 3);
  CHECK(exposition->at("demo_latency_seconds_count") == 3);
  CHECK(exposition->at("demo_latency_seconds_sum") == Approx(7.55));
  // What the loop changes shows in the next scrape.
  red.Set(6);
  CHECK(parse_exposition(metrics_text(*registry))->at("demo_things{colour=\"red\"}") == 6);
}

TEST_CASE("the exposition reader takes a well-formed text and refuses each kind of bad line",
          "[transport][metrics]") {
  const std::string head = "# HELP a_total Things\n# TYPE a_total counter\n";
  auto good = parse_exposition(head + "a_total{x=\"1\",b=\"q\\\\\\n\\\"\"} 1.5e3 1700000000000\n" +
                               "# a plain comment\na_total 2\n");
  REQUIRE(good.has_value());
  CHECK(good->at("a_total{b=\"q\\\n\"\",x=\"1\"}") == 1500);
  CHECK(good->at("a_total") == 2);
  CHECK_THROWS(good->at("a_total{x=\"2\"}"));
  const std::pair<std::string, std::string> bad[] = {
      {"b_total 1\n", "before a # TYPE"},
      {head + "a_total\n", "no space before the value"},
      {head + "a_total one\n", "not a sample value"},
      {head + "a_total 1 soon\n", "not a timestamp"},
      {head + "a_total{x=1} 1\n", "has no =\"value\""},
      {head + "a_total{x=\"1} 1\n", "not closed"},
      {head + "a_total{x=\"1\",x=\"2\"} 1\n", "label x twice"},
      {head + "a_total{x=\"\\t\"} 1\n", "the escape"},
      {head + "a_total 1\na_total 2\n", "series a_total twice"},
      {head + "\n", "an empty line"},
      {head + "a_total 1", "does not end with a newline"},
      {"# TYPE a_total countr\n", "not a metric type"},
      {head + "# TYPE a_total gauge\n", "a second # TYPE"},
      {head + "# HELP a_total again\n", "a second # HELP"},
      {"# TYPE 9lives gauge\n", "names no metric"},
      {"# TYPE g gauge\ng_bucket{le=\"1\"} 1\n", "before a # TYPE"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    const auto parsed = parse_exposition(text);
    REQUIRE_FALSE(parsed.has_value());
    CHECK_THAT(parsed.error(), Catch::Contains(why));
  }
}

}  // namespace
}  // namespace forktrial::transport

// A daemon's /metrics: a prometheus-cpp registry served in Prometheus's text
// exposition format (version 0.0.4) through the daemon's HttpServer.
//
// The registry is shared: the daemon's loop thread updates its counters,
// gauges and histograms (each update is an atomic or a short lock inside
// prometheus-cpp), and an HttpServer thread collects and serializes it on
// each scrape. Families may be added or removed while a scrape runs:
// prometheus-cpp's Registry and Family lock around collection.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "schema/outcome.h"
#include "schema/wire_codec.h"
#include "transport/http_server.h"

namespace forktrial::transport {

// The Content-Type of the text format Prometheus scrapes.
inline constexpr std::string_view kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// One series of the family `name` in `registry`, the family made with `help`
// on its first series: calls with one name and other `labels` add series to
// one family. The reference lives as long as the registry (unless the
// family's Remove() takes it). Throws std::invalid_argument for a name or a
// label that is not valid in Prometheus, or a name taken by a family of
// another type. For setting up: each call looks the family up by name.
prometheus::Counter& add_counter(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help, const prometheus::Labels& labels = {});
prometheus::Gauge& add_gauge(prometheus::Registry& registry, const std::string& name,
                             const std::string& help, const prometheus::Labels& labels = {});
prometheus::Histogram& add_histogram(prometheus::Registry& registry, const std::string& name,
                                     const std::string& help,
                                     const prometheus::Histogram::BucketBoundaries& buckets,
                                     const prometheus::Labels& labels = {});

// What both daemons count: trials by outcome, each with its duration, and
// messages refused by wire error code. Set up in a constructor; the updates
// are for one thread (the loop's), each an atomic or a short lock.

// Two families with an `outcome` label: `counter` (trials by outcome) and
// `histogram` (their durations, 10 ms to 10 min).
class OutcomeSeries {
 public:
  struct Family {
    std::string name;
    std::string help;
  };
  OutcomeSeries(prometheus::Registry& registry, const Family& counter, const Family& histogram);
  // One trial of `outcome` that took `took`; an outcome this build does not
  // know is not counted.
  void observe(Outcome outcome, std::chrono::duration<double> took);

 private:
  std::array<prometheus::Counter*, kOutcomes.size()> counters_{};
  std::array<prometheus::Histogram*, kOutcomes.size()> durations_{};
};

// A counter family with a `reason` label: one series per error category
// (base/error.h error_code_name), the code errors carry on the wire.
class ErrorCodeCounters {
 public:
  ErrorCodeCounters(prometheus::Registry& registry, const std::string& name,
                    const std::string& help);
  void count(ErrorCode code);

 private:
  std::array<prometheus::Counter*, kErrorCodes.size()> counters_{};
};

// Everything `registry` holds now, in the text format: for each family its
// `# HELP` and `# TYPE` lines, then one `name{labels} value` line per series.
std::string metrics_text(const prometheus::Registry& registry);

// The "/metrics" route serving `registry`, which the route keeps alive.
std::pair<std::string, HttpHandler> metrics_route(
    std::shared_ptr<const prometheus::Registry> registry);

}  // namespace forktrial::transport

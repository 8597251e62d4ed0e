#include "transport/metrics_endpoint.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <sstream>
#include <utility>

namespace forktrial::transport {
namespace {

// A trial runs from milliseconds (a smoke scenario) to its wall-clock limit
// (minutes).
const prometheus::Histogram::BucketBoundaries kTrialBuckets = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};

}  // namespace

prometheus::Counter& add_counter(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help, const prometheus::Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Gauge& add_gauge(prometheus::Registry& registry, const std::string& name,
                             const std::string& help, const prometheus::Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add(labels);
}

prometheus::Histogram& add_histogram(prometheus::Registry& registry, const std::string& name,
                                     const std::string& help,
                                     const prometheus::Histogram::BucketBoundaries& buckets,
                                     const prometheus::Labels& labels) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(labels, buckets);
}

OutcomeSeries::OutcomeSeries(prometheus::Registry& registry, const Family& counter,
                             const Family& histogram) {
  for (std::size_t o = 0; o < kOutcomes.size(); ++o) {
    const prometheus::Labels outcome{{"outcome", std::string(outcome_name(kOutcomes[o]))}};
    counters_[o] = &add_counter(registry, counter.name, counter.help, outcome);
    durations_[o] =
        &add_histogram(registry, histogram.name, histogram.help, kTrialBuckets, outcome);
  }
}

void OutcomeSeries::observe(Outcome outcome, std::chrono::duration<double> took) {
  const auto o = static_cast<std::size_t>(outcome);
  if (o >= kOutcomes.size()) return;
  counters_[o]->Increment();
  durations_[o]->Observe(took.count());
}

ErrorCodeCounters::ErrorCodeCounters(prometheus::Registry& registry, const std::string& name,
                                     const std::string& help) {
  for (std::size_t c = 0; c < counters_.size(); ++c) {
    counters_[c] = &add_counter(registry, name, help,
                                {{"reason", std::string(error_code_name(kErrorCodes[c]))}});
  }
}

void ErrorCodeCounters::count(ErrorCode code) {
  counters_[std::min(static_cast<std::size_t>(code), counters_.size() - 1)]->Increment();
}

std::string metrics_text(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return std::move(out).str();
}

std::pair<std::string, HttpHandler> metrics_route(
    std::shared_ptr<const prometheus::Registry> registry) {
  return {"/metrics", [registry = std::move(registry)](const HttpRequest&) {
            HttpResponse response;
            response.content_type = std::string(kMetricsContentType);
            response.body = metrics_text(*registry);
            return response;
          }};
}

}  // namespace forktrial::transport

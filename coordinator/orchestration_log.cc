#include "coordinator/orchestration_log.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "base/text.h"
#include "base/timestamp.h"

namespace forktrial::coordinator {
namespace {

// Ordered, so that a record's fields appear in its struct's order and equal
// records give equal payload bytes.
using Json = nlohmann::ordered_json;

constexpr std::size_t kRecordKinds = std::variant_size_v<OrchestrationRecord>;

template <std::size_t... I>
constexpr std::array<std::string_view, sizeof...(I)> record_types(std::index_sequence<I...>) {
  return {std::variant_alternative_t<I, OrchestrationRecord>::kType...};
}
// The event type of each alternative, by variant index.
constexpr auto kRecordTypes = record_types(std::make_index_sequence<kRecordKinds>{});

std::optional<std::size_t> record_index(std::string_view type) {
  const auto* found = std::find(kRecordTypes.begin(), kRecordTypes.end(), type);
  if (found == kRecordTypes.end()) return std::nullopt;
  return static_cast<std::size_t>(found - kRecordTypes.begin());
}

// The first and last instants ISO-8601's four-digit years can show
// (0001-01-01T00:00:00.000Z, 9999-12-31T23:59:59.999Z).
constexpr UnixMillis kFirstTimestamp = -62'135'596'800'000;
constexpr UnixMillis kLastTimestamp = 253'402'300'799'999;

// ---- Encoding ---------------------------------------------------------------

constexpr std::string_view kHexDigits = "0123456789abcdef";

// Text as a JSON value: a string when it is valid UTF-8 (JSON text holds
// nothing else), its bytes in hex otherwise.
Json text_json(std::string_view text) {
  if (is_valid_utf8(text)) return Json(std::string(text));
  std::string hex;
  hex.reserve(text.size() * 2);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    hex += kHexDigits[byte >> 4];
    hex += kHexDigits[byte & 0xF];
  }
  Json object = Json::object();
  object["hex"] = std::move(hex);
  return object;
}

// JSON text written as it is made, for the records written once per trial
// or offer: the text nlohmann's dump() gives for the same tree (keys in
// the order written, no spaces), without building the tree.
class JsonText {
 public:
  void open(char bracket) {
    out_ += bracket;
    first_ = true;
  }
  void close(char bracket) {
    out_ += bracket;
    first_ = false;
  }
  // Before an array's element.
  void element() {
    if (!first_) out_ += ',';
    first_ = false;
  }
  void key(std::string_view name) {  // a name of this file's, plain ASCII
    element();
    out_ += '"';
    out_ += name;
    out_ += "\":";
    first_ = true;  // the value follows without a comma
  }
  template <typename Integer>
  void number(Integer value) {
    out_ += std::to_string(value);
    first_ = false;
  }
  // Text as text_json writes it: a string, or its bytes in hex.
  void text(std::string_view value) {
    if (!is_valid_utf8(value)) {
      out_ += text_json(value).dump();
    } else {
      out_ += '"';
      for (const char c : value) {
        const auto byte = static_cast<unsigned char>(c);
        switch (c) {
          case '"':
            out_ += "\\\"";
            break;
          case '\\':
            out_ += "\\\\";
            break;
          case '\b':
            out_ += "\\b";
            break;
          case '\f':
            out_ += "\\f";
            break;
          case '\n':
            out_ += "\\n";
            break;
          case '\r':
            out_ += "\\r";
            break;
          case '\t':
            out_ += "\\t";
            break;
          default:
            if (byte < 0x20) {
              out_ += "\\u00";
              out_ += kHexDigits[byte >> 4];
              out_ += kHexDigits[byte & 0xF];
            } else {
              out_ += c;
            }
        }
      }
      out_ += '"';
    }
    first_ = false;
  }
  // A trial's fields, inside its object.
  void trial(const TrialId& trial) {
    key("job");
    text(trial.job.str());
    key("index");
    number(trial.index);
  }
  // JSON text made elsewhere.
  void raw(std::string_view json) {
    out_ += json;
    first_ = false;
  }
  std::string take() && { return std::move(out_); }

 private:
  std::string out_;
  bool first_ = true;
};

Json instant_json(Instant instant) {
  return Json(static_cast<std::int64_t>(instant.time_since_epoch().count()));
}

Json trial_json(const TrialId& trial) {
  Json object = Json::object();
  object["job"] = text_json(trial.job.str());
  object["index"] = trial.index;
  return object;
}

Json digests_json(const std::vector<Digest>& digests) {
  Json array = Json::array();
  array.get_ref<Json::array_t&>().reserve(digests.size());
  for (const Digest& digest : digests) array.push_back(digest.str());
  return array;
}

// One trial of a job.submitted record, as its own JSON text.
std::string trial_text(const TrialInput& input) {
  Json trial = Json::object();
  trial["payload"] = text_json(input.payload);
  trial["segment"] = input.segment.str();
  trial["bundles"] = digests_json(input.bundles);
  if (input.run_limit.count() > 0) trial["run_ms"] = input.run_limit.count();
  // Lua, the default, is not written: most trials are, and a log written
  // before executors were told apart reads as Lua.
  if (input.executor != pack::Executor::lua) {
    trial["executor"] = pack::executor_name(input.executor);
  }
  if (input.cache_key) trial["cache_key"] = input.cache_key->str();
  return trial.dump();
}

// A job's own retention, when it has one (keep_forks, keep_forks_after).
void encode_retention(const std::optional<RetentionPolicy>& retention, Json& out) {
  if (!retention) return;
  out["keep_forks"] = std::string(keep_forks_name(retention->keep));
  out["keep_forks_after"] = retention->after.count();
}

// A job.submitted record's events: its payload written a trial at a time
// (one JSON tree of the whole job took gigabytes for a million trials), cut
// into a job.submitted event and job.trials events of about `chunk_bytes`
// each, every one handed to `emit(type, payload)` as soon as it is written,
// so that only one chunk's text is held at a time. A job that fits in one
// chunk is one event without "trial_count", as builds before chunking wrote.
template <typename Emit>
void job_submitted_texts(const JobSubmitted& r, std::size_t chunk_bytes, Emit&& emit) {
  // The trials [begin, end) as a JSON array's elements, and where the chunk
  // that starts at `begin` ends.
  std::string trials;
  const auto fill = [&](std::size_t begin) {
    trials.clear();
    std::size_t end = begin;
    while (end < r.trials.size() && (end == begin || trials.size() < chunk_bytes)) {
      if (end > begin) trials += ',';
      trials += trial_text(r.trials[end++]);
    }
    return end;
  };
  std::size_t next = fill(0);
  Json head = Json::object();
  head["job"] = text_json(r.job.str());
  head["priority"] = r.priority;
  head["name"] = text_json(r.name);
  std::string text = head.dump();
  text.pop_back();  // its '}'
  text += ",\"trials\":[";
  text += trials;
  text += ']';
  Json tail = Json::object();
  if (next < r.trials.size()) tail["trial_count"] = r.trials.size();
  if (!r.owner.empty()) tail["owner"] = text_json(r.owner);
  encode_retention(r.retention, tail);
  tail["at"] = instant_json(r.at);
  text += ',';
  text += tail.dump().substr(1);  // without its '{'
  emit(JobSubmitted::kType, std::move(text));
  while (next < r.trials.size()) {
    const std::size_t first = next;
    next = fill(first);
    Json part = Json::object();
    part["job"] = text_json(r.job.str());
    part["first"] = first;
    text = part.dump();
    text.pop_back();
    text += ",\"trials\":[";
    text += trials;
    text += "],\"at\":";
    text += instant_json(r.at).dump();
    text += '}';
    emit(kJobTrialsType, std::move(text));
  }
}

void encode(const JobCancelled& r, Json& out) {
  out["job"] = text_json(r.job.str());
}

void encode(const WorkerJoined& r, Json& out) {
  out["worker"] = text_json(r.worker.str());
  out["slots"] = r.slots;
  out["prefetch"] = r.prefetch;
  out["cached"] = digests_json(r.cached);
  Json executors = Json::array();
  for (const pack::Executor executor : r.executors) {
    executors.push_back(pack::executor_name(executor));
  }
  out["executors"] = std::move(executors);
}

void encode(const WorkerLost& r, Json& out) {
  out["worker"] = text_json(r.worker.str());
  out["reason"] = text_json(r.reason);
}

void encode(const LeasesRenewed& r, Json& out) {
  out["worker"] = text_json(r.worker.str());
  Json renewed = Json::array();
  for (const AttemptRef& ref : r.renewed) {
    Json entry = Json::object();
    entry["trial"] = trial_json(ref.trial);
    entry["attempt"] = ref.attempt;
    renewed.push_back(std::move(entry));
  }
  out["renewed"] = std::move(renewed);
  out["expires"] = instant_json(r.expires);
}

void encode(const TrialLeased& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["worker"] = text_json(r.worker.str());
  out["expires"] = instant_json(r.expires);
  if (r.deadline != Instant{}) out["deadline"] = instant_json(r.deadline);
}

void encode(const TrialRequeued& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["reason"] = text_json(r.reason);
}

void encode(const TrialAbandoned& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  Json reasons = Json::array();
  for (const std::string& reason : r.reasons) reasons.push_back(text_json(reason));
  out["reasons"] = std::move(reasons);
}

void encode(const TrialReported& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["worker"] = text_json(r.worker.str());
}

void encode(const TrialFenced& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["worker"] = text_json(r.worker.str());
  out["reason"] = text_json(r.reason);
}

void encode(const JobArchived& r, Json& out) {
  out["job"] = text_json(r.job.str());
}

void encode(const TrialReconciled& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["outcome"] = std::string(outcome_name(r.outcome));
}

void encode(const TrialCached& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["attempt"] = r.attempt;
  out["source"] = trial_json(r.source);
  out["outcome"] = std::string(outcome_name(r.outcome));
}

template <std::size_t N>
Json counts_json(const std::array<std::uint64_t, N>& counts) {
  Json array = Json::array();
  for (const std::uint64_t count : counts) array.push_back(count);
  return array;
}

void encode(const JobSummary& r, Json& out) {
  out["job"] = text_json(r.job.str());
  out["priority"] = r.priority;
  out["name"] = text_json(r.name);
  if (!r.owner.empty()) out["owner"] = text_json(r.owner);
  encode_retention(r.retention, out);
  out["cancelled"] = r.cancelled;
  out["trials"] = r.trials;
  out["counts"] = counts_json(r.counts);
  out["outcomes"] = counts_json(r.outcomes);
  out["failed_attempts"] = r.failed_attempts;
  out["fenced_reports"] = r.fenced_reports;
  out["submitted_at"] = instant_json(r.submitted_at);
  out["finished_at"] = instant_json(r.finished_at);
  if (r.cached != 0) out["cached"] = r.cached;
}

void encode(const TrialRestored& r, Json& out) {
  out["trial"] = trial_json(r.trial);
  out["status"] = std::string(trial_status_name(r.status));
  out["attempt"] = r.attempt;
  out["leased_attempt"] = r.leased_attempt;
  if (r.worker) out["worker"] = text_json(r.worker->str());
  if (r.expires != Instant{}) out["expires"] = instant_json(r.expires);
  if (r.deadline != Instant{}) out["deadline"] = instant_json(r.deadline);
  if (!r.reasons.empty()) {
    Json reasons = Json::array();
    for (const std::string& reason : r.reasons) reasons.push_back(text_json(reason));
    out["reasons"] = std::move(reasons);
  }
  if (r.outcome) out["outcome"] = std::string(outcome_name(*r.outcome));
}

void encode(const JobRestored& r, Json& out) {
  out["job"] = text_json(r.job.str());
  out["cancelled"] = r.cancelled;
  out["failed_attempts"] = r.failed_attempts;
  out["fenced_reports"] = r.fenced_reports;
  if (r.finished_at) out["finished_at"] = instant_json(*r.finished_at);
}

// ---- Decoding ---------------------------------------------------------------
//
// The readers keep the first problem they meet and go on with default values
// (every later read is then a no-op), so that a record's decoder reads like
// its encoder, without a check after each field.

// A field's path from the payload ("trial.index", "trials[3].bundles[0]");
// empty for the payload itself.
std::string describe(const std::string& path) {
  return path.empty() ? "payload" : "field \"" + bounded_escaped(path, 256) + "\"";
}

std::string article_type(const Json& value) {
  const std::string_view name = value.type_name();
  return (name == "object" || name == "array" ? "an " : "a ") + std::string(name);
}

// A number as written, anything else by its type (a string may be huge).
std::string value_text(const Json& value) {
  return value.is_number() ? value.dump() : article_type(value);
}

class Problem {
 public:
  bool found() const { return !message_.empty(); }
  void report(const std::string& path, const std::string& what) {
    if (!found()) message_ = describe(path) + " " + what;
  }
  void mistyped(const std::string& path, const Json& value, std::string_view expected) {
    report(path, "is " + article_type(value) + ", not " + std::string(expected));
  }
  std::string take() { return std::move(message_); }

 private:
  std::string message_;
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The fields of one JSON object. Each is read once, by name; finish()
// reports a field nobody read, since a field this build does not write means
// a record it does not know.
class Fields {
 public:
  Fields(const Json& value, std::string path, Problem& problem)
      : object_(value.is_object() ? &value : nullptr), path_(std::move(path)), problem_(problem) {
    if (object_ == nullptr) problem_.mistyped(path_, value, "an object");
  }

  std::string text(std::string_view key) {
    const Json* value = take(key);
    return value == nullptr ? std::string() : text_of(*value, name(key));
  }

  std::vector<std::string> texts(std::string_view key) {
    std::vector<std::string> texts;
    each(key, [&](const Json& element, const std::string& path) {
      texts.push_back(text_of(element, path));
    });
    return texts;
  }

  // A field later builds write; a record without it has `absent`.
  std::uint32_t u32_or(std::string_view key, std::uint32_t absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    return u32(key);
  }

  std::uint32_t u32(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return 0;
    if (!value->is_number_unsigned() ||
        value->get<std::uint64_t>() > std::numeric_limits<std::uint32_t>::max()) {
      problem_.report(name(key), "is " + value_text(*value) + ", not an integer in 0.." +
                                     std::to_string(std::numeric_limits<std::uint32_t>::max()));
      return 0;
    }
    return static_cast<std::uint32_t>(value->get<std::uint64_t>());
  }

  // A signed integer in [min, max].
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max) {
    const Json* value = take(key);
    if (value == nullptr) return 0;
    std::optional<std::int64_t> number;
    if (value->is_number_unsigned()) {
      const auto u = value->get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(max)) number = static_cast<std::int64_t>(u);
    } else if (value->is_number_integer()) {
      number = value->get<std::int64_t>();
    }
    if (!number || *number < min || *number > max) {
      problem_.report(name(key), "is " + value_text(*value) + ", not an integer in " +
                                     std::to_string(min) + ".." + std::to_string(max));
      return 0;
    }
    return *number;
  }

  // Fields later builds write; a record without one has `absent`.
  std::string text_or(std::string_view key, std::string absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    return text(key);
  }
  Duration duration_or(std::string_view key, Duration absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    return Duration{integer(key, 0, std::numeric_limits<Duration::rep>::max())};
  }
  Instant instant_or(std::string_view key, Instant absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    return instant(key);
  }
  std::optional<Digest> digest_or_none(std::string_view key) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return std::nullopt;
    return digest(key);
  }

  pack::Executor executor_or(std::string_view key, pack::Executor absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    return executor_of(*take(key), name(key));
  }
  std::vector<pack::Executor> executors_or(std::string_view key,
                                           std::vector<pack::Executor> absent) {
    if (object_ == nullptr || problem_.found() || !object_->contains(key)) return absent;
    std::vector<pack::Executor> executors;
    each(key, [&](const Json& element, const std::string& path) {
      executors.push_back(executor_of(element, path));
    });
    return executors;
  }

  bool has(std::string_view key) const {
    return object_ != nullptr && !problem_.found() && object_->contains(key);
  }

  bool flag(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return false;
    if (!value->is_boolean()) {
      problem_.mistyped(name(key), *value, "true or false");
      return false;
    }
    return value->get<bool>();
  }

  std::uint64_t u64(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return 0;
    if (!value->is_number_unsigned()) {
      problem_.report(name(key), "is " + value_text(*value) + ", not an integer in 0..2^64-1");
      return 0;
    }
    return value->get<std::uint64_t>();
  }

  // An array of exactly N unsigned integers.
  template <std::size_t N>
  std::array<std::uint64_t, N> counts(std::string_view key) {
    std::array<std::uint64_t, N> counts{};
    std::size_t n = 0;
    each(key, [&](const Json& element, const std::string& path) {
      if (!element.is_number_unsigned()) {
        problem_.report(path, "is " + value_text(element) + ", not an integer in 0..2^64-1");
      } else if (n < N) {
        counts[n] = element.get<std::uint64_t>();
      }
      ++n;
    });
    if (!problem_.found() && n != N) {
      problem_.report(name(key),
                      "holds " + std::to_string(n) + " counts, not " + std::to_string(N));
    }
    return counts;
  }

  TrialStatus status(std::string_view key) {
    const std::string text = this->text(key);
    if (problem_.found()) return {};
    const std::optional<TrialStatus> status = parse_trial_status(text);
    if (!status) problem_.report(name(key), quoted_excerpt(text) + " is not a trial status");
    return status.value_or(TrialStatus::queued);
  }

  Instant instant(std::string_view key) {
    return Instant{Duration{integer(key, std::numeric_limits<Duration::rep>::min(),
                                    std::numeric_limits<Duration::rep>::max())}};
  }

  Digest digest(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return {};
    return digest_of(*value, name(key));
  }

  Outcome outcome(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return {};
    if (!value->is_string()) {
      problem_.mistyped(name(key), *value, "a string");
      return {};
    }
    const auto& text = value->get_ref<const std::string&>();
    const std::optional<Outcome> outcome = outcome_from_name(text);
    if (!outcome) problem_.report(name(key), quoted_excerpt(text) + " is not an outcome name");
    return outcome.value_or(Outcome{});
  }

  TrialId trial(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr) return {};
    Fields fields(*value, name(key), problem_);
    TrialId trial{JobId{fields.text("job")}, fields.u32("index")};
    fields.finish();
    return trial;
  }

  // Calls `item(element, path)` for each element of the array `key` until a
  // problem is found.
  template <typename Item>
  void each(std::string_view key, Item&& item) {
    const Json* value = take(key);
    if (value == nullptr) return;
    if (!value->is_array()) {
      problem_.mistyped(name(key), *value, "an array");
      return;
    }
    const std::string prefix = name(key) + "[";
    std::size_t index = 0;
    for (const Json& element : *value) {
      if (problem_.found()) return;
      item(element, prefix + std::to_string(index++) + "]");
    }
  }

  // An object field, read by the caller (nullptr when there is a problem).
  const Json* object(std::string_view key) {
    const Json* value = take(key);
    if (value == nullptr || value->is_object()) return value;
    problem_.mistyped(name(key), *value, "an object");
    return nullptr;
  }

  std::vector<Digest> digests(std::string_view key) {
    std::vector<Digest> digests;
    each(key, [&](const Json& element, const std::string& path) {
      digests.push_back(digest_of(element, path));
    });
    return digests;
  }

  void finish() {
    if (object_ == nullptr || problem_.found() || taken_.size() == object_->size()) return;
    for (const auto& [key, value] : object_->items()) {
      if (std::find(taken_.begin(), taken_.end(), key) == taken_.end()) {
        problem_.report(name(key), "is not a field of this record");
        return;
      }
    }
  }

  std::string name(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  Problem& problem() { return problem_; }
  // A field read whose value this build does not know.
  void report(std::string_view key, const std::string& what) { problem_.report(name(key), what); }

 private:
  // The field `key`, or nullptr when there is a problem (a missing field is
  // one).
  const Json* take(std::string_view key) {
    if (object_ == nullptr || problem_.found()) return nullptr;
    const auto found = object_->find(key);
    if (found == object_->end()) {
      problem_.report(name(key), "is missing");
      return nullptr;
    }
    taken_.push_back(key);
    return &found.value();
  }

  // A string, or {"hex": "<lowercase hex of its bytes>"} for text that is
  // not UTF-8.
  std::string text_of(const Json& value, const std::string& path) {
    if (problem_.found()) return {};
    if (value.is_string()) return value.get<std::string>();
    if (!value.is_object()) {
      problem_.mistyped(path, value, "a string");
      return {};
    }
    Fields hex_object(value, path, problem_);
    const Json* hex = hex_object.take("hex");
    hex_object.finish();
    if (hex == nullptr) return {};
    if (!hex->is_string()) {
      problem_.mistyped(hex_object.name("hex"), *hex, "a string");
      return {};
    }
    const auto& digits = hex->get_ref<const std::string&>();
    std::string bytes;
    bytes.reserve(digits.size() / 2);
    for (std::size_t i = 0; i + 1 < digits.size(); i += 2) {
      const int high = hex_value(digits[i]);
      const int low = hex_value(digits[i + 1]);
      if (high < 0 || low < 0) break;
      bytes += static_cast<char>(high << 4 | low);
    }
    if (bytes.size() * 2 != digits.size()) {
      problem_.report(hex_object.name("hex"), "is not an even number of lowercase hex digits");
      return {};
    }
    return bytes;
  }

  pack::Executor executor_of(const Json& value, const std::string& path) {
    if (problem_.found()) return {};
    if (!value.is_string()) {
      problem_.mistyped(path, value, "an executor name");
      return {};
    }
    const auto& text = value.get_ref<const std::string&>();
    const auto executor = pack::executor_named(text);
    if (!executor) problem_.report(path, quoted_excerpt(text) + " is not an executor");
    return executor.value_or(pack::Executor::lua);
  }

  Digest digest_of(const Json& value, const std::string& path) {
    if (problem_.found()) return {};
    if (!value.is_string()) {
      problem_.mistyped(path, value, "a digest string");
      return {};
    }
    const auto& text = value.get_ref<const std::string&>();
    if (std::optional<Digest> digest = Digest::parse(text)) return *digest;
    problem_.report(path, quoted_excerpt(text) + " is not a digest: " +
                              Digest::describe_pin_problem(text).value_or("malformed"));
    return {};
  }

  const Json* object_;
  std::string path_;
  Problem& problem_;
  std::vector<std::string_view> taken_;  // the keys read, all string literals
};

// The "trials" of a job.submitted or job.trials payload, appended to `trials`.
// One trial as trial_text writes it.
TrialInput decode_trial(const Json& element, std::string path, Problem& problem) {
  Fields trial(element, std::move(path), problem);
  TrialInput input;
  input.payload = trial.text("payload");
  input.segment = trial.digest("segment");
  input.bundles = trial.digests("bundles");
  input.run_limit = trial.duration_or("run_ms", Duration{0});
  input.executor = trial.executor_or("executor", pack::Executor::lua);
  input.cache_key = trial.digest_or_none("cache_key");
  trial.finish();
  return input;
}

void decode_trials(Fields& f, std::vector<TrialInput>& trials) {
  f.each("trials", [&](const Json& element, std::string path) {
    trials.push_back(decode_trial(element, std::move(path), f.problem()));
  });
}

std::optional<RetentionPolicy> decode_retention(Fields& f) {
  const std::string keep = f.text_or("keep_forks", "");
  if (keep.empty()) return std::nullopt;
  RetentionPolicy retention;
  if (auto parsed = parse_keep_forks(keep)) {
    retention.keep = *parsed;
  } else {
    f.report("keep_forks", "\"" + keep + "\" is not a retention (all, failures, none)");
  }
  retention.after = f.duration_or("keep_forks_after", Duration{0});
  return retention;
}

void decode(Fields& f, JobArchived& r) {
  r.job = JobId{f.text("job")};
}

void decode(Fields& f, JobSubmitted& r) {
  r.job = JobId{f.text("job")};
  r.priority = static_cast<int>(
      f.integer("priority", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  r.name = f.text("name");
  decode_trials(f, r.trials);
  r.owner = f.text_or("owner", "");
  r.retention = decode_retention(f);
}

void decode(Fields& f, JobSummary& r) {
  r.job = JobId{f.text("job")};
  r.priority = static_cast<int>(
      f.integer("priority", std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
  r.name = f.text("name");
  r.owner = f.text_or("owner", "");
  r.retention = decode_retention(f);
  r.cancelled = f.flag("cancelled");
  r.trials = f.u64("trials");
  r.counts = f.counts<kTrialStatusCount>("counts");
  r.outcomes = f.counts<kOutcomes.size()>("outcomes");
  r.failed_attempts = f.u64("failed_attempts");
  r.fenced_reports = f.u64("fenced_reports");
  r.submitted_at = f.instant("submitted_at");
  r.finished_at = f.instant("finished_at");
  if (f.has("cached")) r.cached = f.u64("cached");
}

void decode(Fields& f, TrialRestored& r) {
  r.trial = f.trial("trial");
  r.status = f.status("status");
  r.attempt = f.u32("attempt");
  r.leased_attempt = f.u32("leased_attempt");
  if (f.has("worker")) r.worker = WorkerId{f.text("worker")};
  r.expires = f.instant_or("expires", Instant{});
  r.deadline = f.instant_or("deadline", Instant{});
  if (f.has("reasons")) r.reasons = f.texts("reasons");
  if (f.has("outcome")) r.outcome = f.outcome("outcome");
}

void decode(Fields& f, JobRestored& r) {
  r.job = JobId{f.text("job")};
  r.cancelled = f.flag("cancelled");
  r.failed_attempts = f.u64("failed_attempts");
  r.fenced_reports = f.u64("fenced_reports");
  if (f.has("finished_at")) r.finished_at = f.instant("finished_at");
}

void decode(Fields& f, JobCancelled& r) {
  r.job = JobId{f.text("job")};
}

void decode(Fields& f, WorkerJoined& r) {
  r.worker = WorkerId{f.text("worker")};
  r.slots = f.u32("slots");
  r.prefetch = f.u32_or("prefetch", 0);
  r.cached = f.digests("cached");
  r.executors = f.executors_or("executors", {pack::Executor::lua});
}

void decode(Fields& f, WorkerLost& r) {
  r.worker = WorkerId{f.text("worker")};
  r.reason = f.text("reason");
}

void decode(Fields& f, LeasesRenewed& r) {
  r.worker = WorkerId{f.text("worker")};
  f.each("renewed", [&](const Json& element, std::string path) {
    Fields entry(element, std::move(path), f.problem());
    AttemptRef& ref = r.renewed.emplace_back();
    ref.trial = entry.trial("trial");
    ref.attempt = entry.u32("attempt");
    entry.finish();
  });
  r.expires = f.instant("expires");
}

void decode(Fields& f, TrialLeased& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.worker = WorkerId{f.text("worker")};
  r.expires = f.instant("expires");
  r.deadline = f.instant_or("deadline", Instant{});
}

void decode(Fields& f, TrialRequeued& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.reason = f.text("reason");
}

void decode(Fields& f, TrialAbandoned& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.reasons = f.texts("reasons");
}

void decode(Fields& f, TrialReported& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.worker = WorkerId{f.text("worker")};
}

void decode(Fields& f, TrialFenced& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.worker = WorkerId{f.text("worker")};
  r.reason = f.text("reason");
}

void decode(Fields& f, TrialReconciled& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.outcome = f.outcome("outcome");
}

void decode(Fields& f, TrialCached& r) {
  r.trial = f.trial("trial");
  r.attempt = f.u32("attempt");
  r.source = f.trial("source");
  r.outcome = f.outcome("outcome");
}

template <typename Record>
OrchestrationRecord decode_as(Fields& fields) {
  Record record;
  decode(fields, record);
  record.at = fields.instant("at");
  fields.finish();
  return record;
}

template <std::size_t... I>
constexpr auto record_decoders(std::index_sequence<I...>) {
  return std::array<OrchestrationRecord (*)(Fields&), sizeof...(I)>{
      &decode_as<std::variant_alternative_t<I, OrchestrationRecord>>...};
}
// The decoder of each alternative, by variant index.
constexpr auto kRecordDecoders = record_decoders(std::make_index_sequence<kRecordKinds>{});

std::string event_name(const store::EventView& event) {
  return "event " + bounded_escaped(event.id, 256) + " (" + bounded_escaped(event.type, 256) + ")";
}

}  // namespace

namespace {

store::NewEvent record_event(std::string_view type, std::string payload, Instant at,
                             std::uint64_t event_number) {
  store::NewEvent event;
  event.id = store::numbered_event_id(event_number);
  event.type = std::string(type);
  event.payload = std::move(payload);
  event.timestamp =
      format_timestamp(std::clamp(at.time_since_epoch().count(), kFirstTimestamp, kLastTimestamp));
  event.actor = std::string(kCoordinatorActor);
  return event;
}

// The payload of a record other than a job.submitted.
template <typename Record>
std::string record_text(const Record& r) {
  Json payload = Json::object();
  encode(r, payload);
  payload["at"] = instant_json(r.at);
  return payload.dump();
}

}  // namespace

store::NewEvent to_event(const OrchestrationRecord& record, std::uint64_t event_number) {
  return std::visit(
      [&](const auto& r) {
        std::string text;
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, JobSubmitted>) {
          job_submitted_texts(
              r, std::numeric_limits<std::size_t>::max(),
              [&text](std::string_view, std::string payload) { text = std::move(payload); });
        } else {
          text = record_text(r);
        }
        return record_event(r.kType, std::move(text), r.at, event_number);
      },
      record);
}

namespace {

std::expected<Json, Status> payload_json(const store::EventView& event) {
  try {
    return Json::parse(event.payload);
  } catch (const Json::exception& error) {  // out_of_range too: a number no double holds
    // The message quotes what it last read of the payload, which may be
    // anything.
    return failure(ErrorCode::internal, event_name(event) + ": payload is not JSON: " +
                                            bounded_escaped(error.what(), 512));
  }
}

// The record `event` holds; with `trial_count`, a job.submitted may be the
// first of a job's events, and *trial_count is then its "trial_count" (0
// for a record that is whole).
std::expected<OrchestrationRecord, Status> decode_record(const store::EventView& event,
                                                         std::uint64_t* trial_count) {
  const std::optional<std::size_t> index = record_index(event.type);
  if (!index) {
    return failure(ErrorCode::internal,
                   event_name(event) +
                       (event.type == kJobTrialsType
                            ? ": continues a job.submitted record, and is read with it (read_log)"
                        : event.type == kLeasesType
                            ? ": holds several trial.leased records, read one by one (read_log)"
                        : event.type == kSettledType
                            ? ": holds a trial.reconciled record and its verdict, read by read_log"
                            : ": not an orchestration record type"));
  }
  std::expected<Json, Status> payload = payload_json(event);
  if (!payload) return std::unexpected(std::move(payload.error()));
  std::uint64_t count = 0;
  if (event.type == JobSubmitted::kType && payload->is_object() &&
      payload->contains("trial_count")) {
    const Json& value = (*payload)["trial_count"];
    if (trial_count == nullptr) {
      return failure(ErrorCode::internal,
                     event_name(event) +
                         ": is the first of a job's events, and is read with the job.trials "
                         "that follow it (read_log)");
    }
    if (!value.is_number_unsigned() || value.get<std::uint64_t>() == 0) {
      return failure(ErrorCode::internal, event_name(event) + ": field \"trial_count\" is " +
                                              value_text(value) + ", not a positive integer");
    }
    count = value.get<std::uint64_t>();
    payload->erase("trial_count");
  }
  Problem problem;
  Fields fields(*payload, "", problem);
  OrchestrationRecord record = kRecordDecoders[*index](fields);
  if (problem.found())
    return failure(ErrorCode::internal, event_name(event) + ": " + problem.take());
  if (count != 0 && std::get<JobSubmitted>(record).trials.size() >= count) {
    return failure(ErrorCode::internal,
                   event_name(event) + ": holds " +
                       std::to_string(std::get<JobSubmitted>(record).trials.size()) +
                       " trials of a trial_count of " + std::to_string(count) +
                       ", and a job cut into events holds fewer in its first");
  }
  if (trial_count != nullptr) *trial_count = count;
  return record;
}

// A job.trials event: the job it continues, the index of its first trial,
// and its trials.
struct JobTrials {
  JobId job;
  std::uint64_t first = 0;
  std::vector<TrialInput> trials;
};

std::expected<JobTrials, Status> job_trials_of(const store::EventView& event) {
  std::expected<Json, Status> payload = payload_json(event);
  if (!payload) return std::unexpected(std::move(payload.error()));
  Problem problem;
  Fields fields(*payload, "", problem);
  JobTrials part;
  part.job = JobId{fields.text("job")};
  part.first = static_cast<std::uint64_t>(
      fields.integer("first", 0, std::numeric_limits<std::int64_t>::max()));
  decode_trials(fields, part.trials);
  fields.instant("at");
  fields.finish();
  if (problem.found())
    return failure(ErrorCode::internal, event_name(event) + ": " + problem.take());
  return part;
}

// The payload of a trials.leased event: the leases `leases`, which share
// their worker, expiry and time.
std::string leases_text(std::span<const TrialLeased> leases) {
  // Written as text, not built as a tree: one of these is written for each
  // offer a worker is answered, and its entries are numbers and ids.
  JsonText out;
  out.open('{');
  out.key("worker");
  out.text(leases.front().worker.str());
  out.key("expires");
  out.number(leases.front().expires.time_since_epoch().count());
  out.key("trials");
  out.open('[');
  for (const TrialLeased& lease : leases) {
    out.element();
    out.open('{');
    out.trial(lease.trial);
    out.key("attempt");
    out.number(lease.attempt);
    if (lease.deadline != Instant{}) {
      out.key("deadline");
      out.number(lease.deadline.time_since_epoch().count());
    }
    out.close('}');
  }
  out.close(']');
  out.key("at");
  out.number(leases.front().at.time_since_epoch().count());
  out.close('}');
  return std::move(out).take();
}

// The leases a trials.leased event holds, in order.
std::expected<std::vector<TrialLeased>, Status> leases_of(const store::EventView& event) {
  std::expected<Json, Status> payload = payload_json(event);
  if (!payload) return std::unexpected(std::move(payload.error()));
  Problem problem;
  Fields fields(*payload, "", problem);
  const WorkerId worker{fields.text("worker")};
  const Instant expires = fields.instant("expires");
  std::vector<TrialLeased> leases;
  fields.each("trials", [&](const Json& element, std::string path) {
    Fields entry(element, std::move(path), problem);
    TrialLeased& lease = leases.emplace_back();
    lease.trial = TrialId{JobId{entry.text("job")}, entry.u32("index")};
    lease.attempt = entry.u32("attempt");
    lease.deadline = entry.instant_or("deadline", Instant{});
    entry.finish();
  });
  const Instant at = fields.instant("at");
  fields.finish();
  if (!problem.found() && leases.empty()) problem.report("trials", "is empty");
  if (problem.found())
    return failure(ErrorCode::internal, event_name(event) + ": " + problem.take());
  for (TrialLeased& lease : leases) {
    lease.worker = worker;
    lease.expires = expires;
    lease.at = at;
  }
  return leases;
}

// The payload of a trial.settled event: the reconciled record `r`, with
// `verdict`, and `reported` folded in when not null.
std::string settled_text(const TrialReconciled& r, const Verdict& verdict,
                         const TrialReported* reported) {
  // Written as text (one per reconciled trial); the verdict is JSON already.
  JsonText out;
  out.open('{');
  out.key("trial");
  out.open('{');
  out.trial(r.trial);
  out.close('}');
  out.key("attempt");
  out.number(r.attempt);
  out.key("worker");
  out.text(verdict.worker.str());
  if (reported != nullptr) {
    out.key("reported_at");
    out.number(reported->at.time_since_epoch().count());
  }
  out.key("outcome");
  out.text(outcome_name(r.outcome));
  out.key("verdict");
  out.raw(verdict.payload);
  out.key("at");
  out.number(r.at.time_since_epoch().count());
  out.close('}');
  return std::move(out).take();
}

// The records a trial.settled event holds: its trial.reported (when folded
// in) and its trial.reconciled.
struct Settled {
  std::optional<TrialReported> reported;
  TrialReconciled reconciled;
};

std::expected<Settled, Status> settled_of(const store::EventView& event) {
  std::expected<Json, Status> payload = payload_json(event);
  if (!payload) return std::unexpected(std::move(payload.error()));
  Problem problem;
  Fields fields(*payload, "", problem);
  Settled settled;
  TrialReconciled& r = settled.reconciled;
  r.trial = fields.trial("trial");
  r.attempt = fields.u32("attempt");
  const WorkerId worker{fields.text("worker")};
  if (payload->is_object() && payload->contains("reported_at")) {
    settled.reported = TrialReported{r.trial, r.attempt, worker, fields.instant("reported_at")};
  }
  r.outcome = fields.outcome("outcome");
  fields.object("verdict");
  r.at = fields.instant("at");
  fields.finish();
  if (problem.found())
    return failure(ErrorCode::internal, event_name(event) + ": " + problem.take());
  return settled;
}

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// Which records of an append are written in trial.settled events.
struct Settlements {
  std::vector<std::size_t> verdict;   // by record: the verdict a reconciled is written with
  std::vector<std::size_t> reported;  // by record: the reported folded into a reconciled's event
  std::vector<bool> folded;           // by record: a reported written in a later event
};

// A record between an attempt's trial.reported and its trial.reconciled
// that could apply otherwise were the reported applied after it: one about
// a worker (its loss, its joining, its heartbeat), a job (its submission, its
// cancelling) or a trial (its attempt's end).
struct Barrier {
  std::size_t position = 0;
  std::optional<WorkerId> worker;
  std::optional<JobId> job;
  std::optional<TrialId> trial;
};

std::optional<Barrier> barrier_of(const OrchestrationRecord& record, std::size_t position) {
  return std::visit(
      [position](const auto& r) -> std::optional<Barrier> {
        using Record = std::decay_t<decltype(r)>;
        Barrier barrier{position, std::nullopt, std::nullopt, std::nullopt};
        if constexpr (std::is_same_v<Record, WorkerLost> || std::is_same_v<Record, WorkerJoined> ||
                      std::is_same_v<Record, LeasesRenewed>) {
          barrier.worker = r.worker;
        } else if constexpr (std::is_same_v<Record, JobCancelled> ||
                             std::is_same_v<Record, JobSubmitted>) {
          barrier.job = r.job;
        } else if constexpr (std::is_same_v<Record, TrialRequeued> ||
                             std::is_same_v<Record, TrialAbandoned>) {
          barrier.trial = r.trial;
        } else {
          return std::nullopt;
        }
        return barrier;
      },
      record);
}

Settlements settle(std::span<const OrchestrationRecord> records, std::span<Verdict> verdicts) {
  Settlements out{std::vector<std::size_t>(records.size(), kNone),
                  std::vector<std::size_t>(records.size(), kNone),
                  std::vector<bool>(records.size(), false)};
  if (verdicts.empty()) return out;
  std::map<AttemptRef, std::size_t> verdict_of;
  for (std::size_t k = 0; k < verdicts.size(); ++k)
    verdict_of.emplace(AttemptRef{verdicts[k].trial, verdicts[k].attempt}, k);
  std::map<AttemptRef, std::size_t> reported_at;  // reported records not yet reconciled
  std::vector<Barrier> barriers;                  // in position order
  for (std::size_t j = 0; j < records.size(); ++j) {
    const OrchestrationRecord& record = records[j];
    if (const auto* r = std::get_if<TrialReported>(&record)) {
      reported_at[AttemptRef{r->trial, r->attempt}] = j;
      continue;
    }
    if (auto barrier = barrier_of(record, j)) {
      barriers.push_back(std::move(*barrier));
      continue;
    }
    const auto* r = std::get_if<TrialReconciled>(&record);
    if (r == nullptr) continue;
    const AttemptRef attempt{r->trial, r->attempt};
    const auto verdict = verdict_of.find(attempt);
    if (verdict == verdict_of.end()) continue;
    out.verdict[j] = verdict->second;
    const auto found = reported_at.find(attempt);
    if (found == reported_at.end()) continue;
    const std::size_t i = found->second;
    reported_at.erase(found);
    const auto& reported = std::get<TrialReported>(records[i]);
    if (reported.worker != verdicts[verdict->second].worker) continue;
    const auto first = std::partition_point(barriers.begin(), barriers.end(),
                                            [i](const Barrier& b) { return b.position < i; });
    const bool blocked = std::any_of(first, barriers.end(), [&](const Barrier& b) {
      return b.worker == reported.worker || b.job == reported.trial.job ||
             b.trial == reported.trial;
    });
    if (blocked) continue;
    out.reported[j] = i;
    out.folded[i] = true;
  }
  return out;
}

// How many of the records from `first` on are leases that one trials.leased
// event holds: consecutive, of the same worker, expiry and time.
std::size_t leases_together(std::span<const OrchestrationRecord> records, std::size_t first) {
  const auto* head = std::get_if<TrialLeased>(&records[first]);
  if (head == nullptr) return 0;
  std::size_t end = first + 1;
  while (end < records.size() && end - first < kLeasesPerEvent) {
    const auto* next = std::get_if<TrialLeased>(&records[end]);
    if (next == nullptr || next->worker != head->worker || next->expires != head->expires ||
        next->at != head->at) {
      break;
    }
    ++end;
  }
  return end - first;
}

}  // namespace

std::expected<OrchestrationRecord, Status> record_of(const store::EventView& event) {
  return decode_record(event, nullptr);
}

bool is_record_type(std::string_view type) {
  return record_index(type).has_value() || type == kJobTrialsType || type == kLeasesType ||
         type == kSettledType;
}

store::Result<std::uint64_t> append_to_log(store::Writer& writer,
                                           std::span<const OrchestrationRecord> records,
                                           std::span<const store::NewEvent> extra,
                                           std::size_t job_chunk_bytes,
                                           std::span<Verdict> verdicts) {
  std::optional<store::RunInfo> run = writer.run(kOrchestrationRun);
  if (!run) {
    store::Result<store::RunInfo> created = writer.create_run(
        store::NewRun{.id = kOrchestrationRun, .label = std::string(kOrchestrationRunLabel)});
    if (!created) return std::unexpected(std::move(created.error()));
    run = std::move(*created);
  }
  std::uint64_t head = run->head;
  if (records.empty() && extra.empty()) return head;
  // Events are gathered and appended together, but a job's are appended one
  // by one as they are made, so that a large job's text is never whole.
  std::vector<store::NewEvent> events;
  events.reserve(records.size() + extra.size());
  std::uint64_t number = head;
  const auto flush = [&]() -> store::Result<void> {
    if (events.empty()) return {};
    // Plain, though the store deflates trials' events: the log's records
    // are a few hundred bytes a trial, and it is compacted, while deflating
    // each costs the coordinator more CPU than reconciling a trivial trial
    // does otherwise (docs/decisions/0092-deflated-events.md).
    store::Result<std::uint64_t> appended =
        writer.append(kOrchestrationRun, head, events, /*deflate=*/false);
    if (!appended) return std::unexpected(std::move(appended.error()));
    head = *appended;
    events.clear();
    return {};
  };
  const Settlements settled = settle(records, verdicts);
  for (std::size_t i = 0; i < records.size(); ++i) {
    const OrchestrationRecord& record = records[i];
    if (settled.folded[i]) continue;
    if (const std::size_t k = settled.verdict[i]; k != kNone) {
      const auto& reconciled = std::get<TrialReconciled>(record);
      const std::size_t folded = settled.reported[i];
      const auto* reported = folded == kNone ? nullptr : &std::get<TrialReported>(records[folded]);
      events.push_back(record_event(kSettledType, settled_text(reconciled, verdicts[k], reported),
                                    reconciled.at, ++number));
      verdicts[k].seq = number;
      continue;
    }
    // A worker's offer leases many trials at once: one event holds them.
    if (const std::size_t leases = leases_together(records, i); leases > 1) {
      std::vector<TrialLeased> together;
      together.reserve(leases);
      for (std::size_t j = i; j < i + leases; ++j)
        together.push_back(std::get<TrialLeased>(records[j]));
      events.push_back(
          record_event(kLeasesType, leases_text(together), together.front().at, ++number));
      i += leases - 1;
      continue;
    }
    const auto* job = std::get_if<JobSubmitted>(&record);
    if (job == nullptr) {
      events.push_back(to_event(record, ++number));
      continue;
    }
    store::Result<void> done = flush();
    job_submitted_texts(*job, job_chunk_bytes, [&](std::string_view type, std::string text) {
      if (!done) return;
      events.push_back(record_event(type, std::move(text), job->at, ++number));
      done = flush();
    });
    if (!done) return std::unexpected(std::move(done.error()));
  }
  for (const store::NewEvent& event : extra) {
    events.push_back(event);
    events.back().id = store::numbered_event_id(++number);
  }
  if (store::Result<void> done = flush(); !done) return std::unexpected(std::move(done.error()));
  return head;
}

std::expected<void, Status> read_log(const store::Snapshot& snapshot,
                                     const std::function<void(OrchestrationRecord&&)>& on_record,
                                     const std::function<void(const store::EventView&)>& on_other) {
  const std::optional<store::RunInfo> run = snapshot.run(kOrchestrationRun);
  if (!run) return {};
  std::string error;
  // A job cut into events, while its job.trials are read.
  std::optional<JobSubmitted> job;
  std::uint64_t job_trials = 0;
  const auto job_name = [&job] { return "job " + bounded_escaped(job->job.str(), 256); };
  snapshot.for_each_event(*run, 1, [&](const store::EventView& event) {
    if (job) {
      if (event.type != kJobTrialsType) {
        error = event_name(event) + ": " + job_name() + " has " +
                std::to_string(job->trials.size()) + " of its " + std::to_string(job_trials) +
                " trials, and this event does not continue it";
        return false;
      }
      std::expected<JobTrials, Status> part = job_trials_of(event);
      if (!part) {
        error = std::move(part.error().message);
        return false;
      }
      if (part->job != job->job || part->first != job->trials.size() || part->trials.empty() ||
          job->trials.size() + part->trials.size() > job_trials) {
        error = event_name(event) + ": holds trials " + std::to_string(part->first) + ".." +
                std::to_string(part->first + part->trials.size()) + " of job " +
                bounded_escaped(part->job.str(), 256) + ", where " + job_name() +
                " continues at trial " + std::to_string(job->trials.size()) + " of " +
                std::to_string(job_trials);
        return false;
      }
      job->trials.insert(job->trials.end(), std::make_move_iterator(part->trials.begin()),
                         std::make_move_iterator(part->trials.end()));
      if (job->trials.size() == job_trials) {
        on_record(std::move(*job));
        job.reset();
      }
      return true;
    }
    if (!is_record_type(event.type)) {
      on_other(event);
      return true;
    }
    if (event.type == kSettledType) {
      std::expected<Settled, Status> settled = settled_of(event);
      if (!settled) {
        error = std::move(settled.error().message);
        return false;
      }
      if (settled->reported) on_record(std::move(*settled->reported));
      on_record(std::move(settled->reconciled));
      on_other(event);
      return true;
    }
    if (event.type == kLeasesType) {
      std::expected<std::vector<TrialLeased>, Status> leases = leases_of(event);
      if (!leases) {
        error = std::move(leases.error().message);
        return false;
      }
      for (TrialLeased& lease : *leases) on_record(std::move(lease));
      return true;
    }
    std::uint64_t count = 0;
    std::expected<OrchestrationRecord, Status> record = decode_record(event, &count);
    if (!record) {
      error = std::move(record.error().message);
      return false;
    }
    if (count != 0) {
      job = std::move(std::get<JobSubmitted>(*record));
      job_trials = count;
      return true;
    }
    on_record(std::move(*record));
    return true;
  });
  if (error.empty() && job) {
    error = "the log ends with " + job_name() + " holding " + std::to_string(job->trials.size()) +
            " of its " + std::to_string(job_trials) + " trials";
  }
  if (!error.empty()) {
    return failure(ErrorCode::internal, "the orchestration log (run " + kOrchestrationRun.str() +
                                            ") is corrupt: " + error);
  }
  return {};
}

std::optional<LogSnapshot> log_snapshot_of(const store::EventView& event) {
  if (event.type != kSnapshotType) return std::nullopt;
  const auto payload = Json::parse(event.payload, nullptr, false);
  if (!payload.is_object()) return std::nullopt;
  Problem problem;
  Fields fields(payload, "", problem);
  LogSnapshot snapshot{fields.u64("generation"), fields.u64("replaced_events"), event.seq};
  fields.instant("at");
  fields.finish();
  if (problem.found()) return std::nullopt;
  return snapshot;
}

store::Result<LogSnapshot> compact_log(store::Writer& writer,
                                       std::span<const OrchestrationRecord> snapshot,
                                       std::span<const store::NewEvent> extra,
                                       std::uint64_t generation, Instant at,
                                       std::size_t job_chunk_bytes) {
  LogSnapshot written{generation, 0, 0};
  if (const std::optional<store::RunInfo> run = writer.run(kOrchestrationRun)) {
    written.replaced_events = run->head;
    const std::array<store::RunId, 1> runs{kOrchestrationRun};
    store::Result<store::DeletedRuns> deleted = writer.delete_runs(runs);
    if (!deleted) return std::unexpected(std::move(deleted.error()));
  }
  Json marker = Json::object();
  marker["generation"] = generation;
  marker["replaced_events"] = written.replaced_events;
  marker["at"] = instant_json(at);
  std::vector<store::NewEvent> events(extra.begin(), extra.end());
  events.push_back(record_event(kSnapshotType, marker.dump(), at, 1));  // renumbered
  store::Result<std::uint64_t> head = append_to_log(writer, snapshot, events, job_chunk_bytes);
  if (!head) return std::unexpected(std::move(head.error()));
  written.seq = *head;
  return written;
}

store::RunId archive_run_of(const JobId& job) {
  return store::RunId(std::string(store::kInternalRunPrefix) + "archive." + job.str());
}

store::NewEvent archived_trial_event(const ArchivedTrial& trial, Instant at) {
  Json head = Json::object();
  head["index"] = trial.index;
  head["status"] = std::string(trial_status_name(trial.status));
  head["attempt"] = trial.attempt;
  if (!trial.worker.str().empty()) head["worker"] = text_json(trial.worker.str());
  if (!trial.reasons.empty()) {
    Json reasons = Json::array();
    for (const std::string& reason : trial.reasons) reasons.push_back(text_json(reason));
    head["reasons"] = std::move(reasons);
  }
  if (trial.outcome) head["outcome"] = std::string(outcome_name(*trial.outcome));
  if (trial.input_of) head["input_of"] = *trial.input_of;
  std::string text = head.dump();
  text.pop_back();  // its '}'
  if (!trial.input_of) {
    text += ",\"input\":";
    text += trial_text(trial.input);
  }
  if (!trial.result.empty()) {
    text += trial.line ? ",\"line\":" : ",\"verdict\":";
    text += trial.result;
  }
  text += '}';
  store::NewEvent event =
      record_event(kArchivedTrialType, std::move(text), at, std::uint64_t{trial.index} + 1);
  event.actor.reset();  // one per trial: the run says whose it is
  return event;
}

std::expected<ArchivedTrial, Status> archived_trial_of(const store::EventView& event) {
  if (event.type != kArchivedTrialType) {
    return failure(ErrorCode::internal, event_name(event) + ": not a trial.archived event");
  }
  std::expected<Json, Status> payload = payload_json(event);
  if (!payload) return std::unexpected(std::move(payload.error()));
  Problem problem;
  Fields fields(*payload, "", problem);
  ArchivedTrial trial;
  trial.index = fields.u32("index");
  const std::string status = fields.text("status");
  trial.attempt = fields.u32("attempt");
  trial.worker = WorkerId{fields.text_or("worker", "")};
  if (payload->is_object() && payload->contains("reasons")) trial.reasons = fields.texts("reasons");
  if (payload->is_object() && payload->contains("outcome"))
    trial.outcome = fields.outcome("outcome");
  if (payload->is_object() && payload->contains("input_of")) {
    trial.input_of = fields.u32("input_of");
    if (!problem.found() && *trial.input_of >= trial.index) {
      problem.report("input_of", "is " + std::to_string(*trial.input_of) +
                                     ", not the index of an earlier trial");
    }
  } else if (const Json* input = fields.object("input")) {
    trial.input = decode_trial(*input, "input", problem);
  }
  for (const char* key : {"verdict", "line"}) {
    if (payload->is_object() && payload->contains(key)) {
      if (const Json* result = fields.object(key)) {
        trial.result = result->dump();
        trial.line = std::string_view(key) == "line";
      }
    }
  }
  fields.finish();
  if (!problem.found()) {
    const auto parsed = parse_trial_status(status);
    if (!parsed || (*parsed != TrialStatus::reconciled && *parsed != TrialStatus::cancelled &&
                    *parsed != TrialStatus::abandoned)) {
      problem.report("status", "\"" + bounded_escaped(status, 64) + "\" is not a final status");
    } else if ((*parsed == TrialStatus::reconciled) != trial.outcome.has_value()) {
      problem.report("outcome", *parsed == TrialStatus::reconciled
                                    ? "is missing for a reconciled trial"
                                    : "is given for a trial that was not reconciled");
    } else {
      trial.status = *parsed;
    }
  }
  if (problem.found())
    return failure(ErrorCode::internal, event_name(event) + ": " + problem.take());
  return trial;
}

namespace {

// The archived trial as its event holds it, `input_of` not followed.
std::expected<std::optional<ArchivedTrial>, Status> read_archived_event(
    const store::Snapshot& snapshot, const TrialId& trial) {
  const auto run = snapshot.run(archive_run_of(trial.job));
  const std::uint64_t seq = std::uint64_t{trial.index} + 1;
  if (!run || run->head < seq) return std::optional<ArchivedTrial>{};
  std::expected<std::optional<ArchivedTrial>, Status> found = std::optional<ArchivedTrial>{};
  snapshot.for_each_event(*run, seq, [&](const store::EventView& event) {
    auto archived = archived_trial_of(event);
    if (!archived) {
      found = std::unexpected(std::move(archived.error()));
    } else if (archived->index != trial.index) {
      found = failure(ErrorCode::internal, event_name(event) + " of the archive of job " +
                                               bounded_escaped(trial.job.str(), 256) +
                                               " holds trial " + std::to_string(archived->index) +
                                               ", not " + std::to_string(trial.index));
    } else {
      found = std::move(*archived);
    }
    return false;
  });
  return found;
}

// The input trial `of` of the job's archive holds itself.
std::expected<TrialInput, Status> archived_input(const store::Snapshot& snapshot, const JobId& job,
                                                 std::uint32_t of) {
  auto holder = read_archived_event(snapshot, TrialId{job, of});
  if (!holder) return std::unexpected(std::move(holder.error()));
  if (!*holder || (*holder)->input_of) {
    return failure(ErrorCode::internal, "the archive of job " + bounded_escaped(job.str(), 256) +
                                            " does not hold the input of trial " +
                                            std::to_string(of));
  }
  return std::move((*holder)->input);
}

}  // namespace

std::expected<std::optional<ArchivedTrial>, Status> read_archived_trial(
    const store::Snapshot& snapshot, const TrialId& trial) {
  auto found = read_archived_event(snapshot, trial);
  if (!found || !*found || !(*found)->input_of) return found;
  auto input = archived_input(snapshot, trial.job, *(*found)->input_of);
  if (!input) return std::unexpected(std::move(input.error()));
  (*found)->input = std::move(*input);
  return found;
}

std::expected<void, Status> visit_archive(const store::Snapshot& snapshot, const JobId& job,
                                          const std::function<void(ArchivedTrial&&)>& visit) {
  const auto run = snapshot.run(archive_run_of(job));
  if (!run) return {};
  std::expected<void, Status> done;
  std::uint32_t next = 0;
  // The inputs of the trials that hold one, lately read: a repeat's is
  // usually among them; another is read from the archive.
  constexpr std::size_t kInputsKept = 4096;
  std::unordered_map<std::uint32_t, TrialInput> inputs;
  snapshot.for_each_event(*run, 1, [&](const store::EventView& event) {
    auto archived = archived_trial_of(event);
    if (archived && archived->input_of) {
      if (const auto kept = inputs.find(*archived->input_of); kept != inputs.end()) {
        archived->input = kept->second;
      } else if (auto input = archived_input(snapshot, job, *archived->input_of)) {
        archived->input = std::move(*input);
      } else {
        archived = std::unexpected(std::move(input.error()));
      }
    } else if (archived) {
      if (inputs.size() >= kInputsKept) inputs.clear();
      inputs.emplace(archived->index, archived->input);
    }
    if (archived && archived->index != next) {
      archived = failure(ErrorCode::internal,
                         event_name(event) + " of the archive of job " +
                             bounded_escaped(job.str(), 256) + " holds trial " +
                             std::to_string(archived->index) + ", not " + std::to_string(next));
    }
    if (!archived) {
      done = std::unexpected(std::move(archived.error()));
      return false;
    }
    ++next;
    visit(std::move(*archived));
    return true;
  });
  return done;
}

std::string describe(const SetAside& record) {
  return "record " + std::to_string(record.ordinal) + " (" + record.type + "): " + record.why;
}

std::expected<Replayed, Status> replay_setting_aside(
    const store::Snapshot& snapshot, const std::function<void()>& restart,
    const std::function<void(OrchestrationRecord&&)>& on_record,
    const std::function<void(const store::EventView&)>& on_other, std::size_t max_set_aside) {
  Replayed replayed;
  std::set<std::uint64_t> skipped;
  for (;;) {
    restart();
    replayed.records = 0;
    std::uint64_t ordinal = 0;
    std::optional<SetAside> failed;
    try {
      auto read = read_log(
          snapshot,
          [&](OrchestrationRecord&& record) {
            const std::uint64_t at = ordinal++;
            if (skipped.contains(at)) return;
            try {
              on_record(std::move(record));
            } catch (const RecordDoesNotApply& e) {
              failed = SetAside{at, e.type(), e.why()};
              throw;
            }
            ++replayed.records;
          },
          on_other);
      if (!read) return std::unexpected(read.error());
      return replayed;
    } catch (const RecordDoesNotApply&) {
      if (!failed) throw;  // thrown by on_other: not a record's
    }
    if (replayed.set_aside.size() >= max_set_aside) {
      std::string first;
      for (std::size_t i = 0; i < replayed.set_aside.size() && i < 3; ++i) {
        first += "\n  " + describe(replayed.set_aside[i]);
      }
      return failure(ErrorCode::failed_precondition,
                     "more than " + std::to_string(max_set_aside) +
                         " records of the orchestration log do not apply to the state the "
                         "records before them built; the first:" +
                         first + "\n  and " + describe(*failed));
    }
    skipped.insert(failed->ordinal);
    replayed.set_aside.push_back(std::move(*failed));
  }
}

}  // namespace forktrial::coordinator

#include "base/timestamp.h"

#include <chrono>
#include <cstdio>

#include "base/text.h"

namespace forktrial {
namespace {

bool read_digits(std::string_view text, std::size_t pos, std::size_t count, int& out) {
  if (pos + count > text.size()) return false;
  out = 0;
  for (std::size_t i = pos; i < pos + count; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

std::unexpected<Status> bad(std::string_view text, std::string_view why) {
  return failure(ErrorCode::invalid_argument,
                 "timestamp " + quoted_excerpt(text) + " " + std::string(why) +
                     "; expected ISO-8601 UTC such as 2024-05-01T12:00:00.000Z");
}

}  // namespace

std::expected<UnixMillis, Status> parse_timestamp(std::string_view text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!read_digits(text, 0, 4, year) || text.size() < 19 || text[4] != '-' ||
      !read_digits(text, 5, 2, month) || text[7] != '-' || !read_digits(text, 8, 2, day) ||
      text[10] != 'T' || !read_digits(text, 11, 2, hour) || text[13] != ':' ||
      !read_digits(text, 14, 2, minute) || text[16] != ':' || !read_digits(text, 17, 2, second)) {
    return bad(text, "does not start with YYYY-MM-DDTHH:MM:SS");
  }
  const std::chrono::year_month_day date{std::chrono::year{year},
                                         std::chrono::month{static_cast<unsigned>(month)},
                                         std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok()) return bad(text, "names a date that does not exist");
  if (hour > 23 || minute > 59 || second > 59) return bad(text, "has a time of day out of range");

  std::size_t pos = 19;
  int millis = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const std::size_t digits_start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (pos - digits_start < 3) millis = millis * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == digits_start) return bad(text, "has a '.' without fraction digits");
    for (std::size_t n = pos - digits_start; n < 3; ++n) millis *= 10;
  }
  const std::string_view zone = text.substr(pos);
  if (zone != "Z" && zone != "+00:00") {
    return bad(text, "does not end in \"Z\" or \"+00:00\" (only UTC is accepted)");
  }
  const auto days = std::chrono::sys_days{date}.time_since_epoch().count();
  return ((static_cast<UnixMillis>(days) * 24 + hour) * 60 + minute) * 60 * 1000 +
         static_cast<UnixMillis>(second) * 1000 + millis;
}

namespace {

// The UTC calendar text of `millis`, to the second, milliseconds appended
// when `with_millis`.
std::string format_utc(UnixMillis millis, bool with_millis) {
  constexpr UnixMillis kDay = 24LL * 60 * 60 * 1000;
  UnixMillis days = millis / kDay;
  UnixMillis rest = millis % kDay;
  if (rest < 0) {
    rest += kDay;
    --days;
  }
  const std::chrono::year_month_day date{
      std::chrono::sys_days{std::chrono::days{static_cast<int>(days)}}};
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%04d-%02u-%02uT%02d:%02d:%02d",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(rest / 3600000),
                static_cast<int>(rest / 60000 % 60), static_cast<int>(rest / 1000 % 60));
  std::string out = buffer;
  if (with_millis) {
    std::snprintf(buffer, sizeof buffer, ".%03d", static_cast<int>(rest % 1000));
    out += buffer;
  }
  out += 'Z';
  return out;
}

}  // namespace

std::string format_timestamp(UnixMillis millis) {
  return format_utc(millis, true);
}

std::string format_timestamp_seconds(UnixMillis millis) {
  return format_utc(millis, false);
}

std::string now_timestamp() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return format_timestamp(std::chrono::duration_cast<std::chrono::milliseconds>(now).count());
}

}  // namespace forktrial

#include "base/text.h"

#include <utf8proc.h>

#include <cstdio>

namespace forktrial {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
constexpr std::size_t kExcerptBytes = 40;

void append_hex(std::string& out, const char* format, unsigned value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, format, value);
  out += buffer;
}

std::string marker(std::size_t cut) {
  return " [... " + std::to_string(cut) + " bytes cut]";
}

void append_sanitized(std::string& out, std::int32_t c, std::string_view bytes) {
  out += c < 0 ? kReplacement : bytes;
}

void append_escaped(std::string& out, std::int32_t c, std::string_view bytes) {
  if (c == '\n') {
    out += "\\n";
  } else if (c == '\r') {
    out += "\\r";
  } else if (c == '\t') {
    out += "\\t";
  } else if (c < 0 || (is_control(c) && c < 0x80)) {
    append_hex(out, "\\x%02x", static_cast<unsigned char>(bytes.front()));
  } else if (is_control(c) || is_invisible(c)) {
    append_hex(out, "\\u{%x}", static_cast<unsigned>(c));
  } else {
    out += bytes;
  }
}

// `text` rendered code point by code point through append(out, c, bytes),
// and cut to `max_bytes` with the marker when the rendering does not fit.
// The marker's size depends on the count it holds, at most text.size(), so
// the cut keeps room for that many digits.
template <typename Append>
std::string render_bounded(std::string_view text, std::size_t max_bytes, Append append) {
  const std::size_t reserved = marker(text.size()).size();
  const std::size_t budget = max_bytes > reserved ? max_bytes - reserved : 0;
  std::string out;
  std::size_t consumed = 0;
  std::size_t kept_bytes = 0;     // of `out`, the longest rendering within budget
  std::size_t kept_consumed = 0;  // the bytes of `text` it renders
  while (consumed < text.size()) {
    const CodePoint point = decode_utf8(text.substr(consumed));
    append(out, point.value, text.substr(consumed, point.size));
    if (out.size() > max_bytes) {
      out.resize(kept_bytes);
      return out + marker(text.size() - kept_consumed);
    }
    consumed += point.size;
    if (out.size() <= budget) {
      kept_bytes = out.size();
      kept_consumed = consumed;
    }
  }
  return out;
}

constexpr std::size_t kUnbounded = static_cast<std::size_t>(-1);

}  // namespace

CodePoint decode_utf8(std::string_view text) {
  utf8proc_int32_t value = 0;
  const utf8proc_ssize_t used =
      utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                       static_cast<utf8proc_ssize_t>(text.size()), &value);
  if (used <= 0) return CodePoint{};
  return CodePoint{value, static_cast<std::size_t>(used)};
}

std::optional<std::size_t> first_invalid_utf8(std::string_view text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    const CodePoint point = decode_utf8(text.substr(offset));
    if (point.value < 0) return offset;
    offset += point.size;
  }
  return std::nullopt;
}

bool is_valid_utf8(std::string_view text) {
  return !first_invalid_utf8(text);
}

bool is_control(std::int32_t c) {
  return (c >= 0 && c < 0x20) || (c >= 0x7F && c <= 0x9F);
}

std::string sanitize_utf8(std::string_view text) {
  if (is_valid_utf8(text)) return std::string(text);
  return render_bounded(text, kUnbounded, append_sanitized);
}

std::string_view utf8_prefix(std::string_view text, std::size_t max_bytes) {
  std::size_t end = 0;
  while (end < text.size()) {
    const CodePoint point = decode_utf8(text.substr(end));
    if (end + point.size > max_bytes) break;
    end += point.size;
  }
  return text.substr(0, end);
}

bool is_invisible(std::int32_t c) {
  if (c < 0x80) return false;
  switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return true;
    default:
      break;
  }
  // Letters and marks that show nothing: the combining grapheme joiner, the
  // Hangul fillers, the Khmer inherent vowels, the Mongolian variation
  // selectors, the braille blank and the variation selectors.
  return c == 0x034F || c == 0x115F || c == 0x1160 || c == 0x17B4 || c == 0x17B5 ||
         (c >= 0x180B && c <= 0x180F) || c == 0x2800 || c == 0x3164 || c == 0xFFA0 ||
         (c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xE0100 && c <= 0xE01EF);
}

std::optional<std::string> invisible_problem(std::string_view text) {
  std::size_t offset = 0;
  while (offset < text.size()) {
    const CodePoint point = decode_utf8(text.substr(offset));
    if (is_invisible(point.value)) {
      std::string problem = "holds ";
      append_hex(problem, "U+%04X", static_cast<unsigned>(point.value));
      return problem + ", an invisible or format character, at offset " + std::to_string(offset);
    }
    offset += point.size;
  }
  return std::nullopt;
}

std::string bounded_text(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes && is_valid_utf8(text)) return std::string(text);
  return render_bounded(text, max_bytes, append_sanitized);
}

std::string escape_controls(std::string_view text) {
  return render_bounded(text, kUnbounded, append_escaped);
}

std::string bounded_escaped(std::string_view text, std::size_t max_bytes) {
  return render_bounded(text, max_bytes, append_escaped);
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

std::optional<std::string> plain_text_problem(std::string_view text, std::size_t max_bytes,
                                              LineBreaks breaks) {
  if (text.size() > max_bytes) {
    return "is " + std::to_string(text.size()) + " bytes long; the limit is " +
           std::to_string(max_bytes);
  }
  std::size_t offset = 0;
  while (offset < text.size()) {
    const CodePoint point = decode_utf8(text.substr(offset));
    if (point.value < 0) {
      std::string problem = "is not valid UTF-8 (byte ";
      append_hex(problem, "0x%02X", static_cast<unsigned char>(text[offset]));
      return problem + " at offset " + std::to_string(offset) + ")";
    }
    const bool line_break = point.value == '\t' || point.value == '\n' || point.value == '\r';
    if (is_control(point.value) && !(line_break && breaks == LineBreaks::allowed)) {
      std::string problem = "contains the control character ";
      append_hex(problem, "U+%04X", static_cast<unsigned>(point.value));
      return problem + " at offset " + std::to_string(offset);
    }
    offset += point.size;
  }
  return std::nullopt;
}

std::string quoted_excerpt(std::string_view text) {
  const std::string_view head = utf8_prefix(text, kExcerptBytes);
  return "\"" + escape_controls(head) + (head.size() < text.size() ? "...\"" : "\"");
}

std::optional<std::string> named_text_problem(std::string_view name, std::string_view text,
                                              std::size_t max_bytes, LineBreaks breaks) {
  auto problem = plain_text_problem(text, max_bytes, breaks);
  if (!problem) return std::nullopt;
  return std::string(name) + " " + quoted_excerpt(text) + " " + *problem;
}

}  // namespace forktrial

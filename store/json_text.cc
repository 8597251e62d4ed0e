#include "store/json_text.h"

#include <cstdint>
#include <unordered_set>

#include "base/text.h"
#include "store/payload.h"

namespace forktrial::store::json_text {

namespace {

// One code point of strict UTF-8 at text[pos] (base/text.h's walk),
// advancing pos; nullopt (pos unchanged) for a malformed sequence.
std::optional<char32_t> next_code_point(std::string_view text, std::size_t& pos) {
  const CodePoint point = decode_utf8(text.substr(pos));
  if (point.value < 0) return std::nullopt;
  pos += point.size;
  return static_cast<char32_t>(point.value);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_u_escape(std::string& out, std::uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xF];
}

// Python's ensure_ascii escaping of one code point.
void append_python_escaped(std::string& out, char32_t cp) {
  switch (cp) {
    case U'"':
      out += "\\\"";
      return;
    case U'\\':
      out += "\\\\";
      return;
    case U'\n':
      out += "\\n";
      return;
    case U'\r':
      out += "\\r";
      return;
    case U'\t':
      out += "\\t";
      return;
    case U'\b':
      out += "\\b";
      return;
    case U'\f':
      out += "\\f";
      return;
    default:
      break;
  }
  if (cp >= 0x20 && cp <= 0x7E) {
    out += static_cast<char>(cp);
  } else if (cp < 0x10000) {
    append_u_escape(out, cp);
  } else {
    const char32_t v = cp - 0x10000;
    append_u_escape(out, 0xD800 | (v >> 10));
    append_u_escape(out, 0xDC00 | (v & 0x3FF));
  }
}

// A recursive-descent reader of one JSON value. It optionally writes the
// value Python's way (`out`), records the members of the outermost object
// (`members`) and the first non-finite number with its path.
class Scanner {
 public:
  Scanner(std::string_view text, std::size_t max_depth) : text_(text), max_depth_(max_depth) {}

  std::string* out = nullptr;
  std::vector<std::pair<std::string, std::string_view>>* members = nullptr;
  bool allow_non_finite = true;
  std::string root = "payload";
  std::optional<std::pair<std::string, std::string>> non_finite;
  // The first key repeated within one object, as (the object's path, the
  // key written Python's way).
  std::optional<std::pair<std::string, std::string>> repeated_key;

  // The whole text must be one value, with whitespace around it.
  bool document() {
    skip_space();
    if (!value(1)) return false;
    skip_space();
    if (pos_ != text_.size()) return fail("unexpected text after the value");
    return true;
  }

  char first_char() const {
    std::size_t p = text_.find_first_not_of(" \t\r\n");
    return p == std::string_view::npos ? '\0' : text_[p];
  }

  const std::string& error() const { return error_; }

 private:
  bool fail(const std::string& what) {
    if (error_.empty()) error_ = what + " at byte " + std::to_string(pos_);
    return false;
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return fail("unexpected character");
    pos_ += word.size();
    if (out) *out += word;
    return true;
  }

  bool non_finite_literal(std::string_view word) {
    const std::size_t start = pos_;
    if (!literal(word)) return false;
    if (!allow_non_finite) {
      pos_ = start;
      return fail(std::string(word) + " is not JSON");
    }
    if (!non_finite) non_finite.emplace(path_string(), std::string(word));
    return true;
  }

  std::string path_string() const {
    std::string p = root;
    for (const auto& part : path_) p += part;
    return p;
  }

  bool value(std::size_t depth) {
    if (pos_ >= text_.size()) return fail("unexpected end of text");
    switch (text_[pos_]) {
      case '{':
        return object(depth);
      case '[':
        return array(depth);
      case '"': {
        if (out) *out += '"';
        if (!string(out, nullptr)) return false;
        if (out) *out += '"';
        return true;
      }
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      case 'N':
        return non_finite_literal("NaN");
      case 'I':
        return non_finite_literal("Infinity");
      case '-':
        if (text_.substr(pos_, 2) == "-I") return non_finite_literal("-Infinity");
        return number();
      default:
        if (text_[pos_] >= '0' && text_[pos_] <= '9') return number();
        return fail("unexpected character");
    }
  }

  bool digits() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }

  bool number() {
    const std::size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return fail("malformed number");
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail("malformed number");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("malformed number");
    }
    // The spelling is kept: an integer of any width, a float as written.
    if (out) *out += text_.substr(start, pos_ - start);
    return true;
  }

  std::optional<std::uint32_t> hex4() {
    if (pos_ + 4 > text_.size()) return std::nullopt;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_ + i];
      v <<= 4;
      if (c >= '0' && c <= '9') {
        v |= static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        v |= static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        v |= static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return std::nullopt;
      }
    }
    pos_ += 4;
    return v;
  }

  // A string at pos_ (the opening quote): its code points written escaped to
  // `escaped`, and/or decoded to `decoded`.
  bool string(std::string* escaped, std::string* decoded) {
    ++pos_;  // the opening quote
    for (;;) {
      if (pos_ >= text_.size()) return fail("unterminated string");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      char32_t cp = 0;
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("a control character inside a string");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= text_.size()) return fail("unterminated string");
        const char e = text_[pos_++];
        switch (e) {
          case '"':
            cp = U'"';
            break;
          case '\\':
            cp = U'\\';
            break;
          case '/':
            cp = U'/';
            break;
          case 'b':
            cp = U'\b';
            break;
          case 'f':
            cp = U'\f';
            break;
          case 'n':
            cp = U'\n';
            break;
          case 'r':
            cp = U'\r';
            break;
          case 't':
            cp = U'\t';
            break;
          case 'u': {
            auto unit = hex4();
            if (!unit) return fail("a malformed \\u escape");
            if (*unit >= 0xDC00 && *unit <= 0xDFFF) return fail("an unpaired surrogate escape");
            if (*unit >= 0xD800 && *unit <= 0xDBFF) {
              std::optional<std::uint32_t> low;
              if (text_.substr(pos_, 2) == "\\u") {
                pos_ += 2;
                low = hex4();
              }
              if (!low || *low < 0xDC00 || *low > 0xDFFF) {
                return fail("an unpaired surrogate escape");
              }
              cp = 0x10000 + ((*unit - 0xD800) << 10) + (*low - 0xDC00);
            } else {
              cp = *unit;
            }
            break;
          }
          default:
            --pos_;
            return fail("an unknown escape");
        }
      } else {
        auto decoded_cp = next_code_point(text_, pos_);
        if (!decoded_cp) return fail("text that is not valid UTF-8");
        cp = *decoded_cp;
      }
      if (escaped) append_python_escaped(*escaped, cp);
      if (decoded) append_utf8(*decoded, cp);
    }
  }

  bool object(std::size_t depth) {
    if (depth > max_depth_) return fail("nesting too deep");
    ++pos_;
    if (out) *out += '{';
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      if (out) *out += '}';
      return true;
    }
    std::unordered_set<std::string> keys;
    for (bool first = true;; first = false) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail("expected a member name");
      if (out && !first) *out += ", ";
      if (out) *out += '"';
      std::string key;
      if (!string(out, &key)) return false;
      if (out) *out += "\": ";
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      skip_space();
      std::string step = "[\"";
      for (std::size_t i = 0; i < key.size();) {
        auto cp = next_code_point(key, i);
        append_python_escaped(step, *cp);  // key was decoded from valid text
      }
      step += "\"]";
      if (!keys.insert(key).second && !repeated_key) repeated_key.emplace(path_string(), step);
      path_.push_back(std::move(step));
      const std::size_t start = pos_;
      if (!value(depth + 1)) return false;
      path_.pop_back();
      if (members && depth == 1)
        members->emplace_back(std::move(key), text_.substr(start, pos_ - start));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        if (out) *out += '}';
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool array(std::size_t depth) {
    if (depth > max_depth_) return fail("nesting too deep");
    ++pos_;
    if (out) *out += '[';
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      if (out) *out += ']';
      return true;
    }
    for (std::size_t index = 0;; ++index) {
      skip_space();
      if (out && index > 0) *out += ", ";
      path_.push_back("[" + std::to_string(index) + "]");
      if (!value(depth + 1)) return false;
      path_.pop_back();
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        if (out) *out += ']';
        return true;
      }
      return fail("expected ',' or ']'");
    }
  }

  std::string_view text_;
  std::size_t max_depth_;
  std::size_t pos_ = 0;
  std::vector<std::string> path_;
  std::string error_;
};

const char* kind_of(char first) {
  switch (first) {
    case '[':
      return "array";
    case '"':
      return "string";
    case 't':
    case 'f':
      return "boolean";
    case 'n':
      return "null";
    default:
      return "number";
  }
}

}  // namespace

std::optional<std::string> payload_problem(std::string_view payload) {
  if (auto deep = store::payload_depth_problem(payload)) return *deep;
  Scanner scanner(payload, store::kMaxPayloadDepth);
  if (!scanner.document()) return "not valid JSON: " + scanner.error();
  if (scanner.first_char() != '{') {
    return std::string("a JSON ") + kind_of(scanner.first_char()) + ", not an object";
  }
  if (scanner.non_finite) {
    return "holds the value " + scanner.non_finite->second + " at " + scanner.non_finite->first +
           ", which is not JSON (Python writes it for a float that is not finite); forktrial "
           "refuses it so that every trial can read the run";
  }
  if (scanner.repeated_key) {
    return "holds the key " + scanner.repeated_key->second + " twice in " +
           scanner.repeated_key->first +
           "; activegraph reads only the last of them, so what a trial reads and what forktrial "
           "would export could differ from what activegraph reads";
  }
  return std::nullopt;
}

std::expected<std::vector<std::pair<std::string, std::string_view>>, Status> object_members(
    std::string_view text) {
  std::vector<std::pair<std::string, std::string_view>> result;
  // One level for the object around the members.
  Scanner scanner(text, store::kMaxPayloadDepth + 1);
  scanner.members = &result;
  if (!scanner.document())
    return failure(ErrorCode::invalid_argument, "not valid JSON: " + scanner.error());
  if (scanner.first_char() != '{') {
    return failure(ErrorCode::invalid_argument,
                   std::string("expected a JSON object, found ") + kind_of(scanner.first_char()));
  }
  return result;
}

std::optional<std::pair<std::string, std::string>> first_non_finite(std::string_view value,
                                                                    std::string_view root) {
  Scanner scanner(value, store::kMaxPayloadDepth + 1);
  scanner.root = std::string(root);
  if (!scanner.document()) return std::nullopt;
  return scanner.non_finite;
}

bool append_python_json(std::string& out, std::string_view value) {
  Scanner scanner(value, store::kMaxPayloadDepth + 1);
  scanner.out = &out;
  return scanner.document();
}

void append_python_string(std::string& out, std::string_view text) {
  out += '"';
  for (std::size_t pos = 0; pos < text.size();) {
    auto cp = next_code_point(text, pos);
    if (!cp) {
      ++pos;
      cp = U'\uFFFD';
    }
    append_python_escaped(out, *cp);
  }
  out += '"';
}

}  // namespace forktrial::store::json_text

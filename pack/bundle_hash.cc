#include "pack/bundle_hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/text.h"
#include "base/unique_fd.h"
#include "pack/manifest.h"
#include "pack/path_text.h"

namespace forktrial::pack {
namespace {

constexpr std::size_t kReadBufferSize = 1 << 20;

struct FoundFile {
  std::string path;  // relative POSIX path, raw bytes
};

// Appends `name` to `dir` as a relative POSIX path ("" is the root).
std::string join(const std::string& dir, std::string_view name) {
  std::string out;
  out.reserve(dir.size() + 1 + name.size());
  out = dir;
  if (!out.empty()) out += '/';
  out += name;
  return out;
}

// Valid UTF-8 text with every non-ASCII code point spelled \u{XXXX}, so that
// composed and decomposed forms look different in a message.
std::string code_points(std::string_view text) {
  std::string out;
  for_each_code_point(text, [&](std::int32_t codepoint, std::string_view sequence) {
    if (codepoint >= 0 && codepoint < 0x80) {
      out += sequence;
    } else {
      char escaped[16];
      std::snprintf(escaped, sizeof escaped, "\\u{%04X}", static_cast<unsigned>(codepoint));
      out += escaped;
    }
  });
  return out;
}

struct DirCloser {
  void operator()(DIR* dir) const { ::closedir(dir); }
};

class Walker {
 public:
  std::vector<FoundFile> files;
  std::vector<WalkViolation> violations;

  // Walks the directory open as `dir_fd` whose relative path is `rel`.
  void walk(UniqueFd dir_fd, const std::string& rel) {
    int raw = dir_fd.release();
    DIR* dir = ::fdopendir(raw);
    if (dir == nullptr) {
      int error = errno;
      ::close(raw);
      unreadable(rel.empty() ? "." : rel, "cannot list directory", error);
      return;
    }
    std::unique_ptr<DIR, DirCloser> owner(dir);
    for (;;) {
      errno = 0;
      dirent* entry = ::readdir(dir);
      if (entry == nullptr) {
        if (errno != 0) unreadable(rel.empty() ? "." : rel, "cannot list directory", errno);
        break;
      }
      std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      // Rule 1: names starting with '.' are skipped whatever they are.
      if (name.starts_with('.')) continue;
      visit(::dirfd(dir), rel, name, entry->d_type);
    }
  }

 private:
  void unreadable(std::string path, std::string_view what, int error) {
    violations.push_back({std::move(path), WalkRule::unreadable,
                          std::string(what) + ": " + errno_text(error) +
                              "; fix its permissions or remove it from the pack"});
  }

  void visit(int parent_fd, const std::string& rel, std::string_view name, unsigned char d_type) {
    std::string path = join(rel, name);
    struct stat st {};
    if (d_type == DT_UNKNOWN || d_type == DT_LNK || d_type == DT_DIR || d_type == DT_REG) {
      if (::fstatat(parent_fd, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        unreadable(path, "cannot stat", errno);
        return;
      }
    } else {
      return;  // fifo, socket, device: rule 1 skips non-regular files
    }
    if (S_ISLNK(st.st_mode)) {
      report_symlink(parent_fd, path, name);
    } else if (S_ISDIR(st.st_mode)) {
      if (name == "__pycache__") return;
      int fd = ::openat(parent_fd, std::string(name).c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) {
        unreadable(path, "cannot open directory", errno);
        return;
      }
      walk(UniqueFd(fd), path);
    } else if (S_ISREG(st.st_mode)) {
      if (name.ends_with(".pyc")) return;
      if (auto bad = check_path_text(path)) violations.push_back(std::move(*bad));
      files.push_back({std::move(path)});
    }
  }

  void report_symlink(int parent_fd, std::string path, std::string_view name) {
    char target[4096];
    ssize_t length = ::readlinkat(parent_fd, std::string(name).c_str(), target, sizeof target);
    std::string shown = length >= 0 ? std::string(target, static_cast<std::size_t>(length)) : "?";
    struct stat st {};
    if (::fstatat(parent_fd, std::string(name).c_str(), &st, 0) != 0) {
      violations.push_back({std::move(path), WalkRule::symlink_dangling,
                            "symlink to \"" + shown +
                                "\" (target missing); symlinks are not allowed in a pack: "
                                "remove it"});
    } else if (S_ISDIR(st.st_mode)) {
      violations.push_back({std::move(path), WalkRule::symlink_to_directory,
                            "symlink to directory \"" + shown +
                                "\"; symlinks are not allowed in a pack: copy the directory in"});
    } else {
      violations.push_back({std::move(path), WalkRule::symlink_to_file,
                            "symlink to file \"" + shown +
                                "\"; symlinks are not allowed in a pack: copy the file in"});
    }
  }
};

void put_u64_be(std::uint64_t value, unsigned char* out) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(value & 0xff);
    value >>= 8;
  }
}

// Escapes bytes that would garble a terminal: control bytes and bytes that are
// not part of valid UTF-8 become \xNN.
std::string printable(std::string_view raw) {
  std::string out;
  for_each_code_point(raw, [&](std::int32_t codepoint, std::string_view sequence) {
    if (codepoint < 0x20 || codepoint == 0x7f) {
      char escaped[5];
      std::snprintf(escaped, sizeof escaped, "\\x%02X",
                    static_cast<unsigned>(static_cast<unsigned char>(sequence[0])));
      out += escaped;
    } else {
      out += sequence;
    }
  });
  return out;
}

WalkViolations make_violations(const std::filesystem::path& root, std::vector<WalkViolation> v) {
  std::stable_sort(v.begin(), v.end(),
                   [](const WalkViolation& a, const WalkViolation& b) { return a.path < b.path; });
  return WalkViolations{root, std::move(v)};
}

}  // namespace

std::optional<WalkViolation> check_path_text(const std::string& path) {
  if (const auto offset = first_invalid_utf8(path)) {
    return WalkViolation{path, WalkRule::non_utf8_path,
                         "path is not valid UTF-8 (bad byte at offset " + std::to_string(*offset) +
                             "); rename it with a UTF-8 name"};
  }
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> normalized(
      utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(path.c_str())), &std::free);
  if (normalized == nullptr) {
    return WalkViolation{path, WalkRule::non_utf8_path,
                         "path cannot be normalized as UTF-8; rename it with a UTF-8 name"};
  }
  if (path != reinterpret_cast<const char*>(normalized.get())) {
    return WalkViolation{
        path, WalkRule::non_nfc_path,
        "path is not NFC-normalized (found \"" + code_points(path) + "\", NFC form \"" +
            code_points(reinterpret_cast<const char*>(normalized.get())) +
            "\"); rename it to its NFC form, e.g. with `convmv -f utf8 -t utf8 --nfc`"};
  }
  return std::nullopt;
}

bool is_code_path(std::string_view path) {
  return path == kManifestFile || path.ends_with(".lua");
}

std::string_view rule_name(WalkRule rule) {
  switch (rule) {
    case WalkRule::root_missing:
      return "root-missing";
    case WalkRule::root_not_directory:
      return "root-not-directory";
    case WalkRule::symlink_to_file:
      return "symlink-to-file";
    case WalkRule::symlink_to_directory:
      return "symlink-to-directory";
    case WalkRule::symlink_dangling:
      return "symlink-dangling";
    case WalkRule::non_utf8_path:
      return "non-utf8-path";
    case WalkRule::non_nfc_path:
      return "non-nfc-path";
    case WalkRule::unreadable:
      return "unreadable";
  }
  return "unknown";
}

std::string WalkViolation::message() const {
  return printable(path) + ": " + detail + " [" + std::string(rule_name(rule)) + "]";
}

WalkViolations::WalkViolations(std::filesystem::path walked, std::vector<WalkViolation> found)
    : Status{ErrorCode::invalid_argument, ""},
      root(std::move(walked)),
      violations(std::move(found)) {
  message = "cannot hash pack directory " + root.string() + ": " +
            std::to_string(violations.size()) +
            (violations.size() == 1 ? " violation" : " violations") +
            " of the pack hash rules (nothing was hashed):";
  for (const auto& violation : violations) {
    message += "\n  ";
    message += violation.message();
  }
}

std::expected<TreeHashes, WalkViolations> hash_tree(const std::filesystem::path& root,
                                                    HashRequest request) {
  UniqueFd root_fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root_fd) {
    int error = errno;
    struct stat st {};
    if (::stat(root.c_str(), &st) != 0) {
      return std::unexpected(make_violations(
          root, {{".", WalkRule::root_missing,
                  "pack directory does not exist (" + errno_text(errno) + "); check the path"}}));
    }
    if (!S_ISDIR(st.st_mode)) {
      return std::unexpected(make_violations(
          root, {{".", WalkRule::root_not_directory,
                  "not a directory; a pack is a directory holding manifest.toml"}}));
    }
    return std::unexpected(make_violations(
        root, {{".", WalkRule::unreadable,
                "cannot open pack directory: " + errno_text(error) + "; check its permissions"}}));
  }

  Walker walker;
  UniqueFd walk_fd(::fcntl(root_fd.get(), F_DUPFD_CLOEXEC, 0));
  if (!walk_fd) {
    throw SystemError("fcntl(" + std::to_string(root_fd.get()) + ", F_DUPFD_CLOEXEC)", errno);
  }
  walker.walk(std::move(walk_fd), "");
  if (!walker.violations.empty()) {
    return std::unexpected(make_violations(root, std::move(walker.violations)));
  }

  // Rule 4: sorted by the UTF-8 bytes of the relative path (std::string
  // compares as unsigned char).
  std::sort(walker.files.begin(), walker.files.end(),
            [](const FoundFile& a, const FoundFile& b) { return a.path < b.path; });

  std::optional<Sha256> bundle;
  std::optional<Sha256> content;
  if (request.bundle) bundle.emplace();
  if (request.content) content.emplace();
  TreeHashes result;
  std::vector<WalkViolation> late;  // files that vanished or changed between walk and read
  auto buffer = std::make_unique_for_overwrite<unsigned char[]>(kReadBufferSize);

  for (const FoundFile& file : walker.files) {
    const bool in_content = file.path != kManifestFile;
    std::string* kept = nullptr;
    if (request.keep_code) {
      result.paths.push_back(file.path);
      if (is_code_path(file.path)) kept = &result.code[file.path];
    }
    auto feed = [&](const void* data, std::size_t size) {
      if (bundle) bundle->update(data, size);
      if (content && in_content) content->update(data, size);
    };
    UniqueFd fd(retry_eintr([&] {
      return ::openat(root_fd.get(), file.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    }));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0) {
      late.push_back({file.path, WalkRule::unreadable,
                      "cannot open file: " + errno_text(errno) +
                          "; fix its permissions or remove it from the pack"});
      continue;
    }
    if (!late.empty()) continue;  // only collecting the remaining violations
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (size >= (1u << 20)) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    if (kept != nullptr) kept->reserve(size);
    unsigned char header[8];
    put_u64_be(size, header);
    feed(file.path.data(), file.path.size());
    feed("", 1);
    feed(header, sizeof header);
    if (request.sink != nullptr) request.sink->file(file.path, size);
    std::uint64_t seen = 0;
    for (;;) {
      ssize_t n = retry_eintr([&] { return ::read(fd.get(), buffer.get(), kReadBufferSize); });
      if (n < 0) {
        late.push_back({file.path, WalkRule::unreadable,
                        "read failed: " + errno_text(errno) + "; check the file and disk"});
        break;
      }
      if (n == 0) break;
      seen += static_cast<std::uint64_t>(n);
      if (seen > size) break;
      feed(buffer.get(), static_cast<std::size_t>(n));
      if (request.sink != nullptr) {
        request.sink->content(std::string_view(reinterpret_cast<const char*>(buffer.get()),
                                               static_cast<std::size_t>(n)));
      }
      if (kept != nullptr)
        kept->append(reinterpret_cast<const char*>(buffer.get()), static_cast<std::size_t>(n));
    }
    if (late.empty() && seen != size) {
      late.push_back({file.path, WalkRule::unreadable,
                      "file changed size while being hashed (" + std::to_string(size) + " -> " +
                          std::to_string(seen) + " bytes); hash again once it is stable"});
    }
    ++result.files;
    result.bytes += size;
  }
  if (!late.empty()) return std::unexpected(make_violations(root, std::move(late)));
  if (bundle) result.bundle = bundle->finish();
  if (content) result.content = content->finish();
  return result;
}

std::expected<Digest, WalkViolations> bundle_hash(const std::filesystem::path& root) {
  auto hashes = hash_tree(root, {.bundle = true, .content = false});
  if (!hashes) return std::unexpected(std::move(hashes.error()));
  return *hashes->bundle;
}

std::expected<Digest, WalkViolations> content_hash(const std::filesystem::path& root) {
  auto hashes = hash_tree(root, {.bundle = false, .content = true});
  if (!hashes) return std::unexpected(std::move(hashes.error()));
  return *hashes->content;
}

std::optional<PinError> check_pin_form(std::string_view pin) {
  auto problem = Digest::describe_pin_problem(pin);
  if (!problem) return std::nullopt;
  return PinError{PinError::Kind::malformed_pin,
                  "malformed bundle pin \"" + printable(pin) + "\": " + *problem +
                      "; a pin is \"sha256:\" followed by 64 lowercase hex digits",
                  std::nullopt};
}

std::expected<Digest, PinError> compare_pin(std::string_view expected, const Digest& actual,
                                            const std::filesystem::path& root) {
  if (auto malformed = check_pin_form(expected)) return std::unexpected(std::move(*malformed));
  if (actual.str() != expected) {
    return std::unexpected(PinError{
        PinError::Kind::mismatch,
        "bundle hash mismatch for " + root.string() + ": pinned " + std::string(expected) +
            " but the directory hashes to " + actual.str() +
            " (the bundle hash covers every file, manifest.toml included); the pack changed "
            "since it was pinned, or the pin belongs to another pack",
        actual});
  }
  return actual;
}

std::expected<Digest, PinError> verify_bundle_hash(std::string_view expected,
                                                   const std::filesystem::path& root) {
  if (auto malformed = check_pin_form(expected)) return std::unexpected(std::move(*malformed));
  auto actual = bundle_hash(root);
  if (!actual) {
    return std::unexpected(
        PinError{PinError::Kind::walk_failed, actual.error().message, std::nullopt});
  }
  return compare_pin(expected, *actual, root);
}

}  // namespace forktrial::pack

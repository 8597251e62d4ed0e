#include "pack/bundle_archive.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <set>

#include "base/text.h"
#include "base/unique_fd.h"
#include "pack/path_text.h"

namespace forktrial::pack {
namespace {

// "FTPACK", NUL, format version 1 (docs/pack-format.md, "The pack archive").
constexpr std::string_view kMagic{"FTPACK\0\1", 8};
constexpr std::size_t kNameMax = 255;  // NAME_MAX of Linux file systems

std::string shown(std::string_view path) {
  return "\"" + bounded_escaped(path, 160) + "\"";
}

void put_be(std::string& out, std::uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

// Why `path` cannot be a file of an archive, or nullopt. The same rules for
// writing and reading, so whatever archive_pack writes extracts.
std::optional<std::string> path_problem(std::string_view path, const ArchiveLimits& limits) {
  const std::string quoted = "path " + shown(path);
  if (path.empty()) return "a path is empty";
  if (path.size() > limits.max_path_bytes) {
    return quoted + " is " + std::to_string(path.size()) + " bytes long; the limit is " +
           std::to_string(limits.max_path_bytes);
  }
  if (path.find('\0') != std::string_view::npos) return quoted + " contains a NUL byte";
  if (path.front() == '/') return quoted + " is absolute";
  if (path.find('\\') != std::string_view::npos) return quoted + " contains a backslash";
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = path.find('/', start);
    const bool last = slash == std::string_view::npos;
    const std::string_view name = path.substr(start, (last ? path.size() : slash) - start);
    if (name.empty()) return quoted + " has an empty component";
    if (name == ".") return quoted + " has a \".\" component";
    if (name == "..") return quoted + " has a \"..\" component, which would leave the pack";
    if (name.starts_with('.')) {
      return quoted + " has a component starting with '.', which the hash walk skips";
    }
    if (name.size() > kNameMax) {
      return quoted + " has a component of " + std::to_string(name.size()) +
             " bytes; the limit is " + std::to_string(kNameMax);
    }
    if (!last && name == "__pycache__") {
      return quoted + " is inside a __pycache__ directory, which the hash walk skips";
    }
    if (last && name.ends_with(".pyc")) {
      return quoted + " ends in \".pyc\", which the hash walk skips";
    }
    if (last) break;
    start = slash + 1;
  }
  if (auto bad = check_path_text(std::string(path))) return quoted + ": " + bad->detail;
  return std::nullopt;
}

// Checks the order and the file/directory consistency of the paths of one
// archive, one path at a time, in archive order.
class PathSet {
 public:
  std::optional<std::string> add(const std::string& path) {
    if (previous_ && path == *previous_) return "path " + shown(path) + " appears twice";
    if (previous_ && path < *previous_) {
      return "path " + shown(path) + " comes after " + shown(*previous_) +
             "; an archive lists its files sorted by their bytes, as the hash walk does";
    }
    if (directories_.contains(path)) {
      return "path " + shown(path) + " is both a file and a directory of another path";
    }
    for (std::size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      std::string directory = path.substr(0, slash);
      if (files_.contains(directory)) {
        return "path " + shown(path) + " needs directory " + shown(directory) +
               ", which is a file of the archive";
      }
      directories_.insert(std::move(directory));
    }
    files_.insert(path);
    previous_ = path;
    return std::nullopt;
  }

 private:
  std::optional<std::string> previous_;
  std::set<std::string, std::less<>> files_;
  std::set<std::string, std::less<>> directories_;
};

// Appends the walk's files to an archive, checking each path and the limits.
class ArchiveWriter final : public FileSink {
 public:
  explicit ArchiveWriter(ArchiveLimits limits) : limits_(limits) {
    limits_.max_files = std::min<std::uint64_t>(limits_.max_files, 0xffff'ffff);
    out.append(kMagic);
    put_be(out, 0, 4);  // the file count, filled in by finish()
  }

  void file(std::string_view path, std::uint64_t size) override {
    if (problem) return;
    ++files;
    content_bytes += size;
    if (files > limits_.max_files) {
      fail(ErrorCode::resource_exhausted, "the pack has more than " +
                                              std::to_string(limits_.max_files) +
                                              " files, the limit of an archive");
    } else if (content_bytes > limits_.max_total_bytes) {
      fail(ErrorCode::resource_exhausted, "the pack's files hold more than " +
                                              std::to_string(limits_.max_total_bytes) + " bytes (" +
                                              std::to_string(content_bytes) + " up to " +
                                              shown(path) + "), the limit of an archive");
    } else if (auto bad = path_problem(path, limits_)) {
      fail(ErrorCode::invalid_argument, *bad + "; an archive cannot hold it: rename it");
    }
    if (problem) return;
    put_be(out, path.size(), 4);
    out.append(path);
    put_be(out, size, 8);
  }

  void content(std::string_view chunk) override {
    if (!problem) out.append(chunk);
  }

  // The count field holds 32 bits; max_files above that is clamped in the
  // constructor, so the count always fits.
  void finish() {
    for (int i = 0; i < 4; ++i) {
      out[kMagic.size() + static_cast<std::size_t>(i)] =
          static_cast<char>((files >> (8 * (3 - i))) & 0xff);
    }
  }

  std::string out;
  std::uint64_t files = 0;
  std::uint64_t content_bytes = 0;
  std::optional<ArchiveError> problem;

 private:
  void fail(ErrorCode code, std::string message) {
    problem = ArchiveError{code, std::move(message), {}};
    out.clear();
  }

  ArchiveLimits limits_;
};

struct ArchiveFile {
  std::string path;
  std::string_view content;  // into the archive's bytes
};

struct ParsedArchive {
  ArchiveSummary summary;
  std::vector<ArchiveFile> files;
};

ArchiveError malformed(std::string message) {
  return ArchiveError{
      ErrorCode::invalid_argument, "malformed pack archive: " + std::move(message), {}};
}

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  std::size_t offset() const { return offset_; }
  std::size_t left() const { return bytes_.size() - offset_; }

  // A big-endian integer of `size` bytes, or nullopt when the archive ends.
  std::optional<std::uint64_t> integer(std::size_t size) {
    if (left() < size) return std::nullopt;
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < size; ++i) {
      value = (value << 8) | static_cast<unsigned char>(bytes_[offset_ + i]);
    }
    offset_ += size;
    return value;
  }
  std::string_view take(std::size_t size) {
    const std::string_view out = bytes_.substr(offset_, size);
    offset_ += size;
    return out;
  }

 private:
  std::string_view bytes_;
  std::size_t offset_ = 0;
};

std::string truncated(const Reader& reader, std::string_view what) {
  return "the archive ends at byte " + std::to_string(reader.offset()) + " inside " +
         std::string(what);
}

std::expected<ParsedArchive, ArchiveError> parse(std::string_view bytes,
                                                 const ArchiveLimits& limits) {
  if (bytes.size() < kMagic.size() || bytes.substr(0, 6) != kMagic.substr(0, 6) ||
      bytes[6] != '\0') {
    return std::unexpected(malformed("it does not start with the magic \"FTPACK\\0\""));
  }
  if (bytes[7] != kMagic[7]) {
    return std::unexpected(malformed("format version " +
                                     std::to_string(static_cast<unsigned char>(bytes[7])) +
                                     " is not the version this forktrial reads (" +
                                     std::to_string(static_cast<unsigned char>(kMagic[7])) + ")"));
  }
  Reader reader(bytes);
  reader.take(kMagic.size());
  const auto count = reader.integer(4);
  if (!count) return std::unexpected(malformed(truncated(reader, "the file count")));
  if (*count > limits.max_files) {
    return std::unexpected(ArchiveError{ErrorCode::resource_exhausted,
                                        "pack archive holds " + std::to_string(*count) +
                                            " files; the limit is " +
                                            std::to_string(limits.max_files),
                                        {}});
  }
  ParsedArchive parsed;
  parsed.files.reserve(static_cast<std::size_t>(*count));
  PathSet paths;
  Sha256 hash;
  std::string_view manifest;
  bool init_py = false;
  for (std::uint64_t index = 0; index < *count; ++index) {
    const std::string which = "file " + std::to_string(index + 1) + " of " + std::to_string(*count);
    const auto path_size = reader.integer(4);
    if (!path_size)
      return std::unexpected(malformed(truncated(reader, "the path length of " + which)));
    if (*path_size > limits.max_path_bytes) {
      return std::unexpected(malformed("the path of " + which + " is " +
                                       std::to_string(*path_size) + " bytes long; the limit is " +
                                       std::to_string(limits.max_path_bytes)));
    }
    if (reader.left() < *path_size) {
      return std::unexpected(malformed(truncated(reader, "the path of " + which)));
    }
    std::string path(reader.take(static_cast<std::size_t>(*path_size)));
    if (auto bad = path_problem(path, limits)) return std::unexpected(malformed(*bad));
    if (auto bad = paths.add(path)) return std::unexpected(malformed(*bad));
    const auto size = reader.integer(8);
    if (!size) return std::unexpected(malformed(truncated(reader, "the size of " + shown(path))));
    // Compared before adding, so a size near 2^64 cannot wrap the sum.
    if (*size > limits.max_total_bytes - parsed.summary.content_bytes) {
      return std::unexpected(
          ArchiveError{ErrorCode::resource_exhausted,
                       "pack archive file " + shown(path) + " of " + std::to_string(*size) +
                           " bytes takes the archive's content past the limit of " +
                           std::to_string(limits.max_total_bytes) + " bytes (" +
                           std::to_string(parsed.summary.content_bytes) + " before it)",
                       {}});
    }
    if (reader.left() < *size) {
      return std::unexpected(
          malformed(truncated(reader, "the " + std::to_string(*size) + " bytes of " + shown(path) +
                                          " (only " + std::to_string(reader.left()) + " left)")));
    }
    const std::string_view content = reader.take(static_cast<std::size_t>(*size));
    // The walk's rule 4, so the digest is the extracted tree's bundle hash.
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(*size >> (8 * (7 - i)));
    hash.update(path);
    hash.update("", 1);
    hash.update(length, sizeof length);
    hash.update(content);
    parsed.summary.content_bytes += *size;
    if (path == kManifestFile) manifest = content;
    if (path == "__init__.py") init_py = true;
    parsed.files.push_back({std::move(path), content});
  }
  if (reader.left() != 0) {
    return std::unexpected(malformed(std::to_string(reader.left()) +
                                     " bytes follow the last file, from byte " +
                                     std::to_string(reader.offset())));
  }
  parsed.summary.files = *count;
  parsed.summary.bundle_hash = hash.finish();
  parsed.summary.executor = executor_of_files(manifest, init_py);
  parsed.summary.deterministic = manifest_declares_deterministic(manifest);
  return parsed;
}

ArchiveError system_failure(const std::string& call, int error) {
  return ArchiveError{ErrorCode::internal, call + ": " + errno_text(error), {}};
}

// Removes `name` under directory `parent_fd` and everything below it, never
// following a symlink; read-only directories are made writable first.
// Returns the errno of the first failure, 0 on success.
int remove_tree_at(int parent_fd, const std::string& name) {
  struct stat st {};
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? 0 : errno;
  }
  if (S_ISDIR(st.st_mode)) {
    const int fd =
        ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno;
    ::fchmod(fd, 0700);
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), ::closedir);
    if (!dir) {
      const int error = errno;
      ::close(fd);
      return error;
    }
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir.get())) {
      const std::string_view child = entry->d_name;
      if (child != "." && child != "..") names.emplace_back(child);
    }
    for (const std::string& child : names) {
      if (const int error = remove_tree_at(::dirfd(dir.get()), child)) return error;
    }
    if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0) return errno;
    return 0;
  }
  if (::unlinkat(parent_fd, name.c_str(), 0) != 0) return errno;
  return 0;
}

std::optional<ArchiveError> remove_tree(const std::filesystem::path& path) {
  const std::filesystem::path parent = path.parent_path().empty() ? "." : path.parent_path();
  UniqueFd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd) return system_failure("open(\"" + parent.string() + "\")", errno);
  if (const int error = remove_tree_at(parent_fd.get(), path.filename().string())) {
    return system_failure("removing " + path.string(), error);
  }
  return std::nullopt;
}

// Opens (creating with `create`) the directory `relative` below `root_fd`
// one component at a time, each with O_NOFOLLOW.
std::expected<UniqueFd, int> open_directory(int root_fd, std::string_view relative, bool create) {
  UniqueFd current(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  if (!current) return std::unexpected(errno);
  std::size_t start = 0;
  while (start < relative.size()) {
    std::size_t slash = relative.find('/', start);
    if (slash == std::string_view::npos) slash = relative.size();
    const std::string name(relative.substr(start, slash - start));
    if (create && ::mkdirat(current.get(), name.c_str(), 0755) != 0 && errno != EEXIST) {
      return std::unexpected(errno);
    }
    UniqueFd next(
        ::openat(current.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next) return std::unexpected(errno);
    current = std::move(next);
    start = slash + 1;
  }
  return current;
}

std::optional<ArchiveError> write_files(int root_fd, const std::filesystem::path& target,
                                        const std::vector<ArchiveFile>& files) {
  std::set<std::string, std::greater<>> directories;  // deepest last in sorted order: reversed
  for (const ArchiveFile& file : files) {
    const std::size_t slash = file.path.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : file.path.substr(0, slash);
    const std::string name = slash == std::string::npos ? file.path : file.path.substr(slash + 1);
    auto dir = open_directory(root_fd, parent, true);
    if (!dir)
      return system_failure("creating directory " + (target / parent).string(), dir.error());
    for (std::size_t at = parent.find('/'); at != std::string::npos;
         at = parent.find('/', at + 1)) {
      directories.insert(parent.substr(0, at));
    }
    if (!parent.empty()) directories.insert(parent);
    UniqueFd fd(retry_eintr([&] {
      return ::openat(dir->get(), name.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    }));
    const std::string shown_path = (target / file.path).string();
    if (!fd) return system_failure("open(\"" + shown_path + "\", O_CREAT | O_EXCL)", errno);
    std::string_view left = file.content;
    while (!left.empty()) {
      const ssize_t n = retry_eintr([&] { return ::write(fd.get(), left.data(), left.size()); });
      if (n < 0) return system_failure("write(\"" + shown_path + "\")", errno);
      left.remove_prefix(static_cast<std::size_t>(n));
    }
    if (::fchmod(fd.get(), 0444) != 0)
      return system_failure("fchmod(\"" + shown_path + "\", 0444)", errno);
  }
  // Children before parents (reverse order), since a 0555 directory takes no
  // new entries.
  for (const std::string& directory : directories) {
    auto dir = open_directory(root_fd, directory, false);
    if (!dir) return system_failure("open(\"" + (target / directory).string() + "\")", dir.error());
    if (::fchmod(dir->get(), 0555) != 0) {
      return system_failure("fchmod(\"" + (target / directory).string() + "\", 0555)", errno);
    }
  }
  if (::fchmod(root_fd, 0555) != 0)
    return system_failure("fchmod(\"" + target.string() + "\", 0555)", errno);
  return std::nullopt;
}

// Holds an exclusive flock on a file until destroyed.
std::expected<UniqueFd, ArchiveError> lock_file(const std::filesystem::path& path) {
  UniqueFd fd(retry_eintr(
      [&] { return ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644); }));
  if (!fd) return std::unexpected(system_failure("open(\"" + path.string() + "\")", errno));
  if (retry_eintr([&] { return ::flock(fd.get(), LOCK_EX); }) != 0) {
    return std::unexpected(system_failure("flock(\"" + path.string() + "\", LOCK_EX)", errno));
  }
  return fd;
}

// Whether `dir` is a real directory (not a symlink) whose bundle hash is
// `expected`.
bool holds_pack(const std::filesystem::path& dir, const Digest& expected) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  const auto actual = bundle_hash(dir);
  return actual && *actual == expected;
}

}  // namespace

std::expected<PackArchive, ArchiveError> archive_pack(const std::filesystem::path& root,
                                                      const ArchiveLimits& limits) {
  ArchiveWriter writer(limits);
  auto hashes = hash_tree(root, {.bundle = true, .content = false, .sink = &writer});
  if (!hashes) {
    return std::unexpected(ArchiveError{ErrorCode::invalid_argument, hashes.error().message,
                                        std::move(hashes.error().violations)});
  }
  if (writer.problem) {
    writer.problem->message =
        "cannot archive pack directory " + root.string() + ": " + writer.problem->message;
    return std::unexpected(std::move(*writer.problem));
  }
  writer.finish();
  return PackArchive{std::move(writer.out), *hashes->bundle, writer.files, writer.content_bytes};
}

std::expected<ArchiveSummary, ArchiveError> check_archive(std::string_view bytes,
                                                          const ArchiveLimits& limits) {
  auto parsed = parse(bytes, limits);
  if (!parsed) return std::unexpected(std::move(parsed.error()));
  return parsed->summary;
}

std::expected<ArchiveSummary, ArchiveError> extract_archive(std::string_view bytes,
                                                            const std::filesystem::path& target_dir,
                                                            const ArchiveLimits& limits) {
  auto parsed = parse(bytes, limits);
  if (!parsed) return std::unexpected(std::move(parsed.error()));
  if (::mkdir(target_dir.c_str(), 0755) != 0) {
    const int error = errno;
    ArchiveError failure = system_failure("mkdir(\"" + target_dir.string() + "\")", error);
    if (error == EEXIST) {
      failure.code = ErrorCode::failed_precondition;
      failure.message += "; extract into a directory that does not exist yet";
    }
    return std::unexpected(std::move(failure));
  }
  UniqueFd root_fd(::open(target_dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::optional<ArchiveError> failure;
  if (!root_fd) {
    failure = system_failure("open(\"" + target_dir.string() + "\")", errno);
  } else {
    failure = write_files(root_fd.get(), target_dir, parsed->files);
  }
  if (failure) {
    root_fd.reset();
    remove_tree(target_dir);  // best effort: the first failure is the one to report
    return std::unexpected(std::move(*failure));
  }
  return parsed->summary;
}

std::expected<std::filesystem::path, ArchiveError> materialize(
    std::string_view bytes, const Digest& expected, const std::filesystem::path& cache_dir,
    const ArchiveLimits& limits) {
  const auto summary = check_archive(bytes, limits);
  if (!summary) return std::unexpected(summary.error());
  if (summary->bundle_hash != expected) {
    return std::unexpected(ArchiveError{
        ErrorCode::failed_precondition,
        "the pack archive has bundle hash " + summary->bundle_hash.str() + ", not the expected " +
            expected.str() + "; it is another pack, or the pin is wrong",
        {}});
  }
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) {
    return std::unexpected(
        ArchiveError{ErrorCode::internal,
                     "cannot create pack cache " + cache_dir.string() + ": " + ec.message(),
                     {}});
  }
  const std::string hex = expected.hex();
  const std::filesystem::path final_dir = cache_dir / hex;
  auto lock = lock_file(cache_dir / (hex + ".lock"));
  if (!lock) return std::unexpected(std::move(lock.error()));

  // Under the lock, a temporary directory of this hash belongs to a holder
  // that died before renaming it.
  const std::string temp_prefix = ".tmp-" + hex + "-";
  for (const auto& entry : std::filesystem::directory_iterator(cache_dir, ec)) {
    if (entry.path().filename().string().starts_with(temp_prefix)) remove_tree(entry.path());
  }
  if (holds_pack(final_dir, expected)) return final_dir;
  if (auto failure = remove_tree(final_dir)) return std::unexpected(std::move(*failure));

  static std::atomic<std::uint64_t> sequence = 0;
  const std::filesystem::path temp =
      cache_dir / (temp_prefix + std::to_string(::getpid()) + "-" + std::to_string(++sequence));
  auto extracted = extract_archive(bytes, temp, limits);
  if (!extracted) return std::unexpected(std::move(extracted.error()));
  if (!holds_pack(temp, expected)) {
    remove_tree(temp);
    return std::unexpected(ArchiveError{
        ErrorCode::internal,
        "the pack extracted into " + temp.string() + " does not hash to " + expected.str() +
            " although its archive does; the file system changed it while it was written",
        {}});
  }
  if (::rename(temp.c_str(), final_dir.c_str()) != 0) {
    const int error = errno;
    remove_tree(temp);
    return std::unexpected(
        system_failure("rename(\"" + temp.string() + "\", \"" + final_dir.string() + "\")", error));
  }
  return final_dir;
}

std::optional<ArchiveError> dematerialize(const Digest& pin,
                                          const std::filesystem::path& cache_dir) {
  const std::string hex = pin.hex();
  std::error_code ec;
  if (!std::filesystem::exists(cache_dir / hex, ec)) return std::nullopt;
  auto lock = lock_file(cache_dir / (hex + ".lock"));
  if (!lock) return std::move(lock.error());
  return remove_tree(cache_dir / hex);
}

}  // namespace forktrial::pack

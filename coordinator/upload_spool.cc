#include "coordinator/upload_spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/unique_fd.h"

namespace forktrial::coordinator {

namespace {

std::string bytes_text(std::uint64_t bytes) {
  return std::to_string(bytes) + " bytes";
}

}  // namespace

UploadSpool::UploadSpool(std::filesystem::path dir, UploadLimits limits)
    : dir_(std::move(dir)), limits_(limits) {
  std::error_code error;
  std::filesystem::remove_all(dir_, error);
  std::filesystem::create_directories(dir_);
}

UploadSpool::~UploadSpool() {
  while (!parts_.empty()) drop(parts_.begin());
}

void UploadSpool::drop(std::map<Key, Part>::iterator part) {
  if (part->second.fd >= 0) ::close(part->second.fd);
  std::error_code error;
  std::filesystem::remove(part->second.file, error);
  declared_ -= part->second.total;
  parts_.erase(part);
}

std::expected<void, Status> UploadSpool::admit(const std::string& client,
                                               std::uint64_t total) const {
  if (total > limits_.max_blob) {
    return std::unexpected(Status{ErrorCode::resource_exhausted, "a blob of " + bytes_text(total) +
                                                                     " is over the limit of " +
                                                                     bytes_text(limits_.max_blob)});
  }
  std::size_t uploads = 0;
  std::uint64_t declared = 0;
  for (auto it = parts_.lower_bound(Key{client, Digest{}});
       it != parts_.end() && it->first.first == client; ++it) {
    ++uploads;
    declared += it->second.total;
  }
  if (uploads >= limits_.per_client_uploads || declared + total > limits_.per_client) {
    return std::unexpected(Status{
        ErrorCode::resource_exhausted,
        "this client has " + std::to_string(uploads) + " uploads in progress, of " +
            bytes_text(declared) + "; a client may have " +
            std::to_string(limits_.per_client_uploads) + " of at most " +
            bytes_text(limits_.per_client) +
            " together: finish them, or wait for the abandoned ones to be dropped (" +
            std::to_string(limits_.idle_timeout.count() / 1000) + " s after their last chunk)"});
  }
  if (declared_ + total > limits_.overall) {
    return std::unexpected(Status{ErrorCode::unavailable,
                                  "the coordinator has " + bytes_text(declared_) +
                                      " of uploads in progress, its limit; send this again later"});
  }
  return {};
}

std::expected<std::optional<std::filesystem::path>, Status> UploadSpool::add(
    const std::string& client, const Digest& digest, std::uint64_t total, std::uint64_t offset,
    std::span<const std::byte> bytes, Instant now) {
  const Key key{client, digest};
  auto part = parts_.find(key);
  if (offset == 0) {
    if (part != parts_.end()) drop(part);  // started again
    if (auto admitted = admit(client, total); !admitted) return std::unexpected(admitted.error());
    const std::filesystem::path file = dir_ / (std::to_string(next_file_++) + ".part");
    const int fd =
        ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
      return std::unexpected(
          Status{ErrorCode::unavailable, "cannot spool the upload to " + file.string() + ": " +
                                             std::strerror(errno) + "; send it again later"});
    }
    part = parts_.emplace(key, Part{file, fd, total, 0, Sha256(), now}).first;
    declared_ += total;
  }
  if (part == parts_.end() || offset != part->second.written || total != part->second.total ||
      part->second.written + bytes.size() > total) {
    if (part != parts_.end()) drop(part);
    return std::unexpected(Status{ErrorCode::failed_precondition,
                                  "chunks of a blob come in order, from offset 0, within its "
                                  "size"});
  }
  Part& p = part->second;
  for (std::size_t done = 0; done < bytes.size();) {
    const ssize_t n =
        retry_eintr([&] { return ::write(p.fd, bytes.data() + done, bytes.size() - done); });
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      drop(part);
      return std::unexpected(Status{ErrorCode::unavailable,
                                    "cannot spool the upload: " + why + "; send it again later"});
    }
    done += static_cast<std::size_t>(n);
  }
  p.hash.update(bytes.data(), bytes.size());
  p.written += bytes.size();
  p.last = now;
  if (p.written < p.total) return std::optional<std::filesystem::path>();
  const Digest got = p.hash.finish();
  ::close(p.fd);
  p.fd = -1;
  if (got != digest) {
    drop(part);
    return std::unexpected(
        Status{ErrorCode::invalid_argument, "the blob's bytes do not hash to " + digest.str()});
  }
  std::filesystem::path file = p.file;
  declared_ -= p.total;
  parts_.erase(part);
  return std::optional<std::filesystem::path>(std::move(file));
}

void UploadSpool::done(const std::filesystem::path& file) {
  std::error_code error;
  std::filesystem::remove(file, error);
}

std::vector<std::string> UploadSpool::expire(Instant now) {
  std::vector<std::string> dropped;
  for (auto it = parts_.begin(); it != parts_.end();) {
    auto next = std::next(it);
    if (it->second.last + limits_.idle_timeout <= now) {
      dropped.push_back("dropped an upload of " + it->first.second.str() + " abandoned after " +
                        bytes_text(it->second.written) + " of " + bytes_text(it->second.total));
      drop(it);
    }
    it = next;
  }
  return dropped;
}

}  // namespace forktrial::coordinator

#include "transport/curve.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <zmq.hpp>

#include "base/error.h"
#include "base/text.h"
#include "base/unique_fd.h"

namespace forktrial::transport {
namespace {

constexpr std::size_t kKeyChars = 40;
constexpr std::size_t kMaxKeyFileBytes = 64 * 1024;
constexpr std::string_view kDomain = "forktrial";

std::string shown(const std::filesystem::path& path) {
  return escape_controls(path.string());
}

// The quoted value of a `name = "value"` line, or nullopt when the line is
// not one for `name`.
std::optional<std::string> quoted_value(std::string_view line, std::string_view name) {
  const auto start = line.find_first_not_of(" \t");
  if (start == std::string_view::npos) return std::nullopt;
  line.remove_prefix(start);
  if (!line.starts_with(name)) return std::nullopt;
  line.remove_prefix(name.size());
  const auto eq = line.find_first_not_of(" \t");
  if (eq == std::string_view::npos || line[eq] != '=') return std::nullopt;
  line.remove_prefix(eq + 1);
  const auto open = line.find('"');
  const auto close = line.rfind('"');
  if (open == std::string_view::npos || close == open) return std::nullopt;
  return std::string(line.substr(open + 1, close - open - 1));
}

std::expected<std::string, Status> read_small_file(const std::filesystem::path& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    return failure(error_code_of_errno(ec.value()),
                   "cannot read " + shown(path) + ": " + ec.message());
  }
  if (size > kMaxKeyFileBytes) {
    return failure(ErrorCode::invalid_argument, shown(path) + " is " + std::to_string(size) +
                                                    " bytes, too large for a key file (at most " +
                                                    std::to_string(kMaxKeyFileBytes) + ")");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return failure(error_code_of_errno(errno),
                   "cannot read " + shown(path) + ": " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::expected<void, Status> write_new(const std::filesystem::path& path, const std::string& text,
                                      mode_t mode, bool replace) {
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (replace ? O_TRUNC : O_EXCL);
  UniqueFd fd(::open(path.c_str(), flags, mode));
  if (!fd) {
    if (errno == EEXIST || errno == EISDIR) {
      std::error_code ec;
      if (std::filesystem::is_directory(path, ec)) {
        return failure(ErrorCode::invalid_argument,
                       shown(path) + " is a directory; give the path of a key file in it");
      }
      return failure(ErrorCode::conflict, shown(path) + " exists; give --force to replace it");
    }
    return failure(error_code_of_errno(errno),
                   "cannot write " + shown(path) + ": " + std::strerror(errno));
  }
  // An existing file keeps its mode through O_TRUNC: set it.
  if (::fchmod(fd.get(), mode) != 0 ||
      ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0) {
    return failure(error_code_of_errno(errno),
                   "cannot write " + shown(path) + ": " + std::strerror(errno));
  }
  return {};
}

// The public key derived from a secret one, or nullopt when libzmq cannot.
std::optional<std::string> public_of(const std::string& secret) {
  std::array<char, kKeyChars + 1> derived{};
  if (zmq_curve_public(derived.data(), secret.c_str()) != 0) return std::nullopt;
  return std::string(derived.data(), kKeyChars);
}

}  // namespace

std::string_view role_name(Role role) {
  return role == Role::worker ? "worker" : "client";
}

Keypair generate_keypair() {
  if (!zmq_has("curve")) {
    throw Error(ErrorCode::unavailable,
                "this libzmq was built without CURVE: keys cannot be made or used here");
  }
  std::array<char, kKeyChars + 1> pub{};
  std::array<char, kKeyChars + 1> sec{};
  if (zmq_curve_keypair(pub.data(), sec.data()) != 0) {
    throw Error(ErrorCode::internal,
                std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()));
  }
  return Keypair{std::string(pub.data(), kKeyChars), std::string(sec.data(), kKeyChars)};
}

bool is_z85_key(std::string_view text) {
  if (text.size() != kKeyChars) return false;
  const std::string copy(text);
  std::array<std::uint8_t, 32> bytes{};
  return zmq_z85_decode(bytes.data(), copy.c_str()) != nullptr;
}

std::expected<void, Status> write_keypair(const std::filesystem::path& path, const Keypair& keypair,
                                          bool replace) {
  const std::string pub_line = "public-key = \"" + keypair.public_key + "\"\n";
  auto secret = write_new(path,
                          "# forktrial CurveZMQ keypair: keep this file secret\n" + pub_line +
                              "secret-key = \"" + keypair.secret_key + "\"\n",
                          0600, replace);
  if (!secret) return secret;
  std::filesystem::path pub = path;
  pub += ".pub";
  return write_new(pub, "# forktrial CurveZMQ public key\n" + pub_line, 0644, replace);
}

std::expected<Keypair, Status> read_keypair(const std::filesystem::path& path) {
  auto text = read_small_file(path);
  if (!text) return std::unexpected(text.error());
  Keypair keypair;
  std::istringstream lines(*text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    for (auto [name, slot] : {std::pair{"public-key", &keypair.public_key},
                              std::pair{"secret-key", &keypair.secret_key}}) {
      auto value = quoted_value(line, name);
      if (!value) continue;
      if (!is_z85_key(*value)) {
        return failure(ErrorCode::invalid_argument, shown(path) + " line " +
                                                        std::to_string(number) + ": " + name +
                                                        " is not a Z85 key (40 characters)");
      }
      *slot = *value;
    }
  }
  if (keypair.secret_key.empty()) {
    return failure(ErrorCode::invalid_argument,
                   shown(path) + " holds no secret-key: give a keypair file, not a .pub file");
  }
  const auto derived = public_of(keypair.secret_key);
  if (!derived) {
    return failure(ErrorCode::invalid_argument,
                   "cannot derive the public key of " + shown(path) + ": this libzmq has no CURVE");
  }
  if (!keypair.public_key.empty() && keypair.public_key != *derived) {
    return failure(ErrorCode::invalid_argument,
                   shown(path) + ": its public-key is not the one of its secret-key");
  }
  keypair.public_key = *derived;
  return keypair;
}

std::expected<std::string, Status> read_public_key(const std::string& key_or_path) {
  if (is_z85_key(key_or_path)) return key_or_path;
  auto text = read_small_file(key_or_path);
  if (!text) {
    return failure(ErrorCode::invalid_argument,
                   "\"" + escape_controls(key_or_path) +
                       "\" is neither a Z85 public key (40 characters) nor a readable key "
                       "file: " +
                       text.error().message);
  }
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    if (auto value = quoted_value(line, "public-key"); value && is_z85_key(*value)) return *value;
  }
  return failure(ErrorCode::invalid_argument, shown(key_or_path) + " holds no public-key line");
}

std::expected<void, Status> add_allow_list(AllowList& list, const std::filesystem::path& path,
                                           Role role, bool admin) {
  auto text = read_small_file(path);
  if (!text) return std::unexpected(text.error());
  std::istringstream lines(*text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const auto start = line.find_first_not_of(" \t\r");
    if (start == std::string::npos || line[start] == '#') continue;
    std::string key;
    if (auto value = quoted_value(line, "public-key")) {
      key = *value;
    } else {
      key = line.substr(start, kKeyChars);
      const auto after = start + key.size();
      if (after < line.size() && line[after] != ' ' && line[after] != '\t' && line[after] != '\r')
        key.clear();
    }
    if (!is_z85_key(key)) {
      return failure(ErrorCode::invalid_argument,
                     shown(path) + " line " + std::to_string(number) +
                         ": not a public key (40 Z85 characters, or public-key = \"...\")");
    }
    const std::string where = shown(path) + " line " + std::to_string(number);
    Admitted admitted{role, {}, admin && role == Role::client};
    if (const auto bound = line.find("worker-id="); bound != std::string::npos) {
      const auto begin = bound + std::string_view("worker-id=").size();
      admitted.worker_id = line.substr(begin, line.find_first_of(" \t\r", begin) - begin);
      if (role != Role::worker) {
        return failure(ErrorCode::invalid_argument,
                       where +
                           ": worker-id= binds a worker's key; this is a list of "
                           "clients' keys");
      }
      const bool plain =
          !admitted.worker_id.empty() && admitted.worker_id.size() <= 256 &&
          std::all_of(admitted.worker_id.begin(), admitted.worker_id.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
          });
      if (!plain) {
        return failure(ErrorCode::invalid_argument,
                       where + ": worker-id= takes a plain id (letters, digits, - _ .)");
      }
      for (const auto& [other, entry] : list) {
        if (other != key && entry.worker_id == admitted.worker_id) {
          return failure(ErrorCode::invalid_argument, where + ": worker id " + admitted.worker_id +
                                                          " is bound to key " + other +
                                                          " already; one key an id");
        }
      }
    }
    auto [it, added] = list.emplace(key, admitted);
    if (!added && it->second.role != role) {
      return failure(ErrorCode::invalid_argument,
                     where + ": key " + key + " is listed as a " +
                         std::string(role_name(it->second.role)) +
                         "'s too; a key is a worker's or a client's, not both");
    }
    if (!added && it->second.worker_id != admitted.worker_id) {
      return failure(ErrorCode::invalid_argument,
                     where + ": key " + key + " is listed again with another worker id");
    }
    if (!added) it->second.admin = it->second.admin || admitted.admin;
  }
  return {};
}

std::string user_id_of(const Admitted& admitted, std::string_view key) {
  std::string user(role_name(admitted.role));
  user += ":" + std::string(key);
  if (admitted.role == Role::client) {
    if (admitted.admin) user += ":admin";
  } else if (!admitted.worker_id.empty()) {
    user += ":" + admitted.worker_id;
  }
  return user;
}

void make_curve_server(zmq::socket_t& socket, const Keypair& own) {
  socket.set(zmq::sockopt::curve_server, 1);
  socket.set(zmq::sockopt::curve_secretkey, own.secret_key);
  socket.set(zmq::sockopt::zap_domain, std::string(kDomain));
}

void make_curve_client(zmq::socket_t& socket, const ClientKeys& keys) {
  socket.set(zmq::sockopt::curve_serverkey, keys.server_public);
  socket.set(zmq::sockopt::curve_publickey, keys.own.public_key);
  socket.set(zmq::sockopt::curve_secretkey, keys.own.secret_key);
}

bool endpoint_is_local(std::string_view endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  std::string_view host = endpoint.substr(6);
  // tcp://source;destination connects from a source: the destination counts.
  if (const auto semi = host.find(';'); semi != std::string_view::npos)
    host.remove_prefix(semi + 1);
  if (host.starts_with("[")) return host.starts_with("[::1]:");
  host = host.substr(0, host.rfind(':'));
  return host == "localhost" || host.starts_with("127.");
}

}  // namespace forktrial::transport

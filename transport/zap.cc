#include "transport/zap.h"

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "base/text.h"

namespace forktrial::transport {
namespace {

constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr std::string_view kVersion = "1.0";
constexpr std::size_t kKeyBytes = 32;

std::string z85_of(const zmq::message_t& key) {
  std::array<char, 41> text{};
  if (key.size() != kKeyBytes ||
      zmq_z85_encode(text.data(), static_cast<const std::uint8_t*>(key.data()), kKeyBytes) ==
          nullptr) {
    return "(not a key)";
  }
  return std::string(text.data(), 40);
}

}  // namespace

ZapHandler::ZapHandler(zmq::context_t& context, AllowList allowed, Log log)
    : socket_(context, zmq::socket_type::rep), allowed_(std::move(allowed)), log_(std::move(log)) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind(kZapEndpoint);
  thread_ = std::thread([this] { serve(); });
}

ZapHandler::~ZapHandler() {
  stop_ = true;
  thread_.join();
}

void ZapHandler::serve() {
  while (!stop_) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 1, std::chrono::milliseconds(100));
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> request;
      zmq::message_t part;
      do {
        if (!socket_.recv(part, zmq::recv_flags::none)) break;
        request.push_back(std::move(part));
      } while (request.back().more());
      answer(request);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      if (e.num() != EINTR) log_(LogLevel::error, std::string("the ZAP handler: ") + e.what());
    }
  }
}

// A request: version, request id, domain, address, routing id, mechanism,
// then the mechanism's credentials (CURVE: the client's 32-byte public key).
// A reply: version, request id, status code, status text, user id, metadata.
void ZapHandler::answer(std::vector<zmq::message_t>& request) {
  std::string status = "400";
  std::string text = "not a ZAP request";
  std::string user;
  if (request.size() >= 6 && request[0].to_string_view() == kVersion) {
    const std::string address = escape_controls(request[3].to_string_view());
    const std::string mechanism(request[5].to_string_view());
    if (mechanism != "CURVE" || request.size() != 7) {
      text = "only CURVE is accepted";
      log_(LogLevel::warn, "refused a peer at " + address + ": it offered " +
                               escape_controls(mechanism) + ", not CURVE");
    } else {
      const std::string key = z85_of(request[6]);
      const auto found = allowed_.find(key);
      if (found == allowed_.end()) {
        text = "this key is not allowed here";
        log_(LogLevel::warn, "refused a peer at " + address + ": its key " + key +
                                 " is on no allow list (--allow-workers, --allow-clients)");
      } else {
        status = "200";
        text = "OK";
        user = user_id_of(found->second, key);
        log_(LogLevel::debug, "admitted a " + user + " at " + address + " with key " + key);
      }
    }
  }
  const std::string id = request.size() >= 2 ? request[1].to_string() : "";
  socket_.send(zmq::buffer(kVersion), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(id), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(status), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
  socket_.send(zmq::buffer(user), zmq::send_flags::sndmore);
  socket_.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::none);
}

std::optional<Role> role_of(const zmq::message_t& message) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  if (user == nullptr) return std::nullopt;
  const std::string_view name(user);
  const std::string_view worker = role_name(Role::worker);
  if (name == worker ||
      (name.starts_with(worker) && name.size() > worker.size() && name[worker.size()] == ':')) {
    return Role::worker;
  }
  if (name == role_name(Role::client) || client_of(message)) return Role::client;
  return std::nullopt;
}

std::optional<ClientIdentity> client_of(const zmq::message_t& message) {
  const char* user = zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
  if (user == nullptr) return std::nullopt;
  const std::string_view name(user);
  const std::string prefix = std::string(role_name(Role::client)) + ":";
  // "client:" + the key's 40 characters (Z85 holds ':', so by length) +
  // optionally ":admin".
  constexpr std::size_t kKey = 40;
  if (!name.starts_with(prefix) || name.size() < prefix.size() + kKey) return std::nullopt;
  const std::string_view key = name.substr(prefix.size(), kKey);
  const std::string_view rest = name.substr(prefix.size() + kKey);
  if (!rest.empty() && rest != ":admin") return std::nullopt;
  return ClientIdentity{std::string(key), rest == ":admin"};
}

namespace {

// "worker:" + the key's 40 characters (Z85 holds ':', so by length) +
// optionally ":" + the id it is bound to: (key, bound id or "").
std::optional<std::pair<std::string_view, std::string_view>> worker_user(const char* user) {
  if (user == nullptr) return std::nullopt;
  const std::string_view name(user);
  const std::string prefix = std::string(role_name(Role::worker)) + ":";
  constexpr std::size_t kKey = 40;
  if (!name.starts_with(prefix) || name.size() < prefix.size() + kKey) return std::nullopt;
  const std::string_view rest = name.substr(prefix.size() + kKey);
  if (!rest.empty() && rest.front() != ':') return std::nullopt;
  return std::pair{name.substr(prefix.size(), kKey), rest.empty() ? rest : rest.substr(1)};
}

const char* user_id(const zmq::message_t& message) {
  return zmq_msg_gets(const_cast<zmq_msg_t*>(message.handle()), "User-Id");
}

}  // namespace

std::optional<std::string> bound_worker_id(const zmq::message_t& message) {
  const auto user = worker_user(user_id(message));
  if (!user || user->second.empty()) return std::nullopt;
  return std::string(user->second);
}

std::optional<std::string> worker_key_of(const zmq::message_t& message) {
  const auto user = worker_user(user_id(message));
  if (!user) return std::nullopt;
  return std::string(user->first);
}

}  // namespace forktrial::transport

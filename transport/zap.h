// The coordinator's ZAP handler (ZeroMQ RFC 27): a thread that answers
// libzmq's authentication requests for every CURVE handshake on the
// context's sockets. It admits a key on the allow list, telling the socket
// its role as the connection's User-Id ("worker" or "client", which the
// coordinator reads from each message), and sends any other key away,
// logging the refusal with the key and the peer's address.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "base/log.h"
#include "transport/curve.h"

namespace forktrial::transport {

class ZapHandler {
 public:
  // Binds inproc://zeromq.zap.01 in `context` (before any CURVE server socket
  // of that context binds) and starts answering.
  ZapHandler(zmq::context_t& context, AllowList allowed, Log log);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

 private:
  void serve();
  void answer(std::vector<zmq::message_t>& request);

  zmq::socket_t socket_;
  const AllowList allowed_;
  const Log log_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The role a message came with: the User-Id the ZAP handler gave its
// connection, or nullopt when it has none (no CURVE, or not a role).
std::optional<Role> role_of(const zmq::message_t& message);

// The client a message came from, when its connection's key is a client's:
// the key (Z85), and whether it is an administrator's.
struct ClientIdentity {
  std::string key;
  bool admin = false;
};
std::optional<ClientIdentity> client_of(const zmq::message_t& message);
// The worker id the connection's key is bound to (allow list: worker-id=),
// or nullopt.
std::optional<std::string> bound_worker_id(const zmq::message_t& message);
// The public key of a worker's connection, or nullopt.
std::optional<std::string> worker_key_of(const zmq::message_t& message);

}  // namespace forktrial::transport

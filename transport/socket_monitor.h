// ZeroMQ's socket monitor, read without blocking: what a connecting socket
// otherwise retries silently (a refused connection, a handshake the peer's
// ZAP handler refused), so that a client or a worker can say it at once.
//
// Header only: the lean front end links it without the rest of transport.
// Not thread-safe: the monitor socket belongs to the watched socket's thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <zmq.hpp>

namespace forktrial::transport {

struct MonitorEvent {
  std::uint16_t event = 0;  // ZMQ_EVENT_*
  std::uint32_t value = 0;  // its value: an errno, a ZAP status code, a protocol error
};

// A PAIR socket in `context` that receives `events` of `watched`, through
// the inproc `address` (unique within the context); nullopt when ZeroMQ
// cannot monitor it (the caller then does without).
inline std::optional<zmq::socket_t> monitor_socket(zmq::context_t& context, zmq::socket_t& watched,
                                                   const std::string& address, int events) {
  if (zmq_socket_monitor(watched.handle(), address.c_str(), events) != 0) return std::nullopt;
  zmq::socket_t monitor(context, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(address);
  return monitor;
}

// The next event that has come, or nullopt when none has.
inline std::optional<MonitorEvent> next_event(zmq::socket_t& monitor) {
  zmq::message_t head;
  if (!monitor.recv(head, zmq::recv_flags::dontwait)) return std::nullopt;
  MonitorEvent got;
  if (head.size() >= 6) {
    std::memcpy(&got.event, head.data(), 2);
    std::memcpy(&got.value, static_cast<const char*>(head.data()) + 2, 4);
  }
  zmq::message_t address;  // the endpoint, a second frame
  while (monitor.get(zmq::sockopt::rcvmore)) (void)monitor.recv(address);
  return got;
}

}  // namespace forktrial::transport

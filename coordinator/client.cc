#include "coordinator/client.h"

#include <netdb.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <zmq.hpp>

#include "schema/wire_codec.h"
#include "transport/socket_monitor.h"

namespace forktrial::coordinator {

using schema::wire::Envelope;

struct Client::Impl {
  zmq::context_t context;
  zmq::socket_t socket{context, zmq::socket_type::dealer};
  std::chrono::milliseconds timeout;
  std::uint64_t request_id = 0;
  std::string endpoint;
  bool curve = false;
  std::function<bool()> interrupted;
  World* world = nullptr;
  // What ZeroMQ's monitor says of the connection, which it otherwise
  // retries silently: whether one was ever made, whether the last attempt
  // was refused, and a handshake that cannot succeed (keys on one side
  // only), which ends every call at once. Declared after `socket`, so it
  // closes first.
  std::optional<zmq::socket_t> monitor;
  bool watching = false;
  bool connected = false;
  std::optional<Status> hopeless;
  // Since when every connection was refused, none ever made (none: one was
  // made, or none refused yet); past `refused_grace` of that a call ends at
  // once (no grace: at its deadline).
  std::optional<std::chrono::steady_clock::time_point> refused_since;
  std::optional<std::chrono::milliseconds> refused_grace = kRefusedGrace;

  void watch() {
    constexpr const char* kAddress = "inproc://forktrial-client-monitor";
    const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                       ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
    monitor = transport::monitor_socket(context, socket, kAddress, events);  // best effort
    watching = monitor.has_value();
  }

  // When a call gives up on a coordinator that refuses every connection,
  // if it does.
  std::optional<std::chrono::steady_clock::time_point> refusal_deadline() const {
    if (!refused_grace || !refused_since) return std::nullopt;
    return *refused_since + *refused_grace;
  }

  Status nothing_listens(std::chrono::milliseconds refused_for) const {
    return Status{ErrorCode::unavailable,
                  "nothing listens at " + endpoint + ": every connection was refused for " +
                      std::to_string(refused_for.count()) +
                      " ms; start the coordinator there, or check the endpoint (the "
                      "coordinator's --listen)"};
  }

  // Reads the monitor's events that have come.
  void read_events() {
    while (const auto next = transport::next_event(*monitor)) {
      const auto [event, value] = *next;
      if (event == ZMQ_EVENT_CONNECTED || event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
        connected = true;
        refused_since.reset();
      } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
        if (!connected && !refused_since) refused_since = world->monotonic_now();
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        // The coordinator's ZAP handler refused this client's key (it says
        // which in its log); every later handshake would be refused too.
        hopeless = Status{ErrorCode::failed_precondition,
                          "the coordinator at " + endpoint +
                              " refused this client's key: its public key is not in the "
                              "coordinator's --allow-clients or --admin-clients (its log names "
                              "the key it refused); add it there and restart the coordinator, or "
                              "give --key the keypair of a listed client"};
      } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
                 value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        hopeless = Status{
            ErrorCode::failed_precondition,
            curve ? "the coordinator at " + endpoint +
                        " has no keys (it speaks plain ZeroMQ) and this client speaks CurveZMQ: "
                        "leave out --key and --coordinator-key, or start the coordinator with "
                        "its keys"
                  : "the coordinator at " + endpoint +
                        " speaks CurveZMQ and this client has no keys: give --key FILE (this "
                        "client's keypair, its public key in the coordinator's --allow-clients) "
                        "and --coordinator-key KEY (docs/cluster.md, \"Keys\")"};
      }
    }
  }

  // How often a call is sent again while no answer comes; it is also sent
  // again, after a new hello, when the coordinator says it does not know
  // this client (it restarted), so a `wait` rides out a restart. Requests
  // that change nothing when repeated (status, results, workers, cancel,
  // findMissing) are resent each second; a submission, which its token
  // makes safe to repeat and which the coordinator may take seconds to
  // check, every 10 s; uploads never.
  using Resend = std::chrono::milliseconds;
  static constexpr Resend kNever{0};
  static constexpr Resend kIdempotent{1000};
  static constexpr Resend kSubmission{10000};

  // Sends the envelope `fill` builds and returns the answer to it; answers
  // to earlier, abandoned requests are skipped.
  // A request the coordinator may hold (`held`: a status waiting for its
  // job to finish) has that much more time, and is sent again that much
  // later.
  wire::Frame call(const std::function<void(Envelope::Builder)>& fill, Resend resend = kNever,
                   std::chrono::milliseconds held = {}) {
    wire::MessageBuilder message;
    const std::uint64_t id = ++request_id;
    fill(wire::start(message, id));
    const std::string frame = wire::encode(message);
    // Never blocking: ZeroMQ holds a send while it has no connection to give
    // it to (the coordinator down, or a handshake it refuses), and a call
    // must end by its deadline. What could not be sent is sent again at the
    // next resend, or the call ends unanswered.
    auto send = [&](const std::string& bytes) {
      (void)socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
    };
    send(frame);
    auto sent = world->monotonic_now();
    const auto deadline = sent + timeout + held;
    if (resend != kNever) resend += held;
    bool said_hello = false;
    auto send_again = [&](bool hello_first) {
      if (hello_first) {
        wire::MessageBuilder hello;
        wire::start(hello, ++request_id).setClientHello();
        send(wire::encode(hello));
      }
      send(frame);
      sent = world->monotonic_now();
    };
    for (;;) {
      const auto now = world->monotonic_now();
      auto until = resend == kNever ? deadline : std::min(deadline, sent + resend);
      // With a caller's check, it is asked at least every kInterruptCheck
      // too: what it watches (a daemon the caller started, say) may end
      // without a signal.
      if (interrupted) until = std::min(until, now + kInterruptCheck);
      if (const auto gives_up = refusal_deadline()) until = std::min(until, *gives_up);
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - now);
      zmq::pollitem_t items[] = {{socket.handle(), 0, ZMQ_POLLIN, 0},
                                 {watching ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
      int ready = 0;
      try {
        ready = left.count() <= 0 ? 0 : zmq::poll(items, watching ? 2 : 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
        if (interrupted && interrupted()) {
          throw Error(ErrorCode::cancelled, "stopped while waiting for the coordinator");
        }
        continue;  // a signal the caller does not stop for
      }
      if (watching && (items[1].revents & ZMQ_POLLIN) != 0) read_events();
      if (const auto gives_up = refusal_deadline();
          gives_up && world->monotonic_now() >= *gives_up) {
        throw Error(nothing_listens(*refused_grace));
      }
      if (watching && (items[1].revents & ZMQ_POLLIN) != 0) {
        if (hopeless) throw Error(*hopeless);
        if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      }
      if (ready == 0 && interrupted && world->monotonic_now() < deadline &&
          (resend == kNever || world->monotonic_now() < sent + resend)) {
        if (interrupted())
          throw Error(ErrorCode::cancelled, "stopped while waiting for the coordinator");
        continue;
      }
      if (ready == 0) {
        if (resend != kNever && world->monotonic_now() < deadline) {
          send_again(false);
          continue;
        }
        if (watching) read_events();
        if (refused_since) {
          // Nothing listens there; a coordinator starting would have bound
          // its socket by now.
          throw Error(nothing_listens(timeout));
        }
        throw Error(ErrorCode::unavailable,
                    "the coordinator at " + endpoint + " did not answer within " +
                        std::to_string(timeout.count()) + " ms; is a coordinator listening there?" +
                        (curve ? " With keys, a coordinator that does not list this client's "
                                 "public key in --allow-clients, or whose key is not the one "
                                 "given with --coordinator-key, never answers: its log says so."
                               : ""));
      }
      zmq::message_t reply;
      if (!socket.recv(reply, zmq::recv_flags::none)) continue;
      auto decoded = wire::decode(reply.to_string_view());
      if (!decoded) {
        throw Error(ErrorCode::internal,
                    "the coordinator sent an unreadable answer: " + decoded.error().message);
      }
      const auto envelope = decoded->envelope();
      if (envelope.getRequestId() != id) continue;
      if (envelope.which() == Envelope::ERROR) {
        const Status error = wire::status_of(envelope.getError());
        if (error.code == ErrorCode::failed_precondition && resend != kNever && !said_hello &&
            world->monotonic_now() < deadline) {
          // A restarted coordinator: hello again, then ask again, once; the
          // same answer after a hello is the coordinator's.
          said_hello = true;
          send_again(true);
          continue;
        }
        throw Error(error);  // the coordinator's category, as it sent it
      }
      return std::move(*decoded);
    }
  }
};

namespace {

// Why the host of a tcp:// endpoint cannot be reached, when the system can
// tell at once (a name that does not resolve: not_found; a resolver that
// cannot answer now: unavailable); none otherwise. ZeroMQ would retry it
// silently until the timeout. A refused connection is not told here: a
// coordinator that is starting or restarting refuses for a moment.
std::optional<Status> unresolvable(const std::string& endpoint) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return std::nullopt;
  std::string host = endpoint.substr(kTcp.size());
  if (const auto colon = host.rfind(':'); colon != std::string::npos) host.resize(colon);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "*" || host.find(';') != std::string::npos) return std::nullopt;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  bool unknown = rc == EAI_NONAME || rc == EAI_FAIL;
#ifdef EAI_NODATA
  unknown = unknown || rc == EAI_NODATA;
#endif
  if (!unknown && rc != EAI_AGAIN) return std::nullopt;
  return Status{unknown ? ErrorCode::not_found : ErrorCode::unavailable,
                "the coordinator's host \"" + host + "\" does not resolve (" +
                    std::string(::gai_strerror(rc)) + "); check the endpoint " + endpoint};
}

}  // namespace

Client::Client(const std::string& endpoint, std::chrono::milliseconds timeout,
               const std::optional<transport::ClientKeys>& keys, World& world)
    : impl_(std::make_unique<Impl>()) {
  impl_->world = &world;
  impl_->timeout = timeout;
  impl_->endpoint = endpoint;
  if (auto why = unresolvable(endpoint)) throw Error(*why);
  if (keys) {
    transport::make_curve_client(impl_->socket, *keys);
    impl_->curve = true;
  }
  impl_->socket.set(zmq::sockopt::linger, 0);
  // ZeroMQ retries a refused connection every 100 ms by default: 10 ms lets
  // a client started beside its coordinator (forktrial batch) in at once.
  impl_->socket.set(zmq::sockopt::reconnect_ivl, 10);
  impl_->socket.set(zmq::sockopt::reconnect_ivl_max, 1000);
  impl_->watch();
  try {
    impl_->socket.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::invalid_argument,
                "cannot connect to " + endpoint + ": " + e.what() +
                    "; give an endpoint such as tcp://host:7600 or ipc:///path/to/socket");
  }
  impl_->call([](Envelope::Builder envelope) { envelope.setClientHello(); }, Impl::kIdempotent);
}

Client::~Client() = default;

void Client::set_refused_grace(std::optional<std::chrono::milliseconds> grace) {
  impl_->refused_grace = grace;
}

void Client::set_interrupted(std::function<bool()> interrupted) {
  impl_->interrupted = std::move(interrupted);
}

std::vector<Digest> Client::find_missing(const std::vector<Digest>& digests) {
  auto frame = impl_->call(
      [&](Envelope::Builder envelope) {
        auto list = envelope.initFindMissing().initDigests(static_cast<unsigned>(digests.size()));
        for (unsigned i = 0; i < digests.size(); ++i) wire::set_digest(list[i], digests[i]);
      },
      Impl::kIdempotent);
  std::vector<Digest> missing;
  for (auto d : frame.envelope().getMissing().getDigests()) {
    if (auto digest = wire::digest_of(d)) missing.push_back(*digest);
  }
  return missing;
}

void Client::put_blob(const Digest& digest, const std::string& bytes) {
  std::uint64_t offset = 0;
  do {
    const std::size_t length =
        std::min<std::size_t>(bytes.size() - offset, schema::wire::K_MAX_CHUNK_BYTES);
    impl_->call([&](Envelope::Builder envelope) {
      auto chunk = envelope.initPutBlob();
      wire::set_digest(chunk.initDigest(), digest);
      chunk.setTotalSize(bytes.size());
      chunk.setOffset(offset);
      chunk.setBytes(
          capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(bytes.data()) + offset, length));
    });
    offset += length;
  } while (offset < bytes.size());
}

SubmittedJob Client::submit(const std::string& name, int priority,
                            const std::vector<std::string>& trials,
                            const std::vector<BundleBlob>& bundles, std::size_t max_part_bytes,
                            std::optional<RetentionPolicy> retention, bool no_cache) {
  // What a spec costs in a message: its text, rounded up to words, and its
  // list pointer. The parts: consecutive runs of specs, each within
  // max_part_bytes (a part holds one spec at least). A spec larger than a
  // message can be is refused before anything is sent.
  const auto cost = [](const std::string& trial) -> std::uint64_t {
    return (trial.size() + 1 + 7) / 8 * 8 + 8;
  };
  std::vector<std::pair<std::size_t, std::size_t>> parts;  // [begin, end)
  std::uint64_t part_bytes = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    if (cost(trials[i]) + (std::uint64_t{1} << 20) > wire::kDefaultMaxFrameBytes) {
      throw Error(ErrorCode::invalid_argument,
                  "trial " + std::to_string(i) + "'s specification is " +
                      std::to_string(trials[i].size() >> 20) +
                      " MiB, more than one message to "
                      "the coordinator may hold (" +
                      std::to_string(wire::kDefaultMaxFrameBytes >> 20) +
                      " MiB); nothing was submitted");
    }
    if (parts.empty() || part_bytes + cost(trials[i]) > max_part_bytes) {
      parts.emplace_back(i, i);
      part_bytes = 0;
    }
    parts.back().second = i + 1;
    part_bytes += cost(trials[i]);
  }
  if (parts.empty()) parts.emplace_back(0, 0);
  // The submission's name: sent again after a lost answer or a coordinator
  // restart, it cannot make a second job; in parts, it binds them together.
  char token[17];
  std::snprintf(token, sizeof token, "%016llx",
                static_cast<unsigned long long>(impl_->world->random64()));
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto [begin, end] = parts[p];
    auto frame = impl_->call(
        [&](Envelope::Builder envelope) {
          auto job = envelope.initSubmitJob();
          job.setToken(token);
          job.setName(name);
          job.setPriority(priority);
          if (retention) {
            job.setKeepForks(std::string(keep_forks_name(retention->keep)));
            job.setKeepForksAfterMillis(static_cast<std::uint64_t>(retention->after.count()));
          }
          job.setNoCache(no_cache);
          if (parts.size() > 1) {
            job.setPart(static_cast<std::uint32_t>(p));
            job.setParts(static_cast<std::uint32_t>(parts.size()));
          }
          auto specs = job.initSpecs(static_cast<unsigned>(end - begin));
          for (std::size_t i = begin; i < end; ++i) {
            specs.set(static_cast<unsigned>(i - begin), trials[i]);
          }
          auto list = job.initBundles(static_cast<unsigned>(bundles.size()));
          for (unsigned i = 0; i < bundles.size(); ++i) {
            wire::set_digest(list[i].initPin(), bundles[i].pin);
            wire::set_digest(list[i].initArchive(), bundles[i].archive);
          }
        },
        Impl::kSubmission);
    if (p + 1 < parts.size()) continue;  // answered ok
    auto accepted = frame.envelope().getJobAccepted();
    return {wire::text(accepted.getJob()), accepted.getTotal()};
  }
  throw Error(ErrorCode::internal, "a submission of no parts");
}

nlohmann::ordered_json Client::status(const std::string& job, std::chrono::milliseconds hold) {
  hold = std::clamp(hold, std::chrono::milliseconds{0}, kMaxStatusHold);
  auto frame = impl_->call(
      [&](Envelope::Builder envelope) {
        auto query = envelope.initStatusRequest();
        query.setJob(job);
        query.setHoldMillis(static_cast<std::uint32_t>(hold.count()));
      },
      Impl::kIdempotent, hold);
  return nlohmann::ordered_json::parse(wire::text(frame.envelope().getJobStatus().getText()));
}

nlohmann::ordered_json Client::cancel(const std::string& job) {
  auto frame = impl_->call(
      [&](Envelope::Builder envelope) { envelope.initCancelJob().setJob(job); }, Impl::kIdempotent);
  return nlohmann::ordered_json::parse(wire::text(frame.envelope().getJobStatus().getText()));
}

ResultsPage Client::results(const std::string& job, std::uint32_t after, std::uint32_t limit) {
  auto frame = impl_->call(
      [&](Envelope::Builder envelope) {
        auto request = envelope.initResultsRequest();
        request.setJob(job);
        request.setAfter(after);
        request.setLimit(limit);
      },
      Impl::kIdempotent);
  auto results = frame.envelope().getResults();
  ResultsPage page;
  for (auto line : results.getLines()) page.lines.push_back(wire::text(line));
  page.next = results.getNext();
  page.total = results.getTotal();
  return page;
}

nlohmann::ordered_json Client::import_run(const std::string& bytes, const std::string& run_id,
                                          const std::string& label, const std::string& fork_of,
                                          const std::string& at) {
  const Digest digest = Sha256::of(bytes);
  if (!find_missing({digest}).empty()) put_blob(digest, bytes);
  auto frame = impl_->call(
      [&](Envelope::Builder envelope) {
        auto request = envelope.initImportRun();
        wire::set_digest(request.initBlob(), digest);
        request.setRunId(run_id);
        request.setLabel(label);
        request.setForkOf(fork_of);
        request.setAt(at);
      },
      Impl::kIdempotent);
  return nlohmann::ordered_json::parse(wire::text(frame.envelope().getRunImported().getText()));
}

nlohmann::ordered_json Client::workers() {
  auto frame = impl_->call([](Envelope::Builder envelope) { envelope.setWorkersRequest(); },
                           Impl::kIdempotent);
  return nlohmann::ordered_json::parse(wire::text(frame.envelope().getWorkers().getText()));
}

}  // namespace forktrial::coordinator

#include "coordinator/server.h"

#include "coordinator/server_impl.h"

namespace forktrial::coordinator {
namespace detail {

namespace {

store::WriterLock take_writer_lock(const std::filesystem::path& store) {
  auto lock = store::WriterLock::take(store, "coordinator");
  if (!lock) throw Error(lock.error());
  return std::move(*lock);
}

}  // namespace

Server::Server(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log,
               bool listen)
    : config_(config),
      world_(config.world != nullptr ? *config.world : real_world()),
      stop_(stop),
      log_(log),
      lock_(take_writer_lock(config.store)),
      store_(config.store, coordinator_store_options(world_, config)),
      uploads_(config.store / "uploads", config.uploads),
      scheduler_(config.scheduler) {
  if (listen) {
    socket_.emplace(context_, zmq::socket_type::router);
    socket_->set(zmq::sockopt::router_mandatory, 1);
    socket_->set(zmq::sockopt::sndtimeo, 100);
    socket_->set(zmq::sockopt::linger, 0);
    socket_->set(zmq::sockopt::maxmsgsize, static_cast<std::int64_t>(config.max_frame_bytes));
    if (config.curve_key) {
      // The handler is bound before the socket, which asks it about every
      // handshake from then on.
      zap_.emplace(context_, config.allowed, log);
      transport::make_curve_server(*socket_, *config.curve_key);
    }
    for (const auto& [key, admitted] : config.allowed) {
      if (!admitted.worker_id.empty()) bound_ids_.insert(admitted.worker_id);
    }
    socket_->bind(config.listen);
  }
  recover();
  look_at_store();
  if (listen && config.http) {
    auto routes = probes_.routes();
    routes.push_back(transport::metrics_route(metrics_.registry()));
    for (auto& route : status_page_routes(api_)) routes.push_back(std::move(route));
    http_.emplace(*config.http, std::move(routes), log);
    log_(LogLevel::info, "coordinator serving HTTP on http://" + http_->address().str() + "/");
  }
}

int Server::run() {
  log_(LogLevel::info, "coordinator listening on " + config_.listen);
  while (!stop_.cancelled()) {
    zmq::pollitem_t items[] = {{socket_->handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, stop_.fd(), ZMQ_POLLIN, 0},
                               {nullptr, api_.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 3, config_.tick);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;  // a signal: the loop looks at `stop`
    }
    look_at_store();
    const Instant now = clock_now();
    for (std::size_t i = 0; i < kMaxMessagesPerTurn && receive_one(now); ++i) {
    }
    gather();
    end_turn();
    // Between turns, with everything decided so far committed: the status
    // API's questions (docs/decisions/0067-status-page-asks-loop.md).
    api_.serve([this](const transport::HttpRequest& request) { return answer_api(request); });
  }
  api_.close();
  log_(LogLevel::info, "coordinator stopping");
  return 0;
}

void Server::gather() {
  if (!uncommitted() || config_.commit_window.count() <= 0) return;
  const auto until = world_.monotonic_now() + config_.commit_window;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - world_.monotonic_now() + std::chrono::microseconds(999));
    if (left.count() <= 0 || stop_.cancelled()) break;
    zmq::pollitem_t items[] = {{nullptr, stop_.fd(), ZMQ_POLLIN, 0}};
    try {
      // zmq_poll counts in milliseconds: the wait is rounded up.
      zmq::poll(items, 1, left);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
  const Instant now = clock_now();
  for (std::size_t taken = 0; taken < kMaxMessagesPerTurn && receive_one(now); ++taken) {
  }
}

std::vector<std::pair<std::string, std::string>> Server::turn(
    std::span<const CoordinatorCore::Frame> frames) {
  look_at_store();
  for (const auto& frame : frames) take(frame.route, frame.bytes, std::nullopt, clock_now());
  end_turn();
  return std::exchange(outbox_, {});
}

void Server::send_to(const std::string& route, const std::string& frame) {
  std::string why;
  try {
    if (socket_->send(zmq::buffer(route), zmq::send_flags::sndmore) &&
        socket_->send(zmq::buffer(frame), zmq::send_flags::none)) {
      return;
    }
    why = "its queue is full";
  } catch (const zmq::error_t& e) {
    why = e.num() == EHOSTUNREACH ? "it is gone" : e.what();
  }
  ++undelivered_;
  metrics_.undelivered();
  auto it = peers_.find(route);
  const std::string who = it == peers_.end() ? "a peer"
                          : it->second.role == Peer::Role::worker
                              ? "worker " + it->second.worker.str()
                              : "a client";
  log_(LogLevel::warn, "a reply to " + who + " was not delivered (" + why + "); " +
                           std::to_string(undelivered_) + " so far");
}

void Server::reply(const std::string& route, std::string frame) {
  outbox_.emplace_back(route, std::move(frame));
}

void Server::reply_error(const std::string& route, std::uint64_t request, const Status& status) {
  ++errors_;
  metrics_.rejected(status.code);
  reply(route, wire::error_frame(request, status));
}

void Server::reply_error(const std::string& route, std::uint64_t request, ErrorCode code,
                         const std::string& message) {
  reply_error(route, request, Status{code, message});
}

bool Server::receive_one(Instant now) {
  std::vector<zmq::message_t> parts;
  zmq::message_t part;
  if (!socket_->recv(part, zmq::recv_flags::dontwait)) return false;
  const std::string route = part.to_string();
  std::string frame;
  std::optional<transport::Role> role;
  bound_id_.reset();
  client_.reset();
  std::size_t count = 1;
  while (part.more()) {
    if (!socket_->recv(part, zmq::recv_flags::none)) break;
    if (++count == 2) {
      frame = part.to_string();
      if (zap_) {
        role = transport::role_of(part);
        bound_id_ = transport::bound_worker_id(part);
        worker_key_ = transport::worker_key_of(part);
        client_ = transport::client_of(part);
      }
    }
  }
  if (count != 2) {
    reply_error(route, 0, ErrorCode::invalid_argument, "a message is one frame");
    return true;
  }
  take(route, frame, role, now);
  return true;
}

void Server::take(const std::string& route, std::string_view frame,
                  std::optional<transport::Role> role, Instant now) {
  auto decoded = wire::decode(frame, config_.max_frame_bytes);
  if (!decoded) return reply_error(route, 0, decoded.error().code, decoded.error().message);
  const auto envelope = decoded->envelope();
  if (zap_) {
    // What a connection may say follows its key's role, message by
    // message: a routing id a peer chose cannot borrow another's role.
    const auto needed = wire::is_worker_message(envelope.which()) ? transport::Role::worker
                                                                  : transport::Role::client;
    if (role != needed) {
      const std::string has =
          role ? "a " + std::string(transport::role_name(*role)) + "'s" : "of no role";
      reply_error(route, envelope.getRequestId(), ErrorCode::failed_precondition,
                  "this connection's key is " + has + ": a " +
                      std::string(transport::role_name(needed)) +
                      "'s message is refused (the coordinator's --allow-workers and "
                      "--allow-clients say which key is which)");
      return;
    }
  }
  try {
    handle(route, envelope, now);
  } catch (const store::StoreFull& e) {
    store_full(e.what());
    reply_busy(route, envelope.getRequestId());
  } catch (const kj::Exception& e) {
    reply_error(route, envelope.getRequestId(), ErrorCode::invalid_argument,
                std::string("the message cannot be read: ") + e.getDescription().cStr());
  } catch (const nlohmann::json::exception& e) {
    reply_error(route, envelope.getRequestId(), ErrorCode::invalid_argument,
                std::string("the message holds JSON that cannot be read: ") + e.what());
  }
}

void Server::handle(const std::string& route, Envelope::Reader envelope, Instant now) {
  const std::uint64_t request = envelope.getRequestId();
  const auto which = envelope.which();
  if (which == Envelope::WORKER_HELLO) return on_worker_hello(route, envelope, now);
  if (which == Envelope::CLIENT_HELLO) {
    peers_[route] = Peer{Peer::Role::client, WorkerId("")};
    return reply_ok(route, request);
  }
  auto peer = peers_.find(route);
  if (peer == peers_.end()) {
    return reply_error(route, request, ErrorCode::failed_precondition,
                       "say hello first (workerHello or clientHello)");
  }
  if (writes(which)) turn_writes_.emplace(route, request);
  if (store_full_ && writes(which)) {
    // A heartbeat is answered (no lease lapses while the store is full).
    if (which == Envelope::HEARTBEAT) return reply_ok(route, request);
    return reply_busy(route, request);
  }
  if (peer->second.role == Peer::Role::worker) {
    const WorkerId& worker = peer->second.worker;
    switch (which) {
      case Envelope::REQUEST_WORK:
        return on_request_work(route, worker, envelope, now);
      case Envelope::HEARTBEAT:
        return on_heartbeat(route, worker, envelope, now);
      case Envelope::REPORT:
        return on_report(route, worker, envelope, now);
      case Envelope::ATTEMPT_FAILED:
        return on_attempt_failed(route, worker, envelope, now);
      case Envelope::FETCH_BLOB:
        return on_fetch(route, envelope);
      case Envelope::WORKER_GOODBYE:
        return on_worker_goodbye(route, worker, envelope, now);
      default:
        return reply_error(route, request, ErrorCode::invalid_argument,
                           "a worker may not send this message");
    }
  }
  switch (which) {
    case Envelope::FIND_MISSING:
      return on_find_missing(route, envelope);
    case Envelope::PUT_BLOB:
      return on_put_blob(route, envelope, now);
    case Envelope::SUBMIT_JOB:
      return on_submit(route, envelope, now);
    case Envelope::STATUS_REQUEST:
      return on_status(route, envelope);
    case Envelope::CANCEL_JOB:
      return on_cancel(route, envelope, now);
    case Envelope::RESULTS_REQUEST:
      return on_results(route, envelope);
    case Envelope::WORKERS_REQUEST:
      return on_workers(route, request);
    case Envelope::IMPORT_RUN:
      return on_import_run(route, envelope);
    default:
      return reply_error(route, request, ErrorCode::invalid_argument,
                         "a client may not send this message");
  }
}

void Server::reply_ok(const std::string& route, std::uint64_t request) {
  wire::MessageBuilder message;
  wire::start(message, request).setOk();
  reply(route, wire::encode(message));
}

}  // namespace detail

using detail::Server;

int run_coordinator(const ServerConfig& config, const sandbox::Cancellation& stop, const Log& log) {
  Server server(config, stop, log);
  return server.run();
}

std::vector<SetAside> repair_log(const ServerConfig& config, const Log& log) {
  sandbox::Cancellation stop;
  Server server(config, stop, log, false);
  return server.repair();
}

struct CoordinatorCore::Impl {
  Impl(const ServerConfig& given, const Log& log, std::uint64_t seed, Instant start)
      : world(seed, std::chrono::system_clock::time_point{start.time_since_epoch()}),
        config(with_world(given, world)),
        server(config, stop, log, false) {}
  static ServerConfig with_world(ServerConfig config, World& world) {
    config.world = &world;
    return config;
  }
  VirtualWorld world;
  const ServerConfig config;   // the caller's, with `world`
  sandbox::Cancellation stop;  // never cancelled: the caller stops by destroying
  Server server;
};

CoordinatorCore::CoordinatorCore(const ServerConfig& config, const Log& log, std::uint64_t seed,
                                 Instant start)
    : impl_(std::make_unique<Impl>(config, log, seed, start)) {}
CoordinatorCore::~CoordinatorCore() = default;

std::vector<std::pair<std::string, std::string>> CoordinatorCore::turn(const std::string& route,
                                                                       std::string_view frame,
                                                                       Instant now) {
  const Frame one{route, std::string(frame)};
  return turn(std::span(&one, 1), now);
}

std::vector<std::pair<std::string, std::string>> CoordinatorCore::turn(
    std::span<const Frame> frames, Instant now) {
  const auto wall = impl_->world.wall_now();
  if (now > wall) impl_->world.advance(now - wall);
  return impl_->server.turn(frames);
}

const Scheduler& CoordinatorCore::scheduler() const {
  return impl_->server.scheduler();
}

std::optional<TrialStatus> CoordinatorCore::archived_status(const TrialId& trial) const {
  return impl_->server.archived_status(trial);
}

VirtualWorld& CoordinatorCore::world() {
  return impl_->world;
}

}  // namespace forktrial::coordinator

// The public methods of the tcp engine (TcpEngine, tcp_engine_internal.h) and CreateTcpEngine.
// They run on the callers' threads: binding the ROUTER endpoint, exporting and importing
// descriptors (ImportPeer runs the handshake here), checking batches against the peer's regions
// and the per-peer queue limit, and handing Commands to the I/O thread (tcp_engine_io.cc).
#include "kvtransfer/tcp/tcp_engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/tcp/tcp_engine_internal.h"

namespace tandem::kv {
namespace tcp_internal {
namespace {

// A bound on one frame's payload that the receiver accepts (slices are at most this).
constexpr uint64_t kMaxFramePayload = 64ull << 20;

}  // namespace

TcpEngine::TcpEngine(EngineOptions options)
    : options_(std::move(options)), ctx_(1), server_(options_, &regions_, &counters_) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

TcpEngine::~TcpEngine() {
  Shutdown();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

EngineState TcpEngine::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

EngineStats TcpEngine::stats() const { return counters_.Snapshot(); }

absl::Status TcpEngine::RegisterRegion(const LocalRegion& region) {
  absl::MutexLock lock(&mu_);
  if (state_ != EngineState::kConfiguring) {
    return absl::FailedPreconditionError("tcp: regions are registered before Start()");
  }
  return regions_.Add(region);
}

absl::Status TcpEngine::Start() {
  absl::MutexLock lock(&mu_);
  if (state_ != EngineState::kConfiguring) {
    return absl::FailedPreconditionError("tcp: Start() called twice");
  }
  if (wake_fd_ < 0) return absl::InternalError("tcp: eventfd failed");
  std::string host =
      options_.advertise_host.empty() ? options_.listen_host : options_.advertise_host;
  if (host == "*" || host == "0.0.0.0") {
    return absl::InvalidArgumentError(
        "tcp: listening on all interfaces needs an advertise host peers can reach");
  }
  try {
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    // ZMQ_MAXMSGSIZE is per socket, not per peer, so it must admit a member's largest slice;
    // a stranger can make ZMQ assemble messages that big, but the server drops them without
    // copying (a Hello or Auth longer than its limit is refused unread) and keeps no per-peer
    // state beyond the pending-handshake pool (TcpServer). Messages waiting in ZMQ's queues are
    // bounded by rcvhwm per connection.
    router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFramePayload));
    router_.set(zmq::sockopt::handshake_ivl, kZmqHandshakeMs);
    router_.set(zmq::sockopt::sndhwm, 1 << 20);
    router_.set(zmq::sockopt::rcvhwm, 4096);
    router_.set(zmq::sockopt::heartbeat_ivl, HeartbeatMs());
    router_.set(zmq::sockopt::heartbeat_timeout, 3 * HeartbeatMs());
    router_.set(zmq::sockopt::rcvbuf, 4 << 20);
    router_.set(zmq::sockopt::sndbuf, 4 << 20);
    std::string port = options_.listen_port == 0 ? "*" : std::to_string(options_.listen_port);
    router_.bind(absl::StrCat("tcp://", options_.listen_host, ":", port));
    std::string bound = router_.get(zmq::sockopt::last_endpoint);
    std::string bound_port = bound.substr(bound.rfind(':') + 1);
    endpoint_ = absl::StrCat("tcp://", host, ":", bound_port);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("tcp: cannot listen on ", options_.listen_host, ":",
                                               options_.listen_port, ": ", e.what()));
  }
  regions_.Freeze();
  state_ = EngineState::kServing;
  io_thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

absl::StatusOr<std::string> TcpEngine::ExportDescriptor() {
  if (state() != EngineState::kServing) {
    return absl::FailedPreconditionError("tcp: ExportDescriptor() before Start()");
  }
  Descriptor d;
  d.backend = "tcp";
  d.engine_name = options_.name;
  d.endpoints.push_back(endpoint_);
  for (const LocalRegion& r : regions_.regions()) {
    d.regions.push_back(RegionInfo{r.id, r.size, r.restricted, 0, 0});
  }
  d.compat = options_.compat;
  return EncodeDescriptor(d);
}

absl::StatusOr<PeerId> TcpEngine::ImportPeer(const std::string& descriptor) {
  if (state() != EngineState::kServing) {
    return absl::FailedPreconditionError("tcp: ImportPeer() before Start()");
  }
  ASSIGN_OR_RETURN(Descriptor d, DecodePeerDescriptor("tcp", descriptor, options_.compat));
  auto peer = std::make_unique<Peer>();
  peer->desc = d;
  PeerId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_peer_++;
  }
  peer->id = id;
  ClientOptions copts;
  copts.endpoint = d.endpoints[0];
  copts.local_name = options_.name;
  copts.peer_name = d.engine_name;
  copts.secret = options_.cluster_secret;
  copts.compat = options_.compat;
  copts.heartbeat_ms = HeartbeatMs();
  copts.monitor_prefix =
      absl::StrCat("inproc://tkv-monitor-", reinterpret_cast<uintptr_t>(this), "-", id);
  ASSIGN_OR_RETURN(peer->lanes, ConnectLanes(ctx_, copts, std::max(1, options_.lanes),
                                             absl::Now() + options_.handshake_timeout));
  peer->queues.resize(peer->lanes.size());
  {
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kServing) return absl::FailedPreconditionError("tcp: stopped");
    meta_[id] = PeerMeta{d, false, 0, static_cast<int>(peer->lanes.size()), 0};
    Command c{Command::kAddPeer};
    c.peer = id;
    c.new_peer = std::move(peer);
    commands_.push_back(std::move(c));
  }
  Wake();
  return id;
}

absl::Status TcpEngine::RemovePeer(PeerId peer) {
  {
    absl::MutexLock lock(&mu_);
    if (meta_.erase(peer) == 0) return absl::NotFoundError(absl::StrCat("tcp: no peer ", peer));
    Command c{Command::kRemovePeer};
    c.peer = peer;
    commands_.push_back(std::move(c));
  }
  Wake();
  return absl::OkStatus();
}

absl::Status TcpEngine::CheckPeer(PeerId peer) const {
  absl::MutexLock lock(&mu_);
  return CheckPeerLocked(peer);
}

absl::StatusOr<WindowId> TcpEngine::OpenWindow(const std::string& peer_name, RegionId region,
                                               uint64_t offset, uint64_t length) {
  return regions_.OpenWindow(peer_name, region, offset, length);
}

absl::Status TcpEngine::CloseWindow(WindowId window) { return regions_.CloseWindow(window); }

absl::StatusOr<SubmitResult> TcpEngine::Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                               SubmitOptions options) {
  if (ops.empty()) return absl::InvalidArgumentError("tcp: empty batch");
  uint64_t total = 0;
  for (const WriteOp& op : ops) {
    RETURN_IF_ERROR(regions_.LocalRange(op.local_region, op.local_offset, op.length).status(),
                    "tcp: ");
    total += op.length;
  }
  BatchId id;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckPeerLocked(peer));
    PeerMeta& m = meta_[peer];
    for (const WriteOp& op : ops) {
      const RegionInfo* remote = m.desc.FindRegion(op.remote_region);
      if (remote == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("tcp: peer '", m.desc.engine_name, "' has no region ", op.remote_region));
      }
      if (!RangeInside(op.remote_offset, op.length, remote->size)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tcp: remote range [", op.remote_offset, ", +", op.length, ") outside region ",
            op.remote_region, " of ", remote->size, " bytes on peer '", m.desc.engine_name, "'"));
      }
    }
    // An empty queue takes any batch, so a batch larger than the limit is never refused forever.
    if (m.queued_bytes > 0 && m.queued_bytes + total > options_.max_queued_bytes_per_peer) {
      return SubmitResult{};
    }
    Command c{Command::kSubmit};
    c.peer = peer;
    c.slices = PlanBatch(ops, options_.slice_bytes, m.lanes, m.next_lane);
    m.next_lane = (m.next_lane + 1) % m.lanes;
    c.batch = tracker_.Create(peer, total, std::move(options));
    m.queued_bytes += total;
    id = c.batch;
    commands_.push_back(std::move(c));
  }
  Wake();
  return SubmitResult{true, id};
}

absl::StatusOr<BatchId> TcpEngine::Notify(PeerId peer, const std::string& message,
                                          SubmitOptions options) {
  if (message.size() > kMaxNotifyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("tcp: notification of ", message.size(), " bytes exceeds ", kMaxNotifyBytes));
  }
  BatchId id;
  {
    absl::MutexLock lock(&mu_);
    RETURN_IF_ERROR(CheckPeerLocked(peer));
    id = tracker_.Create(peer, 0, std::move(options));
    Command c{Command::kNotify};
    c.peer = peer;
    c.batch = id;
    c.message = message;
    commands_.push_back(std::move(c));
  }
  Wake();
  return id;
}

absl::StatusOr<BatchStatus> TcpEngine::Poll(BatchId id) { return tracker_.Poll(id); }

absl::StatusOr<BatchStatus> TcpEngine::Wait(BatchId id, absl::Time until) {
  return tracker_.Wait(id, until);
}

absl::Status TcpEngine::Cancel(BatchId id) {
  ASSIGN_OR_RETURN(bool cancelled, tracker_.Cancel(id));
  if (cancelled) Wake();  // lets the I/O thread drop the batch's queued slices now
  return absl::OkStatus();
}

absl::Status TcpEngine::Release(BatchId id) { return tracker_.Release(id); }

void TcpEngine::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == EngineState::kStopped) return;
    state_ = EngineState::kStopped;
  }
  stop_ = true;
  Wake();
  if (io_thread_.joinable()) io_thread_.join();
  tracker_.FailPeer(0, absl::CancelledError("tcp: engine shut down"));
  router_.close();
}

int TcpEngine::HeartbeatMs() const {
  return static_cast<int>(
      std::max<int64_t>(100, absl::ToInt64Milliseconds(options_.heartbeat_interval)));
}

absl::Status TcpEngine::CheckPeerLocked(PeerId peer) const {
  if (state_ != EngineState::kServing) return absl::FailedPreconditionError("tcp: not serving");
  auto it = meta_.find(peer);
  if (it == meta_.end()) return absl::NotFoundError(absl::StrCat("tcp: no peer ", peer));
  if (it->second.dead) {
    return absl::UnavailableError(absl::StrCat("tcp: peer '", it->second.desc.engine_name,
                                               "' is dead (", it->second.death,
                                               "); import its descriptor again"));
  }
  return absl::OkStatus();
}

void TcpEngine::Wake() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

}  // namespace tcp_internal

absl::StatusOr<TransferEnginePtr> CreateTcpEngine(EngineOptions options) {
  if (options.name.empty() || options.name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("tcp: engine name must be 1..256 bytes");
  }
  RETURN_IF_ERROR(ValidateClusterSecret(options.cluster_secret), "tcp: ");
  if (options.slice_bytes == 0 || options.slice_bytes > (64ull << 20)) {
    return absl::InvalidArgumentError("tcp: slice_bytes must be in (0, 64 MiB]");
  }
  if (options.lanes < 1 || options.lanes > 64) {
    return absl::InvalidArgumentError("tcp: lanes must be in [1, 64]");
  }
  RETURN_IF_ERROR(ValidateConnectionLimits(options.connection_limits), "tcp: ");
  return TransferEnginePtr(new tcp_internal::TcpEngine(std::move(options)));
}

}  // namespace tandem::kv

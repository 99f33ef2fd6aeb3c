#include "kvtransfer/tcp/tcp_engine.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/batch_plan.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp/tcp_client.h"
#include "kvtransfer/tcp/tcp_server.h"
#include "kvtransfer/wire.h"

namespace tandem::kv {
namespace {

// One slice waiting for its lane (I/O thread). A flush replaces the remaining slices of a batch
// that ended (cancelled, timed out) after some of its slices were sent on this lane.
struct QueuedSlice {
  BatchId batch;
  RegionId region;
  uint64_t remote_offset;
  const uint8_t* data;
  uint64_t length;
  bool last_on_lane;
};

// Sender-side record of a running batch (I/O thread).
struct TxBatch {
  PeerId peer = 0;
  uint64_t seq = 0;  // submission order within the peer
  int lanes_unsettled = 0;
  std::vector<uint64_t> lane_bytes;
  std::vector<bool> lane_sent;
  std::vector<bool> lane_settled;
};

struct PendingNotify {
  BatchId id;
  uint64_t seq;  // sent once every batch with a smaller seq is settled
  std::string message;
};

struct Peer {
  PeerId id = 0;
  Descriptor desc;
  std::vector<ClientLane> lanes;
  std::vector<std::deque<QueuedSlice>> queues;
  std::set<uint64_t> unsettled;  // seqs of batches whose lanes have not all settled
  std::deque<PendingNotify> notifies;
  bool dead = false;
};

// Work handed from API threads to the I/O thread.
struct Command {
  enum Kind { kAddPeer, kSubmit, kNotify, kRemovePeer } kind;
  PeerId peer = 0;
  std::unique_ptr<Peer> new_peer;
  BatchId batch = 0;
  std::vector<PlannedSlice> slices;
  std::string message;
};

class TcpEngine final : public TransferEngine {
 public:
  explicit TcpEngine(EngineOptions options)
      : options_(std::move(options)), ctx_(1), server_(options_, &regions_, &counters_) {
    wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  ~TcpEngine() override {
    Shutdown();
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  EngineState state() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  EngineStats stats() const override { return counters_.Snapshot(); }

  absl::Status RegisterRegion(const LocalRegion& region) override {
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kConfiguring) {
      return absl::FailedPreconditionError("tcp: regions are registered before Start()");
    }
    return regions_.Add(region);
  }

  absl::Status Start() override {
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
      router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxFramePayload));
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
      return absl::UnavailableError(absl::StrCat("tcp: cannot listen on ", options_.listen_host,
                                                 ":", options_.listen_port, ": ", e.what()));
    }
    regions_.Freeze();
    state_ = EngineState::kServing;
    io_thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ExportDescriptor() override {
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

  absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) override {
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

  absl::Status RemovePeer(PeerId peer) override {
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

  absl::Status CheckPeer(PeerId peer) const override {
    absl::MutexLock lock(&mu_);
    return CheckPeerLocked(peer);
  }

  absl::StatusOr<WindowId> OpenWindow(const std::string& peer_name, RegionId region,
                                      uint64_t offset, uint64_t length) override {
    return regions_.OpenWindow(peer_name, region, offset, length);
  }
  absl::Status CloseWindow(WindowId window) override { return regions_.CloseWindow(window); }

  absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                      SubmitOptions options) override {
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
          return absl::InvalidArgumentError(absl::StrCat("tcp: peer '", m.desc.engine_name,
                                                         "' has no region ", op.remote_region));
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

  absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                 SubmitOptions options) override {
    if (message.size() > kMaxNotifyBytes) {
      return absl::InvalidArgumentError(absl::StrCat("tcp: notification of ", message.size(),
                                                     " bytes exceeds ", kMaxNotifyBytes));
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

  absl::StatusOr<BatchStatus> Poll(BatchId id) override { return tracker_.Poll(id); }
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) override {
    return tracker_.Wait(id, until);
  }
  absl::Status Cancel(BatchId id) override {
    ASSIGN_OR_RETURN(bool cancelled, tracker_.Cancel(id));
    if (cancelled) Wake();  // lets the I/O thread drop the batch's queued slices now
    return absl::OkStatus();
  }
  absl::Status Release(BatchId id) override { return tracker_.Release(id); }

  void Shutdown() override {
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

 private:
  // Small writes are packed into frames of up to this many payload bytes.
  static constexpr uint64_t kPackBytes = 1 << 20;
  // A bound on one frame's payload that the receiver accepts (slices are at most this).
  static constexpr uint64_t kMaxFramePayload = 64ull << 20;

  struct PeerMeta {
    Descriptor desc;
    bool dead = false;
    uint64_t queued_bytes = 0;
    int lanes = 1;
    int next_lane = 0;
    std::string death;
  };

  int HeartbeatMs() const {
    return static_cast<int>(
        std::max<int64_t>(100, absl::ToInt64Milliseconds(options_.heartbeat_interval)));
  }

  absl::Status CheckPeerLocked(PeerId peer) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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

  void Wake() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }

  // ---- I/O thread ----
  void Run();
  void TakeCommands();
  void ReadServer();
  void ReadLane(Peer& p, int lane);
  void ReadMonitor(Peer& p, int lane);
  void PumpLane(Peer& p, int lane);
  void PumpNotifies(Peer& p);
  // Sends the lane's leading small slices of one batch as one kWriteMulti frame; false if the
  // lane is full.
  bool SendPacked(Peer& p, int lane, TxBatch& tx);
  void SettleLane(BatchId id, int lane, bool acked);
  void KillPeer(Peer& p, const std::string& why);
  void ClosePeer(Peer& p);
  void DequeuedBytes(PeerId peer, uint64_t n);

  const EngineOptions options_;
  RegionTable regions_;
  BatchTracker tracker_;
  EngineCounters counters_;
  zmq::context_t ctx_;
  zmq::socket_t router_;  // I/O thread after Start()
  TcpServer server_;      // I/O thread
  std::string endpoint_;  // set in Start()
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread io_thread_;

  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kConfiguring;
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<PeerId, PeerMeta> meta_ ABSL_GUARDED_BY(mu_);
  std::vector<Command> commands_ ABSL_GUARDED_BY(mu_);

  // I/O thread only.
  std::map<PeerId, std::unique_ptr<Peer>> peers_;
  std::map<BatchId, TxBatch> tx_;
  uint64_t seq_counter_ = 0;
};

void TcpEngine::Run() {
  std::vector<zmq::pollitem_t> items;
  std::vector<std::pair<Peer*, int>> lane_of;  // poll item index -> (peer, lane)
  while (!stop_) {
    items.clear();
    lane_of.clear();
    items.push_back({router_.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    for (auto& [id, p] : peers_) {
      if (p->dead) continue;
      for (size_t l = 0; l < p->lanes.size(); ++l) {
        short events = ZMQ_POLLIN;
        if (!p->queues[l].empty() || (l == 0 && !p->notifies.empty())) events |= ZMQ_POLLOUT;
        items.push_back({p->lanes[l].socket.handle(), 0, events, 0});
        lane_of.push_back({p.get(), static_cast<int>(l)});
        items.push_back({p->lanes[l].monitor.handle(), 0, ZMQ_POLLIN, 0});
        lane_of.push_back({p.get(), -1 - static_cast<int>(l)});
      }
    }
    absl::Duration wait = absl::Milliseconds(100);
    absl::Time next = tracker_.NextDeadline();
    if (next != absl::InfiniteFuture()) {
      wait = std::clamp(next - absl::Now(), absl::ZeroDuration(), wait);
    }
    try {
      zmq::poll(items.data(), items.size(),
                std::chrono::milliseconds(absl::ToInt64Milliseconds(wait) + 1));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) spdlog::error("kv tcp: poll failed: {}", e.what());
      continue;
    }
    if (items[1].revents & ZMQ_POLLIN) {
      uint64_t v;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &v, sizeof(v));
    }
    TakeCommands();
    if (items[0].revents & ZMQ_POLLIN) ReadServer();
    for (size_t i = 2; i < items.size(); ++i) {
      auto [p, l] = lane_of[i - 2];
      if (p->dead || !(items[i].revents & ZMQ_POLLIN)) continue;
      if (l >= 0) {
        ReadLane(*p, l);
      } else {
        ReadMonitor(*p, -1 - l);
      }
    }
    tracker_.ExpireDeadlines(absl::Now());
    for (auto& [id, p] : peers_) {
      if (p->dead) continue;
      for (size_t l = 0; l < p->lanes.size() && !p->dead; ++l) PumpLane(*p, static_cast<int>(l));
      if (!p->dead) PumpNotifies(*p);
    }
    // Dead peers hold no sockets any more; their records go once no poll item points at them.
    std::erase_if(peers_, [](const auto& kv) { return kv.second->dead; });
  }
  for (auto& [id, p] : peers_) ClosePeer(*p);
  peers_.clear();
  tx_.clear();
}

void TcpEngine::TakeCommands() {
  std::vector<Command> commands;
  {
    absl::MutexLock lock(&mu_);
    commands.swap(commands_);
  }
  for (Command& c : commands) {
    if (c.kind == Command::kAddPeer) {
      peers_[c.peer] = std::move(c.new_peer);
      continue;
    }
    auto it = peers_.find(c.peer);
    if (c.kind == Command::kRemovePeer) {
      if (it != peers_.end()) KillPeer(*it->second, "peer removed");
      continue;
    }
    if (it == peers_.end() || it->second->dead) {
      tracker_.Finish(c.batch, BatchState::kFailed, absl::UnavailableError("tcp: peer is gone"));
      continue;
    }
    Peer& p = *it->second;
    const uint64_t seq = ++seq_counter_;
    if (c.kind == Command::kNotify) {
      p.notifies.push_back(PendingNotify{c.batch, seq, std::move(c.message)});
      continue;
    }
    TxBatch& tx = tx_[c.batch];
    tx.peer = p.id;
    tx.seq = seq;
    tx.lane_bytes.assign(p.lanes.size(), 0);
    tx.lane_sent.assign(p.lanes.size(), false);
    tx.lane_settled.assign(p.lanes.size(), true);
    for (const PlannedSlice& s : c.slices) {
      auto src = regions_.LocalRange(s.op.local_region, s.op.local_offset, s.op.length);
      p.queues[s.lane].push_back(QueuedSlice{c.batch, s.op.remote_region, s.op.remote_offset, *src,
                                             s.op.length, s.last_on_lane});
      tx.lane_bytes[s.lane] += s.op.length;
      if (tx.lane_settled[s.lane]) {
        tx.lane_settled[s.lane] = false;
        tx.lanes_unsettled++;
      }
    }
    p.unsettled.insert(seq);
  }
}

void TcpEngine::ReadServer() {
  // Bounded so that a flood on the server side cannot starve the sending side.
  for (int n = 0; n < 256; ++n) {
    std::vector<zmq::message_t> parts;
    while (true) {
      zmq::message_t m;
      auto r = router_.recv(m, zmq::recv_flags::dontwait);
      if (!r) break;
      bool more = m.more();
      if (parts.size() < 4) parts.push_back(std::move(m));
      if (!more) break;
    }
    if (parts.empty()) return;
    server_.HandleMessage(router_, parts);
  }
}

void TcpEngine::ReadLane(Peer& p, int lane) {
  for (int n = 0; n < 1024 && !p.dead; ++n) {
    std::vector<zmq::message_t> parts;
    while (true) {
      zmq::message_t m;
      auto r = p.lanes[lane].socket.recv(m, zmq::recv_flags::dontwait);
      if (!r) break;
      bool more = m.more();
      if (parts.size() < 3) parts.push_back(std::move(m));
      if (!more) break;
    }
    if (parts.empty()) return;
    if (parts.size() != 2) continue;
    auto h = ParseHeader(parts[0].data(), parts[0].size());
    if (!h.ok()) {
      counters_.frames_dropped++;
      continue;
    }
    switch (h->type) {
      case FrameType::kAck:
        SettleLane(h->batch, lane, true);
        break;
      case FrameType::kNack: {
        std::string reason = parts[1].to_string().substr(0, kMaxReasonBytes);
        auto code = static_cast<absl::StatusCode>(h->code);
        if (code == absl::StatusCode::kOk || h->code > 16) code = absl::StatusCode::kInternal;
        tracker_.Finish(h->batch, BatchState::kFailed,
                        absl::Status(code, absl::StrCat("peer '", p.desc.engine_name,
                                                        "' rejected a write: ", reason)));
        if (h->flags & kFlagAck) SettleLane(h->batch, lane, false);
        break;
      }
      case FrameType::kNotifyAck:
        tracker_.Finish(h->batch, BatchState::kCompleted);
        break;
      case FrameType::kReject:
        KillPeer(p, absl::StrCat("peer rejected the session: ",
                                 parts[1].to_string().substr(0, kMaxReasonBytes)));
        return;
      default:
        counters_.frames_dropped++;
    }
  }
}

void TcpEngine::ReadMonitor(Peer& p, int lane) {
  while (true) {
    zmq::message_t event, addr;
    if (!p.lanes[lane].monitor.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)p.lanes[lane].monitor.recv(addr, zmq::recv_flags::dontwait);
    if (event.size() < 2) continue;
    uint16_t kind;
    std::memcpy(&kind, event.data(), sizeof(kind));
    if (kind & (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)) {
      KillPeer(p, absl::StrCat("connection ", lane, " to ", p.desc.endpoints[0], " lost"));
      return;
    }
  }
}

void TcpEngine::PumpLane(Peer& p, int lane) {
  auto& q = p.queues[lane];
  zmq::socket_t& sock = p.lanes[lane].socket;
  while (!q.empty()) {
    QueuedSlice& s = q.front();
    auto tx_it = tx_.find(s.batch);
    if (tx_it == tx_.end()) {  // defensive: batch record already gone
      q.pop_front();
      continue;
    }
    TxBatch& tx = tx_it->second;
    const bool ended = tracker_.IsDone(s.batch);
    if (ended && !s.last_on_lane) {
      DequeuedBytes(p.id, s.length);
      q.pop_front();
      continue;
    }
    FrameHeader h;
    h.session = p.lanes[lane].session;
    h.batch = s.batch;
    if (ended) {
      // The batch's last slice on this lane: if nothing went out, the lane is settled;
      // otherwise a flush tells us when what did go out was processed.
      if (!tx.lane_sent[lane]) {
        DequeuedBytes(p.id, s.length);
        q.pop_front();
        SettleLane(h.batch, lane, false);
        continue;
      }
      h.type = FrameType::kFlush;
      auto header = EncodeHeader(h);
      if (!sock.send(zmq::buffer(header.data(), header.size()),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return;
      }
      sock.send(zmq::message_t(), zmq::send_flags::dontwait);
      DequeuedBytes(p.id, s.length);
      q.pop_front();
      continue;
    }
    if (s.length < kZeroCopyBytes && q.size() > 1 && q[1].batch == s.batch &&
        q[1].length < kZeroCopyBytes) {
      if (!SendPacked(p, lane, tx)) return;
      continue;
    }
    h.type = FrameType::kWrite;
    h.flags = s.last_on_lane ? kFlagAck : 0;
    h.region = s.region;
    h.offset = s.remote_offset;
    h.length = s.length;
    auto header = EncodeHeader(h);
    if (!sock.send(zmq::buffer(header.data(), header.size()),
                   zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;  // lane full: POLLOUT resumes it
    }
    // Once the first part is queued, ZMQ accepts the rest of the message.
    if (s.length >= kZeroCopyBytes) {
      // Constant message over registered memory: no copy, nothing to free.
      zmq::message_t body(const_cast<uint8_t*>(s.data), s.length, nullptr, nullptr);
      sock.send(body, zmq::send_flags::dontwait);
    } else {
      sock.send(zmq::message_t(s.data, s.length), zmq::send_flags::dontwait);
    }
    tx.lane_sent[lane] = true;
    tracker_.MarkInProgress(s.batch);
    DequeuedBytes(p.id, s.length);
    q.pop_front();
  }
}

bool TcpEngine::SendPacked(Peer& p, int lane, TxBatch& tx) {
  auto& q = p.queues[lane];
  const BatchId batch = q.front().batch;
  size_t n = 0;
  uint64_t payload = 0;
  bool ack = false;
  while (n < q.size() && n < kMaxPackedWrites && q[n].batch == batch &&
         q[n].length < kZeroCopyBytes && payload + q[n].length <= kPackBytes) {
    payload += q[n].length;
    ack = q[n].last_on_lane;
    ++n;
    if (ack) break;
  }
  const size_t size = 4 + n * kPackedEntryBytes + payload;
  FrameHeader h;
  h.type = FrameType::kWriteMulti;
  h.flags = ack ? kFlagAck : 0;
  h.session = p.lanes[lane].session;
  h.batch = batch;
  h.length = size;
  auto header = EncodeHeader(h);
  zmq::socket_t& sock = p.lanes[lane].socket;
  if (!sock.send(zmq::buffer(header.data(), header.size()),
                 zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
    return false;
  }
  zmq::message_t body(size);
  std::string dir;
  dir.reserve(4 + n * kPackedEntryBytes);
  WireWriter w(&dir);
  w.U32(static_cast<uint32_t>(n));
  for (size_t i = 0; i < n; ++i) {
    w.U32(q[i].region);
    w.U64(q[i].remote_offset);
    w.U64(q[i].length);
  }
  uint8_t* out = static_cast<uint8_t*>(body.data());
  std::memcpy(out, dir.data(), dir.size());
  out += dir.size();
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out, q[i].data, q[i].length);
    out += q[i].length;
  }
  sock.send(body, zmq::send_flags::dontwait);
  tx.lane_sent[lane] = true;
  tracker_.MarkInProgress(batch);
  DequeuedBytes(p.id, payload);
  q.erase(q.begin(), q.begin() + n);
  return true;
}

void TcpEngine::PumpNotifies(Peer& p) {
  while (!p.notifies.empty()) {
    PendingNotify& n = p.notifies.front();
    if (tracker_.IsDone(n.id)) {  // timed out or cancelled while waiting
      p.notifies.pop_front();
      continue;
    }
    if (!p.unsettled.empty() && *p.unsettled.begin() < n.seq) return;
    FrameHeader h;
    h.type = FrameType::kNotify;
    h.session = p.lanes[0].session;
    h.batch = n.id;
    auto header = EncodeHeader(h);
    if (!p.lanes[0].socket.send(zmq::buffer(header.data(), header.size()),
                                zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return;
    }
    p.lanes[0].socket.send(zmq::buffer(n.message), zmq::send_flags::dontwait);
    tracker_.MarkInProgress(n.id);
    p.notifies.pop_front();
  }
}

void TcpEngine::SettleLane(BatchId id, int lane, bool acked) {
  auto it = tx_.find(id);
  if (it == tx_.end()) return;
  TxBatch& tx = it->second;
  if (lane < 0 || lane >= static_cast<int>(tx.lane_settled.size()) || tx.lane_settled[lane]) {
    return;
  }
  tx.lane_settled[lane] = true;
  if (acked) tracker_.AddAcked(id, tx.lane_bytes[lane]);
  if (--tx.lanes_unsettled > 0) return;
  // Every lane answered; any rejection already failed the batch, so this completes only a
  // batch that is still running.
  tracker_.Finish(id, BatchState::kCompleted);
  auto p = peers_.find(tx.peer);
  if (p != peers_.end()) p->second->unsettled.erase(tx.seq);
  tx_.erase(it);
}

void TcpEngine::KillPeer(Peer& p, const std::string& why) {
  if (p.dead) return;
  spdlog::warn("kv tcp: peer '{}' failed: {}", p.desc.engine_name, why);
  p.dead = true;
  absl::Status error =
      absl::UnavailableError(absl::StrCat("tcp: peer '", p.desc.engine_name, "': ", why));
  {
    absl::MutexLock lock(&mu_);
    auto m = meta_.find(p.id);
    if (m != meta_.end()) {
      m->second.dead = true;
      m->second.death = why;
      m->second.queued_bytes = 0;
    }
  }
  tracker_.FailPeer(p.id, error);
  for (auto it = tx_.begin(); it != tx_.end();) {
    it = it->second.peer == p.id ? tx_.erase(it) : std::next(it);
  }
  for (auto& q : p.queues) q.clear();
  p.notifies.clear();
  p.unsettled.clear();
  ClosePeer(p);
}

void TcpEngine::ClosePeer(Peer& p) {
  for (ClientLane& lane : p.lanes) {
    if (!p.dead) {
      // Best effort goodbye so the server forgets the session now.
      FrameHeader h;
      h.type = FrameType::kBye;
      h.session = lane.session;
      auto header = EncodeHeader(h);
      if (lane.socket.send(zmq::buffer(header.data(), header.size()),
                           zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        lane.socket.send(zmq::message_t(), zmq::send_flags::dontwait);
      }
    }
    CloseLane(lane);
  }
  p.lanes.clear();
  p.queues.clear();
  p.dead = true;
}

void TcpEngine::DequeuedBytes(PeerId peer, uint64_t n) {
  absl::MutexLock lock(&mu_);
  auto m = meta_.find(peer);
  if (m != meta_.end()) m->second.queued_bytes -= std::min(n, m->second.queued_bytes);
}

}  // namespace

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
  return TransferEnginePtr(new TcpEngine(std::move(options)));
}

}  // namespace tandem::kv

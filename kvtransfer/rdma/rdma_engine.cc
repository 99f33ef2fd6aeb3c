#include "kvtransfer/rdma/rdma_engine.h"

#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/batch_plan.h"
#include "kvtransfer/batch_tracker.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp/tcp_client.h"
#include "kvtransfer/tcp/tcp_server.h"
#include "kvtransfer/wire.h"

namespace tandem::kv {
namespace {

using rdma::QpAddress;
using rdma::SendRequest;
using rdma::WcOpcode;
using rdma::WcStatus;
using rdma::WorkCompletion;

constexpr int kMaxSendWr = 4096;  // per queue pair
constexpr int kSendSlots = 16;    // notification send buffers
constexpr int kRecvSlots = 128;   // notification receive buffers, shared by incoming peers
constexpr int kRecvPerConn = 8;   // posted on each incoming peer's queue pair 0
constexpr uint64_t kNotifyBit = 1ull << 63;

std::string EncodeQps(const std::vector<QpAddress>& qps) {
  std::string out;
  WireWriter w(&out);
  w.U32(static_cast<uint32_t>(qps.size()));
  for (const QpAddress& q : qps) {
    w.U32(q.qp_num);
    w.U32(q.psn);
    w.U16(q.lid);
    w.Raw(q.gid.data(), 16);
    w.U32(static_cast<uint32_t>(q.mtu));
  }
  return out;
}

absl::StatusOr<std::vector<QpAddress>> DecodeQps(const std::string& body) {
  WireReader r(body.data(), body.size());
  ASSIGN_OR_RETURN(uint32_t n, r.U32("qp count"), "rdma qp exchange: ");
  if (n == 0 || n > 64) return absl::InvalidArgumentError("rdma qp exchange: bad qp count");
  std::vector<QpAddress> qps(n);
  for (QpAddress& q : qps) {
    ASSIGN_OR_RETURN(q.qp_num, r.U32("qp_num"), "rdma qp exchange: ");
    ASSIGN_OR_RETURN(q.psn, r.U32("psn"), "rdma qp exchange: ");
    ASSIGN_OR_RETURN(q.lid, r.U16("lid"), "rdma qp exchange: ");
    RETURN_IF_ERROR(r.Raw(q.gid.data(), 16, "gid"), "rdma qp exchange: ");
    ASSIGN_OR_RETURN(uint32_t mtu, r.U32("mtu"), "rdma qp exchange: ");
    q.mtu = static_cast<int>(std::min<uint32_t>(mtu, 4096));
  }
  RETURN_IF_ERROR(r.ExpectEnd("rdma qp exchange"));
  return qps;
}

uint32_t RandomPsn() {
  uint32_t v = 0;
  RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v));
  return v & 0xffffff;
}

class RdmaEngine final : public TransferEngine {
 public:
  RdmaEngine(EngineOptions options, rdma::VerbsPtr verbs)
      : options_(std::move(options)),
        verbs_(std::move(verbs)),
        ctx_(1),
        server_(options_, &regions_, &counters_,
                [this](const std::string& peer, const std::string& body) {
                  return OnQpRequest(peer, body);
                }) {}
  ~RdmaEngine() override { Shutdown(); }

  EngineState state() const override {
    absl::MutexLock lock(&mu_);
    return state_;
  }
  EngineStats stats() const override { return counters_.Snapshot(); }

  absl::Status RegisterRegion(const LocalRegion& region) override {
    if (region.restricted) {
      return absl::UnimplementedError(
          "rdma: restricted regions (per-peer windows) are not offered by the rdma backend; "
          "the receiver does not see one-sided writes. Use the tcp backend for windows");
    }
    absl::MutexLock lock(&mu_);
    if (state_ != EngineState::kConfiguring) {
      return absl::FailedPreconditionError("rdma: regions are registered before Start()");
    }
    return regions_.Add(region);
  }

  absl::Status Start() override;
  absl::StatusOr<std::string> ExportDescriptor() override;
  absl::StatusOr<PeerId> ImportPeer(const std::string& descriptor) override;
  absl::Status RemovePeer(PeerId peer) override;
  absl::Status CheckPeer(PeerId peer) const override;
  absl::StatusOr<WindowId> OpenWindow(const std::string&, RegionId, uint64_t, uint64_t) override {
    return absl::UnimplementedError("rdma: windows are not offered by the rdma backend");
  }
  absl::Status CloseWindow(WindowId) override {
    return absl::UnimplementedError("rdma: windows are not offered by the rdma backend");
  }
  absl::StatusOr<SubmitResult> Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                      SubmitOptions options) override;
  absl::StatusOr<BatchId> Notify(PeerId peer, const std::string& message,
                                 SubmitOptions options) override;
  absl::StatusOr<BatchStatus> Poll(BatchId id) override { return tracker_.Poll(id); }
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until) override {
    return tracker_.Wait(id, until);
  }
  // Posted work requests cannot be recalled: the batch is reported cancelled at once, and its
  // chains still settle (for notification ordering) when their completions arrive.
  absl::Status Cancel(BatchId id) override { return tracker_.Cancel(id).status(); }
  absl::Status Release(BatchId id) override { return tracker_.Release(id); }
  void Shutdown() override;

 private:
  struct PendingNotify {
    BatchId id;
    uint64_t seq;
    std::string message;
  };
  struct OutPeer {
    Descriptor desc;
    std::vector<rdma::QueuePair> qps;
    std::vector<int> inflight_wrs;
    std::set<uint64_t> unsettled;
    std::deque<PendingNotify> notifies;
    bool dead = false;
    std::string death;
    int next_lane = 0;
  };
  struct TxBatch {
    PeerId peer;
    uint64_t seq;
    std::map<int, std::pair<int, uint64_t>> chains;  // lane -> (work requests, bytes)
  };
  struct InConn {
    std::string peer;
    std::vector<rdma::QueuePair> qps;
  };
  // What the poller does after dropping the lock (callbacks may re-enter the engine).
  // Exactly one of: a batch update (id != 0), a peer failure (fail_peer != 0), a notification.
  struct Outcome {
    BatchId id = 0;
    BatchState state = BatchState::kInProgress;
    absl::Status error;
    uint64_t acked = 0;
    PeerId fail_peer = 0;
    std::string note_peer, note;
  };

  absl::StatusOr<SubmitResult> DoSubmit(PeerId peer, absl::Span<const WriteOp> ops, uint64_t total,
                                        SubmitOptions options, std::vector<Outcome>& out);
  absl::StatusOr<std::string> OnQpRequest(const std::string& peer, const std::string& body);
  void ControlLoop();
  void PollLoop();
  void HandleCompletion(const WorkCompletion& wc, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KillPeerLocked(PeerId id, const std::string& why, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PumpNotifiesLocked(PeerId id, OutPeer& p, std::vector<Outcome>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Apply(std::vector<Outcome>& out);
  QpAddress AddressOf(const rdma::QueuePair& qp, uint32_t psn) const {
    return QpAddress{qp.qp_num, psn, port_.lid, port_.gid, port_.active_mtu};
  }
  uint8_t* Scratch(int slot) { return scratch_.data() + slot * kMaxNotifyBytes; }

  const EngineOptions options_;
  rdma::VerbsPtr verbs_;
  RegionTable regions_;
  BatchTracker tracker_;
  EngineCounters counters_;
  zmq::context_t ctx_;
  zmq::socket_t router_;  // control thread after Start()
  TcpServer server_;      // control thread
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread control_thread_, poll_thread_;

  // Set in Start(), read-only afterwards.
  rdma::PortInfo port_;
  rdma::Handle pd_ = 0, cq_ = 0;
  std::map<RegionId, rdma::MemoryRegistration> mrs_;
  std::vector<uint8_t> scratch_;  // kSendSlots + kRecvSlots notification buffers
  rdma::MemoryRegistration scratch_mr_;

  mutable absl::Mutex mu_;
  EngineState state_ ABSL_GUARDED_BY(mu_) = EngineState::kConfiguring;
  PeerId next_peer_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<PeerId, OutPeer> peers_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, PeerId> qp_owner_ ABSL_GUARDED_BY(mu_);  // our outgoing qp_num -> peer
  std::map<BatchId, TxBatch> tx_ ABSL_GUARDED_BY(mu_);
  std::vector<int> free_send_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<int> free_recv_slots_ ABSL_GUARDED_BY(mu_);
  std::vector<InConn> incoming_ ABSL_GUARDED_BY(mu_);
  // incoming qp_num -> (peer name, qp handle)
  std::map<uint32_t, std::pair<std::string, rdma::Handle>> incoming_qp_ ABSL_GUARDED_BY(mu_);
};

absl::Status RdmaEngine::Start() {
  absl::MutexLock lock(&mu_);
  if (state_ != EngineState::kConfiguring) {
    return absl::FailedPreconditionError("rdma: Start() called twice");
  }
  ASSIGN_OR_RETURN(port_, verbs_->QueryPort());
  ASSIGN_OR_RETURN(pd_, verbs_->AllocPd());
  ASSIGN_OR_RETURN(cq_, verbs_->CreateCq(8192));
  for (const LocalRegion& r : regions_.regions()) {
    ASSIGN_OR_RETURN(mrs_[r.id], verbs_->RegisterMemory(pd_, r.base, r.size),
                     absl::StrCat("rdma: region ", r.id, ": "));
  }
  scratch_.assign(static_cast<size_t>(kSendSlots + kRecvSlots) * kMaxNotifyBytes, 0);
  ASSIGN_OR_RETURN(scratch_mr_, verbs_->RegisterMemory(pd_, scratch_.data(), scratch_.size()));
  for (int i = 0; i < kSendSlots; ++i) free_send_slots_.push_back(i);
  for (int i = 0; i < kRecvSlots; ++i) free_recv_slots_.push_back(kSendSlots + i);
  std::string host =
      options_.advertise_host.empty() ? options_.listen_host : options_.advertise_host;
  try {
    router_ = zmq::socket_t(ctx_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(1 << 20));
    std::string port = options_.listen_port == 0 ? "*" : std::to_string(options_.listen_port);
    router_.bind(absl::StrCat("tcp://", options_.listen_host, ":", port));
    std::string bound = router_.get(zmq::sockopt::last_endpoint);
    endpoint_ = absl::StrCat("tcp://", host, ":", bound.substr(bound.rfind(':') + 1));
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(
        absl::StrCat("rdma: cannot listen for control on ", options_.listen_host, ": ", e.what()));
  }
  regions_.Freeze();
  state_ = EngineState::kServing;
  control_thread_ = std::thread([this] { ControlLoop(); });
  poll_thread_ = std::thread([this] { PollLoop(); });
  return absl::OkStatus();
}

absl::StatusOr<std::string> RdmaEngine::ExportDescriptor() {
  if (state() != EngineState::kServing) {
    return absl::FailedPreconditionError("rdma: ExportDescriptor() before Start()");
  }
  Descriptor d;
  d.backend = "rdma";
  d.engine_name = options_.name;
  d.endpoints.push_back(endpoint_);
  for (const LocalRegion& r : regions_.regions()) {
    const rdma::MemoryRegistration& mr = mrs_.at(r.id);
    d.regions.push_back(
        RegionInfo{r.id, r.size, false, reinterpret_cast<uint64_t>(r.base), mr.rkey});
  }
  d.compat = options_.compat;
  return EncodeDescriptor(d);
}

absl::StatusOr<std::string> RdmaEngine::OnQpRequest(const std::string& peer,
                                                    const std::string& body) {
  ASSIGN_OR_RETURN(std::vector<QpAddress> remote, DecodeQps(body));
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(free_recv_slots_.size()) < kRecvPerConn) {
    return absl::ResourceExhaustedError("rdma: no receive buffers left for another peer");
  }
  InConn conn{peer, {}};
  std::vector<QpAddress> ours;
  auto cleanup = [&](absl::Status s) {
    for (const auto& qp : conn.qps) verbs_->DestroyQp(qp.handle);
    return s;
  };
  for (const QpAddress& r : remote) {
    auto qp = verbs_->CreateQp(pd_, cq_, kMaxSendWr, kRecvPerConn);
    if (!qp.ok()) return cleanup(qp.status());
    conn.qps.push_back(*qp);
    uint32_t psn = RandomPsn();
    absl::Status s = verbs_->ConnectQp(qp->handle, psn, r);
    if (!s.ok()) return cleanup(s);
    ours.push_back(AddressOf(*qp, psn));
  }
  for (int i = 0; i < kRecvPerConn; ++i) {
    int slot = free_recv_slots_.back();
    absl::Status s =
        verbs_->PostRecv(conn.qps[0].handle, slot, reinterpret_cast<uint64_t>(Scratch(slot)),
                         kMaxNotifyBytes, scratch_mr_.lkey);
    if (!s.ok()) return cleanup(s);
    free_recv_slots_.pop_back();
  }
  for (const auto& qp : conn.qps) incoming_qp_[qp.qp_num] = {peer, qp.handle};
  incoming_.push_back(std::move(conn));
  return EncodeQps(ours);
}

absl::StatusOr<PeerId> RdmaEngine::ImportPeer(const std::string& descriptor) {
  if (state() != EngineState::kServing) {
    return absl::FailedPreconditionError("rdma: ImportPeer() before Start()");
  }
  ASSIGN_OR_RETURN(Descriptor d, DecodePeerDescriptor("rdma", descriptor, options_.compat));
  ClientOptions copts;
  copts.endpoint = d.endpoints[0];
  copts.local_name = options_.name;
  copts.peer_name = d.engine_name;
  copts.secret = options_.cluster_secret;
  copts.compat = options_.compat;
  copts.heartbeat_ms = 1000;
  PeerId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_peer_++;
  }
  copts.monitor_prefix =
      absl::StrCat("inproc://tkv-rdma-monitor-", reinterpret_cast<uintptr_t>(this), "-", id);
  const absl::Time deadline = absl::Now() + options_.handshake_timeout;
  ASSIGN_OR_RETURN(std::vector<ClientLane> lanes, ConnectLanes(ctx_, copts, 1, deadline));
  OutPeer p;
  p.desc = d;
  std::vector<QpAddress> ours;
  std::vector<uint32_t> psns;
  auto fail = [&](absl::Status s) {
    for (const auto& qp : p.qps) verbs_->DestroyQp(qp.handle);
    CloseLane(lanes[0]);
    return s;
  };
  for (int i = 0; i < std::max(1, options_.lanes); ++i) {
    auto qp = verbs_->CreateQp(pd_, cq_, kMaxSendWr, 1);
    if (!qp.ok()) return fail(qp.status());
    p.qps.push_back(*qp);
    psns.push_back(RandomPsn());
    ours.push_back(AddressOf(*qp, psns.back()));
  }
  auto reply = ControlCall(lanes[0], EncodeQps(ours), deadline);
  if (!reply.ok()) return fail(Annotate(reply.status(), "rdma: queue-pair exchange: "));
  auto theirs = DecodeQps(*reply);
  if (!theirs.ok()) return fail(theirs.status());
  if (theirs->size() != p.qps.size()) {
    return fail(absl::DataLossError("rdma: peer answered with a different number of qps"));
  }
  for (size_t i = 0; i < p.qps.size(); ++i) {
    absl::Status s = verbs_->ConnectQp(p.qps[i].handle, psns[i], (*theirs)[i]);
    if (!s.ok()) return fail(s);
  }
  CloseLane(lanes[0]);
  p.inflight_wrs.assign(p.qps.size(), 0);
  absl::MutexLock lock(&mu_);
  for (const auto& qp : p.qps) qp_owner_[qp.qp_num] = id;
  peers_[id] = std::move(p);
  return id;
}

absl::Status RdmaEngine::CheckPeer(PeerId peer) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("rdma: no peer ", peer));
  if (it->second.dead) {
    return absl::UnavailableError(absl::StrCat("rdma: peer '", it->second.desc.engine_name,
                                               "' is dead (", it->second.death, ")"));
  }
  return absl::OkStatus();
}

absl::Status RdmaEngine::RemovePeer(PeerId peer) {
  std::vector<Outcome> out;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("rdma: no peer ", peer));
    KillPeerLocked(peer, "peer removed", out);
    for (const auto& qp : it->second.qps) {
      qp_owner_.erase(qp.qp_num);
      verbs_->DestroyQp(qp.handle);
    }
    peers_.erase(it);
  }
  Apply(out);
  return absl::OkStatus();
}

absl::StatusOr<SubmitResult> RdmaEngine::Submit(PeerId peer, absl::Span<const WriteOp> ops,
                                                SubmitOptions options) {
  if (ops.empty()) return absl::InvalidArgumentError("rdma: empty batch");
  uint64_t total = 0;
  for (const WriteOp& op : ops) {
    RETURN_IF_ERROR(regions_.LocalRange(op.local_region, op.local_offset, op.length).status(),
                    "rdma: ");
    total += op.length;
  }
  std::vector<Outcome> out;
  absl::StatusOr<SubmitResult> result = DoSubmit(peer, ops, total, std::move(options), out);
  Apply(out);  // callbacks run without the lock
  return result;
}

absl::StatusOr<SubmitResult> RdmaEngine::DoSubmit(PeerId peer, absl::Span<const WriteOp> ops,
                                                  uint64_t total, SubmitOptions options,
                                                  std::vector<Outcome>& out) {
  absl::MutexLock lock(&mu_);
  if (state_ != EngineState::kServing) return absl::FailedPreconditionError("rdma: not serving");
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("rdma: no peer ", peer));
  OutPeer& p = it->second;
  if (p.dead) {
    return absl::UnavailableError(absl::StrCat("rdma: peer '", p.desc.engine_name, "' is dead (",
                                               p.death, "); import its descriptor again"));
  }
  for (const WriteOp& op : ops) {
    const RegionInfo* remote = p.desc.FindRegion(op.remote_region);
    if (remote == nullptr || !RangeInside(op.remote_offset, op.length, remote->size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rdma: remote range [", op.remote_offset, ", +", op.length, ") of region ",
                       op.remote_region, " outside the peer's regions"));
    }
  }
  const uint64_t slice = std::min<uint64_t>(options_.slice_bytes, port_.max_msg_size);
  const int lanes = static_cast<int>(p.qps.size());
  std::vector<PlannedSlice> plan = PlanBatch(ops, slice, lanes, p.next_lane);
  std::vector<std::vector<SendRequest>> chains(lanes);
  for (const PlannedSlice& s : plan) {
    const RegionInfo* remote = p.desc.FindRegion(s.op.remote_region);
    SendRequest r;
    r.opcode = SendRequest::kWrite;
    r.local_addr = reinterpret_cast<uint64_t>(
        *regions_.LocalRange(s.op.local_region, s.op.local_offset, s.op.length));
    r.length = static_cast<uint32_t>(s.op.length);
    r.lkey = mrs_.at(s.op.local_region).lkey;
    r.remote_addr = remote->remote_addr + s.op.remote_offset;
    r.rkey = remote->rkey;
    r.signaled = s.last_on_lane;
    chains[s.lane].push_back(r);
  }
  for (int l = 0; l < lanes; ++l) {
    if (p.inflight_wrs[l] + static_cast<int>(chains[l].size()) > kMaxSendWr) {
      if (p.inflight_wrs[l] > 0) return SubmitResult{};  // "no room": retry later
      return absl::InvalidArgumentError(absl::StrCat("rdma: batch needs ", chains[l].size(),
                                                     " work requests on one queue pair; limit ",
                                                     kMaxSendWr, " (use fewer, larger writes)"));
    }
  }
  p.next_lane = (p.next_lane + 1) % lanes;
  const BatchId id = tracker_.Create(peer, total, std::move(options));
  TxBatch tx{peer, next_seq_++, {}};
  for (int l = 0; l < lanes; ++l) {
    if (chains[l].empty()) continue;
    uint64_t bytes = 0;
    for (SendRequest& r : chains[l]) {
      r.wr_id = id;
      bytes += r.length;
    }
    absl::Status s = verbs_->PostSend(p.qps[l].handle, chains[l]);
    if (!s.ok()) {
      if (!tx.chains.empty()) tx_[id] = tx;
      KillPeerLocked(peer, absl::StrCat("post_send failed: ", s.message()), out);
      out.push_back({id, BatchState::kFailed, absl::UnavailableError(s.message())});
      return SubmitResult{true, id};
    }
    p.inflight_wrs[l] += static_cast<int>(chains[l].size());
    tx.chains[l] = {static_cast<int>(chains[l].size()), bytes};
  }
  p.unsettled.insert(tx.seq);
  tx_[id] = std::move(tx);
  tracker_.MarkInProgress(id);
  return SubmitResult{true, id};
}

absl::StatusOr<BatchId> RdmaEngine::Notify(PeerId peer, const std::string& message,
                                           SubmitOptions options) {
  if (message.size() > kMaxNotifyBytes) {
    return absl::InvalidArgumentError("rdma: notification larger than kMaxNotifyBytes");
  }
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::NotFoundError(absl::StrCat("rdma: no peer ", peer));
  if (it->second.dead) {
    return absl::UnavailableError(
        absl::StrCat("rdma: peer '", it->second.desc.engine_name, "' is dead"));
  }
  BatchId id = tracker_.Create(peer, 0, std::move(options));
  it->second.notifies.push_back(PendingNotify{id, next_seq_++, message});
  return id;
}

void RdmaEngine::ControlLoop() {
  while (!stop_) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
    } catch (const zmq::error_t&) {
      continue;
    }
    if (!(item.revents & ZMQ_POLLIN)) continue;
    for (int n = 0; n < 64; ++n) {
      std::vector<zmq::message_t> parts;
      while (true) {
        zmq::message_t m;
        if (!router_.recv(m, zmq::recv_flags::dontwait)) break;
        bool more = m.more();
        if (parts.size() < 4) parts.push_back(std::move(m));
        if (!more) break;
      }
      if (parts.empty()) break;
      server_.HandleMessage(router_, parts);
    }
  }
}

void RdmaEngine::PollLoop() {
  WorkCompletion wcs[32];
  while (!stop_) {
    auto n = verbs_->PollCq(cq_, absl::MakeSpan(wcs));
    std::vector<Outcome> out;
    {
      absl::MutexLock lock(&mu_);
      if (n.ok()) {
        for (int i = 0; i < *n; ++i) HandleCompletion(wcs[i], out);
      }
      for (auto& [id, p] : peers_) {
        if (!p.dead) PumpNotifiesLocked(id, p, out);
      }
    }
    Apply(out);
    tracker_.ExpireDeadlines(absl::Now());
    // Idle: yield the core (this machine class shares few cores between all daemons).
    if (!n.ok() || *n == 0) absl::SleepFor(absl::Microseconds(100));
  }
}

void RdmaEngine::HandleCompletion(const WorkCompletion& wc, std::vector<Outcome>& out) {
  if (wc.opcode == WcOpcode::kRecv || wc.opcode == WcOpcode::kRecvWithImm) {
    auto in = incoming_qp_.find(wc.qp_num);
    const int slot = static_cast<int>(wc.wr_id);
    if (wc.status == WcStatus::kSuccess && in != incoming_qp_.end()) {
      counters_.notifications_received++;
      Outcome o;
      o.note_peer = in->second.first;
      o.note.assign(reinterpret_cast<const char*>(Scratch(slot)),
                    std::min<uint32_t>(wc.byte_len, kMaxNotifyBytes));
      out.push_back(std::move(o));
      // Re-arm the same buffer for the next notification.
      if (verbs_
              ->PostRecv(in->second.second, slot, reinterpret_cast<uint64_t>(Scratch(slot)),
                         kMaxNotifyBytes, scratch_mr_.lkey)
              .ok()) {
        return;
      }
    }
    free_recv_slots_.push_back(slot);
    return;
  }
  auto owner = qp_owner_.find(wc.qp_num);
  if (wc.wr_id & kNotifyBit) {
    const int slot = static_cast<int>((wc.wr_id >> 48) & 0x7fff);
    free_send_slots_.push_back(slot);
    const BatchId id = wc.wr_id & ((1ull << 48) - 1);
    if (wc.status == WcStatus::kSuccess) {
      out.push_back({id, BatchState::kCompleted});
    } else if (owner != qp_owner_.end()) {
      KillPeerLocked(owner->second, rdma::WcStatusName(wc.status), out);
    }
    return;
  }
  const BatchId id = wc.wr_id;
  if (wc.status != WcStatus::kSuccess) {
    if (owner != qp_owner_.end()) {
      KillPeerLocked(owner->second,
                     absl::StrCat(rdma::WcStatusName(wc.status), " on queue pair ", wc.qp_num),
                     out);
    }
    return;
  }
  auto it = tx_.find(id);
  if (it == tx_.end() || owner == qp_owner_.end()) return;
  TxBatch& tx = it->second;
  auto p = peers_.find(tx.peer);
  for (auto c = tx.chains.begin(); c != tx.chains.end(); ++c) {
    if (p != peers_.end() && p->second.qps[c->first].qp_num == wc.qp_num) {
      p->second.inflight_wrs[c->first] -= c->second.first;
      out.push_back({id, BatchState::kInProgress, absl::OkStatus(), c->second.second});
      tx.chains.erase(c);
      break;
    }
  }
  if (!tx.chains.empty()) return;
  out.push_back({id, BatchState::kCompleted});
  if (p != peers_.end()) p->second.unsettled.erase(tx.seq);
  tx_.erase(it);
}

void RdmaEngine::PumpNotifiesLocked(PeerId id, OutPeer& p, std::vector<Outcome>& out) {
  while (!p.notifies.empty()) {
    PendingNotify& n = p.notifies.front();
    if (tracker_.IsDone(n.id)) {
      p.notifies.pop_front();
      continue;
    }
    if (!p.unsettled.empty() && *p.unsettled.begin() < n.seq) return;
    if (free_send_slots_.empty()) return;
    const int slot = free_send_slots_.back();
    free_send_slots_.pop_back();
    std::memcpy(Scratch(slot), n.message.data(), n.message.size());
    SendRequest r;
    r.opcode = SendRequest::kSend;
    r.wr_id = kNotifyBit | (static_cast<uint64_t>(slot) << 48) | n.id;
    r.local_addr = reinterpret_cast<uint64_t>(Scratch(slot));
    r.length = static_cast<uint32_t>(n.message.size());
    r.lkey = scratch_mr_.lkey;
    r.signaled = true;
    absl::Status s = verbs_->PostSend(p.qps[0].handle, {&r, 1});
    tracker_.MarkInProgress(n.id);
    p.notifies.pop_front();
    if (!s.ok()) {
      free_send_slots_.push_back(slot);
      KillPeerLocked(id, absl::StrCat("post_send failed: ", s.message()), out);
      return;
    }
  }
}

void RdmaEngine::KillPeerLocked(PeerId id, const std::string& why, std::vector<Outcome>& out) {
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.dead) return;
  OutPeer& p = it->second;
  spdlog::warn("kv rdma: peer '{}' failed: {}", p.desc.engine_name, why);
  p.dead = true;
  p.death = why;
  absl::Status error =
      absl::UnavailableError(absl::StrCat("rdma: peer '", p.desc.engine_name, "': ", why));
  for (auto t = tx_.begin(); t != tx_.end();) {
    if (t->second.peer == id) {
      out.push_back({t->first, BatchState::kFailed, error});
      t = tx_.erase(t);
    } else {
      ++t;
    }
  }
  for (const PendingNotify& n : p.notifies) out.push_back({n.id, BatchState::kFailed, error});
  p.notifies.clear();
  p.unsettled.clear();
  // Also fails notifications already posted (their completions are flushed).
  Outcome o;
  o.fail_peer = id;
  o.error = error;
  out.push_back(std::move(o));
}

void RdmaEngine::Apply(std::vector<Outcome>& out) {
  for (Outcome& o : out) {
    if (o.fail_peer != 0) {
      tracker_.FailPeer(o.fail_peer, o.error);
    } else if (o.id == 0) {
      if (options_.on_notification) options_.on_notification(o.note_peer, o.note);
    } else if (o.state == BatchState::kInProgress) {
      tracker_.AddAcked(o.id, o.acked);
    } else {
      tracker_.Finish(o.id, o.state, o.error);
    }
  }
}

void RdmaEngine::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == EngineState::kStopped) return;
    bool serving = state_ == EngineState::kServing;
    state_ = EngineState::kStopped;
    if (!serving) return;
  }
  stop_ = true;
  if (control_thread_.joinable()) control_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
  tracker_.FailPeer(0, absl::CancelledError("rdma: engine shut down"));
  router_.close();
  absl::MutexLock lock(&mu_);
  for (auto& [id, p] : peers_) {
    for (const auto& qp : p.qps) verbs_->DestroyQp(qp.handle);
  }
  peers_.clear();
  for (InConn& c : incoming_) {
    for (const auto& qp : c.qps) verbs_->DestroyQp(qp.handle);
  }
  incoming_.clear();
  for (auto& [id, mr] : mrs_) verbs_->DeregisterMemory(mr.handle);
  mrs_.clear();
  verbs_->DeregisterMemory(scratch_mr_.handle);
  verbs_->DestroyCq(cq_);
  verbs_->DeallocPd(pd_);
}

}  // namespace

absl::StatusOr<TransferEnginePtr> CreateRdmaEngine(EngineOptions options, rdma::VerbsPtr verbs) {
  if (verbs == nullptr) return absl::InvalidArgumentError("rdma: no verbs device");
  if (options.name.empty() || options.name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("rdma: engine name must be 1..256 bytes");
  }
  RETURN_IF_ERROR(ValidateClusterSecret(options.cluster_secret), "rdma: ");
  if (options.lanes < 1 || options.lanes > 64) {
    return absl::InvalidArgumentError("rdma: lanes must be in [1, 64]");
  }
  if (options.slice_bytes == 0 || options.slice_bytes > (1ull << 30)) {
    return absl::InvalidArgumentError("rdma: slice_bytes must be in (0, 1 GiB]");
  }
  return TransferEnginePtr(new RdmaEngine(std::move(options), std::move(verbs)));
}

}  // namespace tandem::kv

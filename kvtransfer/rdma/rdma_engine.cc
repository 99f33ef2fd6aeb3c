// The public methods of the rdma engine (RdmaEngine, rdma_engine_internal.h) and
// CreateRdmaEngine. They run on the callers' threads: setting up the port, protection domain,
// memory registrations and notification buffers, exporting and importing descriptors (ImportPeer
// runs the queue-pair exchange and connects our queue pairs), checking batches against the
// peer's regions and posting their chains of RDMA WRITEs, and queueing notifications for the
// polling thread (rdma_engine_completion.cc). The control thread is here too: it answers a
// peer's queue-pair exchange (OnQpRequest), the other side of ImportPeer.
#include "kvtransfer/rdma/rdma_engine.h"

#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "kvtransfer/auth.h"
#include "kvtransfer/batch_plan.h"
#include "kvtransfer/rdma/rdma_engine_internal.h"
#include "kvtransfer/tcp/tcp_client.h"
#include "kvtransfer/wire.h"

namespace tandem::kv {
namespace rdma_internal {
namespace {

constexpr int kMaxSendWr = 4096;  // per queue pair
constexpr int kSendSlots = 16;    // notification send buffers
constexpr int kRecvSlots = 128;   // notification receive buffers, shared by incoming peers
constexpr int kRecvPerConn = 8;   // posted on each incoming peer's queue pair 0

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

}  // namespace

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
    router_.set(zmq::sockopt::handshake_ivl, kZmqHandshakeMs);
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

}  // namespace rdma_internal

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
  RETURN_IF_ERROR(ValidateConnectionLimits(options.connection_limits), "rdma: ");
  return TransferEnginePtr(new rdma_internal::RdmaEngine(std::move(options), std::move(verbs)));
}

}  // namespace tandem::kv

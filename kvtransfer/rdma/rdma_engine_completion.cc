// The polling thread of the rdma engine (RdmaEngine, rdma_engine_internal.h): draining the
// completion queue; settling a batch's chains as their signaled writes complete; handing received
// notifications to the handler and re-arming their receive buffers; posting queued notifications
// once every earlier batch to the peer settled; failing a peer on an error completion or a failed
// post; and reporting these outcomes to the batch tracker after the lock is dropped.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kvtransfer/rdma/rdma_engine_internal.h"

namespace tandem::kv::rdma_internal {
namespace {

constexpr uint64_t kNotifyBit = 1ull << 63;

}  // namespace

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

}  // namespace tandem::kv::rdma_internal

// The I/O thread of the tcp engine (TcpEngine, tcp_engine_internal.h): the poll loop over the
// ROUTER socket, the wake eventfd and every peer's lanes and monitors; taking Commands from the
// API threads; sending slices (zero-copy, copied or packed into kWriteMulti frames), flushes and
// notifications; settling batches on acks and nacks; and failing a peer whose connection is lost.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/tcp/tcp_engine.h"
#include "kvtransfer/tcp/tcp_engine_internal.h"
#include "kvtransfer/wire.h"

namespace tandem::kv::tcp_internal {
namespace {

// Small writes are packed into frames of up to this many payload bytes.
constexpr uint64_t kPackBytes = 1 << 20;

}  // namespace

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

}  // namespace tandem::kv::tcp_internal

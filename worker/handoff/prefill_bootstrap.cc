// PrefillHandoff's bootstrap server: the ZMQ socket decode workers register with and register
// their rooms on (prefill_handoff.h). The legs themselves are in prefill_handoff.cc.
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/handoff/control_channel.h"
#include "worker/handoff/handoff_clock.h"
#include "worker/handoff/kv_geometry.h"
#include "worker/handoff/prefill_handoff.h"

namespace tandem::worker {

void PrefillHandoff::BootstrapLoop() {
  while (!stop_.load()) {
    zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      while (item.revents & ZMQ_POLLIN) {
        std::vector<zmq::message_t> frames;
        zmq::message_t frame;
        do {
          if (!router_.recv(frame, zmq::recv_flags::dontwait)) break;
          frames.push_back(std::move(frame));
        } while (router_.get(zmq::sockopt::rcvmore));
        if (frames.size() < 2) break;
        const std::string identity = frames.front().to_string();
        const std::string payload = frames.back().to_string();
        auto m = OpenControl(options_.cluster_secret, payload);
        std::string reply;
        if (!m.ok()) {
          // A stranger can send these as fast as the network goes: one line a second, with the
          // count. A member (say, on another control-plane version) is always told why; a sender
          // without the secret only ten times a second in all, which still tells a decode worker
          // given the wrong secret so, but queues next to nothing for a flood.
          int64_t more = 0;
          if (refusal_logs_.Allow(&more)) {
            spdlog::warn("bootstrap: dropped a message: {} ({} more dropped since the last line)",
                         std::string(m.status().message()), more);
          }
          if (!ControlFromMember(payload, m) && !stranger_answers_.Allow()) {
            item.revents = 0;
            zmq::poll(&item, 1, std::chrono::milliseconds(0));
            continue;
          }
          proto::ControlMessage r;
          r.mutable_register_peer_reply()->set_accepted(false);
          r.mutable_register_peer_reply()->set_error(std::string(m.status().message()));
          reply = SealControl(options_.cluster_secret, std::move(r));
        } else if (m->has_register_peer()) {
          reply = HandleRegisterPeer(m->register_peer());
        } else if (m->has_room_registration()) {
          reply = HandleRoom(m->room_registration());
        } else if (m->has_room_abort()) {
          AbortRoom(m->room_abort().bootstrap_room(),
                    absl::StrCat("the decode worker aborted the room: ", m->room_abort().reason()));
        }
        if (!reply.empty()) {
          router_.send(zmq::buffer(identity), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
          router_.send(zmq::buffer(reply), zmq::send_flags::dontwait);
        }
        item.revents = 0;
        zmq::poll(&item, 1, std::chrono::milliseconds(0));
      }
    } catch (const zmq::error_t& e) {
      spdlog::error("bootstrap server: {}", e.what());
    }
    CheckDeadlines();
  }
}

std::string PrefillHandoff::HandleRegisterPeer(const proto::RegisterPeer& m) {
  proto::ControlMessage reply;
  proto::RegisterPeerReply* r = reply.mutable_register_peer_reply();
  r->set_prefill_worker_id(options_.worker_id);
  *r->mutable_layout() = ToProto(compat_);
  if (absl::Status s = kv::CheckCompatible(compat_, FromProto(m.layout())); !s.ok()) {
    r->set_accepted(false);
    r->set_error(absl::StrCat("prefill worker ", options_.worker_id, " and decode worker ",
                              m.decode_worker_id(), " cannot share KV: ", s.message()));
    spdlog::warn("bootstrap: {}", r->error());
    return SealControl(options_.cluster_secret, std::move(reply));
  }
  std::optional<KnownPeer> known;
  {
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(m.decode_worker_id());
    if (it != peers_.end()) known = it->second;
  }
  if (known) {
    absl::Status alive = transfer_->CheckPeer(known->peer);
    if (alive.ok() && known->descriptor == m.transfer_descriptor() &&
        known->incarnation == m.incarnation()) {
      r->set_accepted(true);
      return SealControl(options_.cluster_secret, std::move(reply));
    }
    // The decode worker restarted (another incarnation or descriptor), or our connection to it
    // was lost and is not coming back by itself: forget the old peer and import anew.
    spdlog::info("bootstrap: decode worker {} registers again ({}): importing its descriptor",
                 m.decode_worker_id(),
                 !alive.ok() ? std::string(alive.message()) : std::string("it restarted"));
    (void)transfer_->RemovePeer(known->peer);
    absl::MutexLock lock(&mu_);
    auto it = peers_.find(m.decode_worker_id());
    if (it != peers_.end() && it->second.peer == known->peer) peers_.erase(it);
  }
  auto peer = transfer_->ImportPeer(m.transfer_descriptor());
  if (!peer.ok()) {
    r->set_accepted(false);
    r->set_error(absl::StrCat("prefill worker ", options_.worker_id,
                              " cannot reach the transfer endpoint of decode worker ",
                              m.decode_worker_id(), ": ", peer.status().message()));
    spdlog::warn("bootstrap: {}", r->error());
    return SealControl(options_.cluster_secret, std::move(reply));
  }
  {
    absl::MutexLock lock(&mu_);
    peers_[m.decode_worker_id()] = {*peer, m.transfer_descriptor(), m.incarnation()};
  }
  spdlog::info("bootstrap: decode worker {} registered", m.decode_worker_id());
  r->set_accepted(true);
  return SealControl(options_.cluster_secret, std::move(reply));
}

std::string PrefillHandoff::HandleRoom(const proto::RoomRegistration& m) {
  kv::PeerId peer = 0;
  {
    absl::MutexLock lock(&mu_);
    auto p = peers_.find(m.decode_worker_id());
    if (p != peers_.end()) peer = p->second.peer;
  }
  absl::Status alive = peer == 0 ? absl::NotFoundError(
                                       "unknown decode worker (it never "
                                       "registered with this process)")
                                 : transfer_->CheckPeer(peer);
  if (!alive.ok()) {
    spdlog::warn(
        "bootstrap: room {} from decode worker {} not started: {}; asking it to "
        "register again",
        m.bootstrap_room(), m.decode_worker_id(), std::string(alive.message()));
    proto::ControlMessage again;
    again.mutable_register_again()->set_bootstrap_room(m.bootstrap_room());
    again.mutable_register_again()->set_reason(
        absl::StrCat("prefill worker ", options_.worker_id, ": ", alive.message()));
    return SealControl(options_.cluster_secret, std::move(again));
  }
  Registration reg;
  reg.decode_id = m.decode_worker_id();
  reg.peer = peer;
  reg.blocks.assign(m.dst_block_ids().begin(), m.dst_block_ids().end());
  reg.num_tokens = m.num_tokens();
  // The decode worker's time left, counted on this host's monotonic clock from now: its wall
  // clock may differ from ours by minutes.
  reg.deadline = DeadlineFromBudget(m.budget_ms(), options_.now(), options_.room_budget());
  DeliverRegistration(m.bootstrap_room(), std::move(reg));
  return "";
}

}  // namespace tandem::worker

#include "worker/handoff/decode_handoff.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/spdlog.h"
#include "worker/handoff/control_channel.h"
#include "worker/handoff/decode_room.h"
#include "worker/handoff/handoff_clock.h"
#include "worker/handoff/kv_geometry.h"

namespace tandem::worker {

absl::StatusOr<std::unique_ptr<DecodeHandoff>> DecodeHandoff::Create(engine::Engine* engine,
                                                                     HandoffOptions options) {
  std::unique_ptr<DecodeHandoff> h(new DecodeHandoff(engine, std::move(options)));
  if (absl::Status s = h->Start(); !s.ok()) return s;
  return h;
}

namespace {

uint64_t RandomIncarnation() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

DecodeHandoff::DecodeHandoff(engine::Engine* engine, HandoffOptions options)
    : engine_(engine), options_(std::move(options)), incarnation_(RandomIncarnation()) {}

DecodeHandoff::~DecodeHandoff() { Shutdown(); }

absl::Status DecodeHandoff::Start() {
  engine::KvCacheStorage* storage = engine_->kv_storage();
  compat_ = KvCompatibility(options_.served_model_name, engine_->model_config(), *storage,
                            engine_->int8_linear());
  kv::EngineOptions eo;
  eo.name = options_.worker_id;
  eo.cluster_secret = options_.cluster_secret;
  eo.compat = compat_;
  eo.on_notification = [this](const std::string& peer, const std::string& msg) {
    OnNotification(peer, msg);
  };
  ASSIGN_OR_RETURN(transfer_, StartKvTransfer(options_.transfer, std::move(eo), *storage));
  auto descriptor = transfer_->ExportDescriptor();
  if (!descriptor.ok()) return descriptor.status();
  descriptor_ = *descriptor;
  background_ = std::thread([this] { BackgroundLoop(); });
  return absl::OkStatus();
}

void DecodeHandoff::Shutdown() {
  if (stop_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_cv_.notify_all();
  }
  if (background_.joinable()) background_.join();
  std::map<uint64_t, Room> rooms;
  {
    absl::MutexLock lock(&mu_);
    rooms.swap(rooms_);
  }
  for (auto& [room, r] : rooms) engine_->Abort(r.rid, "the decode worker is shutting down");
  if (transfer_) transfer_->Shutdown();
  std::map<std::string, std::shared_ptr<Peer>> peers;
  {
    absl::MutexLock lock(&mu_);
    peers.swap(peers_);
  }
  for (auto& [address, peer] : peers) {
    absl::MutexLock plock(&peer->mu);
    peer->socket.close();
  }
}

int64_t DecodeHandoff::inflight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(rooms_.size());
}

absl::StatusOr<std::shared_ptr<DecodeHandoff::Peer>> DecodeHandoff::GetPeer(const std::string& host,
                                                                            int port) {
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bootstrap_port ", port, " is not a port"));
  }
  const std::string address = absl::StrCat(host, ":", port);
  std::shared_ptr<Peer> peer;
  {
    absl::MutexLock lock(&mu_);
    auto& slot = peers_[address];
    if (!slot) {
      slot = std::make_shared<Peer>();
      slot->address = address;
    }
    peer = slot;
  }
  absl::MutexLock plock(&peer->mu);
  if (peer->registered) return peer;
  // (Re)connect and register; a failed attempt leaves no half-open socket behind.
  try {
    peer->socket = zmq::socket_t(zmq_context_, zmq::socket_type::dealer);
    peer->socket.set(zmq::sockopt::linger, 0);
    peer->socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlBytes));
    peer->socket.connect(absl::StrCat("tcp://", address));
    peer->socket.send(zmq::buffer(SealedRegisterPeer()), zmq::send_flags::dontwait);
    zmq::pollitem_t item{peer->socket.handle(), 0, ZMQ_POLLIN, 0};
    const auto timeout = absl::ToChronoMilliseconds(options_.bootstrap_timeout());
    zmq::poll(&item, 1, timeout);
    zmq::message_t reply;
    if (!(item.revents & ZMQ_POLLIN) || !peer->socket.recv(reply, zmq::recv_flags::dontwait)) {
      peer->socket.close();
      return absl::UnavailableError(absl::StrCat(
          "prefill worker ", address, " did not answer the bootstrap handshake within ",
          absl::FormatDuration(options_.bootstrap_timeout()),
          " (--bootstrap-timeout); it answers only a peer holding its cluster secret"));
    }
    auto answer = OpenControl(options_.cluster_secret, reply.to_string());
    if (!answer.ok()) {
      peer->socket.close();
      return absl::UnauthenticatedError(
          absl::StrCat("prefill worker ", address, ": ", answer.status().message()));
    }
    if (!answer->has_register_peer_reply()) {
      peer->socket.close();
      return absl::UnavailableError(
          absl::StrCat("prefill worker ", address, " answered the handshake with another message"));
    }
    const proto::RegisterPeerReply& rep = answer->register_peer_reply();
    if (!rep.accepted()) {
      peer->socket.close();
      return absl::FailedPreconditionError(
          absl::StrCat("prefill worker ", address, " refused this decode worker: ", rep.error()));
    }
    if (absl::Status s = kv::CheckCompatible(compat_, FromProto(rep.layout())); !s.ok()) {
      peer->socket.close();
      return absl::FailedPreconditionError(absl::StrCat("decode worker ", options_.worker_id,
                                                        " and prefill worker ", address,
                                                        " cannot share KV: ", s.message()));
    }
    peer->registered = true;
    spdlog::info("bootstrap: registered with prefill worker {} ({})", address,
                 rep.prefill_worker_id());
  } catch (const zmq::error_t& e) {
    peer->socket.close();
    return absl::UnavailableError(
        absl::StrCat("bootstrap connection to prefill worker ", address, ": ", e.what()));
  }
  return peer;
}

std::string DecodeHandoff::SealedRegisterPeer() const {
  proto::ControlMessage m;
  proto::RegisterPeer* r = m.mutable_register_peer();
  r->set_decode_worker_id(options_.worker_id);
  *r->mutable_layout() = ToProto(compat_);
  r->set_transfer_descriptor(descriptor_);
  r->set_incarnation(incarnation_);
  return SealControl(options_.cluster_secret, std::move(m));
}

void DecodeHandoff::Send(Peer* peer, const std::string& bytes) {
  absl::MutexLock plock(&peer->mu);
  if (!peer->registered) return;
  try {
    if (!peer->socket.send(zmq::buffer(bytes), zmq::send_flags::dontwait)) {
      spdlog::warn("bootstrap: send queue to prefill worker {} is full", peer->address);
    }
  } catch (const zmq::error_t& e) {
    spdlog::warn("bootstrap: send to prefill worker {}: {}", peer->address, e.what());
  }
}

absl::Status DecodeHandoff::PrepareDecodeLeg(const proto::DecodeRequest& leg,
                                             engine::Request* request) {
  if (stop_.load()) return absl::UnavailableError("the decode worker is shutting down");
  const uint64_t room = leg.bootstrap_room();
  if (room == 0) {
    return absl::InvalidArgumentError(
        "bootstrap_room must be set (non-zero) on a decode leg that names a prefill worker");
  }
  if (request->sampling.max_new_tokens == 0) {
    return absl::InvalidArgumentError(
        "sampling_params.max_new_tokens is 0: such a request has no decode leg (the prefill "
        "worker answers it alone)");
  }
  auto peer = GetPeer(leg.bootstrap_host(), leg.bootstrap_port());
  if (!peer.ok()) return peer.status();
  auto prefill_cached = std::make_shared<std::atomic<int64_t>>(-1);
  {
    absl::MutexLock lock(&mu_);
    if (rooms_.count(room)) {
      return absl::AlreadyExistsError(
          absl::StrCat("bootstrap room ", room, " is already waiting for its KV on this worker"));
    }
    rooms_.emplace(
        room, Room{request->rid, *peer,
                   DecodeRoomMachine(Deadline::At(options_.now() + ToMono(options_.room_budget()))),
                   prefill_cached});
  }
  request->mode = engine::RequestMode::kDecodeOnly;
  const int32_t num_tokens = static_cast<int32_t>(request->input_ids.size());
  std::shared_ptr<Peer> p = *peer;
  request->callbacks.on_reserved = [this, room, p, num_tokens](const std::vector<int32_t>& blocks) {
    proto::ControlMessage m;
    proto::RoomRegistration* r = m.mutable_room_registration();
    r->set_bootstrap_room(room);
    r->set_decode_worker_id(options_.worker_id);
    r->mutable_dst_block_ids()->Assign(blocks.begin(), blocks.end());
    r->set_num_tokens(num_tokens);
    DecodeRoomActions actions;
    {
      absl::MutexLock lock(&mu_);
      auto it = rooms_.find(room);
      if (it == rooms_.end()) return;
      const MonoClock::time_point now = options_.now();
      // The time left, not an instant: the prefill worker's clock may differ from ours.
      r->set_budget_ms(BudgetMs(it->second.machine.budget(), now));
      DecodeRoomEvent e{DecodeRoomEvent::Kind::kBlocksReserved, now};
      e.registration = SealControl(options_.cluster_secret, std::move(m));
      actions = it->second.machine.Apply(e);
    }
    if (actions.send_registration) Send(p.get(), *actions.send_registration);
  };
  auto user_output = std::move(request->callbacks.on_output);
  request->callbacks.on_output = [this, room, user_output,
                                  prefill_cached](const engine::RequestOutput& out) {
    if (out.last) {
      absl::MutexLock lock(&mu_);
      auto it = rooms_.find(room);
      if (it != rooms_.end() &&
          it->second.machine.Apply({DecodeRoomEvent::Kind::kRequestEnded, options_.now()}).forget) {
        rooms_.erase(it);
      }
    }
    if (!user_output) return;
    // Set before the engine took the first token, so every output with a token carries it.
    const int64_t cached = prefill_cached->load();
    if (cached < 0) {
      user_output(out);
      return;
    }
    engine::RequestOutput reported = out;
    reported.cached_tokens = cached;
    user_output(reported);
  };
  return absl::OkStatus();
}

absl::StatusOr<engine::SampleResult> FirstTokenOfNotice(const proto::CompletionNotice& c) {
  if (!c.ok()) return absl::AbortedError(c.error());
  if (c.first_token_top_ids_size() != c.first_token_top_logprobs_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prefill worker's completion notice for room ", c.bootstrap_room(),
                     " has ", c.first_token_top_ids_size(), " top-logprob ids but ",
                     c.first_token_top_logprobs_size(), " logprobs"));
  }
  engine::SampleResult first;
  first.token = c.first_token_id();
  first.logprob = c.first_token_logprob();
  for (int i = 0; i < c.first_token_top_ids_size(); ++i) {
    first.top.push_back({c.first_token_top_ids(i), c.first_token_top_logprobs(i)});
  }
  return first;
}

void DecodeHandoff::OnNotification(const std::string& from, const std::string& message) {
  auto m = OpenControl(options_.cluster_secret, message);
  if (!m.ok()) {
    spdlog::warn("notification from {} dropped: {}", from, std::string(m.status().message()));
    return;
  }
  if (!m->has_completion_notice()) return;
  const proto::CompletionNotice& c = m->completion_notice();
  absl::StatusOr<engine::SampleResult> first = FirstTokenOfNotice(c);
  std::string rid;
  DecodeRoomActions actions;
  {
    absl::MutexLock lock(&mu_);
    auto it = rooms_.find(c.bootstrap_room());
    if (it == rooms_.end()) return;  // aborted or timed out meanwhile
    rid = it->second.rid;
    DecodeRoomEvent e{DecodeRoomEvent::Kind::kNotice, options_.now()};
    e.ok = first.ok();
    if (!first.ok()) e.reason = std::string(first.status().message());
    actions = it->second.machine.Apply(e);
    if (actions.complete_transfer) it->second.prefill_cached->store(std::max(0, c.cached_tokens()));
    if (actions.forget) rooms_.erase(it);
  }
  if (actions.abort_engine) engine_->Abort(rid, *actions.abort_engine);
  if (actions.complete_transfer) {
    engine_->CompleteTransfer(rid, *std::move(first), [this, rid](absl::Status s) {
      if (!s.ok()) engine_->Abort(rid, std::string(s.message()));
    });
  }
}

void DecodeHandoff::ReadPeers() {
  std::vector<std::shared_ptr<Peer>> peers;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [address, peer] : peers_) peers.push_back(peer);
  }
  for (const std::shared_ptr<Peer>& peer : peers) {
    std::vector<proto::ControlMessage> got;
    {
      absl::MutexLock plock(&peer->mu);
      if (!peer->registered) continue;  // GetPeer owns the socket during a handshake
      try {
        zmq::message_t bytes;
        for (int n = 0; n < 256 && peer->socket.recv(bytes, zmq::recv_flags::dontwait); ++n) {
          auto m = OpenControl(options_.cluster_secret, bytes.to_string());
          if (!m.ok()) {
            // One line a second whatever arrives: whoever reaches this connection can send a
            // flood of these.
            int64_t more = 0;
            if (dropped_logs_.Allow(&more)) {
              spdlog::warn(
                  "bootstrap: message from prefill worker {} dropped: {} ({} more dropped since "
                  "the last line)",
                  peer->address, std::string(m.status().message()), more);
            }
            continue;
          }
          got.push_back(std::move(*m));
        }
      } catch (const zmq::error_t& e) {
        spdlog::warn("bootstrap: read from prefill worker {}: {}", peer->address, e.what());
      }
    }
    for (const proto::ControlMessage& m : got) {
      if (m.has_register_again()) OnRegisterAgain(peer, m.register_again());
      if (m.has_register_peer_reply()) OnRegisterReply(peer, m.register_peer_reply());
    }
  }
}

void DecodeHandoff::OnRegisterAgain(const std::shared_ptr<Peer>& peer,
                                    const proto::RegisterAgain& m) {
  std::optional<std::string> registration;
  {
    absl::MutexLock lock(&mu_);
    auto it = rooms_.find(m.bootstrap_room());
    if (it != rooms_.end() && it->second.peer == peer) {
      registration =
          it->second.machine.Apply({DecodeRoomEvent::Kind::kRegisterAgain, options_.now()})
              .send_registration;
    }
  }
  bool register_again = false;
  {
    absl::MutexLock plock(&peer->mu);
    const MonoClock::time_point now = options_.now();
    if (!peer->last_register_again || now - *peer->last_register_again >= std::chrono::seconds(1)) {
      peer->last_register_again = now;
      register_again = true;
    }
  }
  if (register_again) {
    spdlog::info("bootstrap: registering with prefill worker {} again: {}", peer->address,
                 m.reason());
    Send(peer.get(), SealedRegisterPeer());
  }
  // Behind the registration on the same connection, so the prefill worker knows us by then.
  if (registration) Send(peer.get(), *registration);
}

void DecodeHandoff::OnRegisterReply(const std::shared_ptr<Peer>& peer,
                                    const proto::RegisterPeerReply& m) {
  if (m.accepted()) {
    spdlog::info("bootstrap: registered with prefill worker {} ({}) again", peer->address,
                 m.prefill_worker_id());
    return;
  }
  const std::string why =
      absl::StrCat("prefill worker ", peer->address, " refused this decode worker: ", m.error());
  spdlog::warn("bootstrap: {}", why);
  {
    // The next leg handshakes on a new connection and gets the refusal as its error.
    absl::MutexLock plock(&peer->mu);
    peer->registered = false;
  }
  std::vector<std::pair<std::string, std::string>> aborts;  // rid, reason
  {
    absl::MutexLock lock(&mu_);
    for (auto it = rooms_.begin(); it != rooms_.end();) {
      DecodeRoomActions actions;
      if (it->second.peer == peer) {
        DecodeRoomEvent e{DecodeRoomEvent::Kind::kPeerRefused, options_.now()};
        e.reason = why;
        actions = it->second.machine.Apply(e);
      }
      if (actions.abort_engine) aborts.emplace_back(it->second.rid, *actions.abort_engine);
      it = actions.forget ? rooms_.erase(it) : std::next(it);
    }
  }
  for (const auto& [rid, reason] : aborts) engine_->Abort(rid, reason);
}

void DecodeHandoff::ExpireRooms() {
  struct Expired {
    uint64_t room;
    std::string rid;
    std::shared_ptr<Peer> peer;
    std::string why;
  };
  std::vector<Expired> expired;
  {
    absl::MutexLock lock(&mu_);
    const MonoClock::time_point now = options_.now();
    for (auto it = rooms_.begin(); it != rooms_.end();) {
      Room& r = it->second;
      if (!r.machine.waiting() || !Passed(r.machine.budget(), now)) {
        ++it;
        continue;
      }
      DecodeRoomEvent e{DecodeRoomEvent::Kind::kTick, now};
      e.reason = absl::StrCat("no KV cache from prefill worker ", r.peer->address, " for room ",
                              it->first, " within ", absl::FormatDuration(options_.room_budget()),
                              " (--bootstrap-timeout + --transfer-timeout)");
      DecodeRoomActions actions = r.machine.Apply(e);
      if (actions.abort_engine && actions.send_room_abort) {
        expired.push_back({it->first, r.rid, r.peer, *actions.abort_engine});
      }
      it = actions.forget ? rooms_.erase(it) : std::next(it);
    }
  }
  for (const Expired& x : expired) {
    engine_->Abort(x.rid, x.why);
    proto::ControlMessage m;
    m.mutable_room_abort()->set_bootstrap_room(x.room);
    m.mutable_room_abort()->set_reason(x.why);
    Send(x.peer.get(), SealControl(options_.cluster_secret, std::move(m)));
  }
}

void DecodeHandoff::BackgroundLoop() {
  while (!stop_.load()) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      stop_cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stop_.load(); });
    }
    if (stop_.load()) break;
    ReadPeers();
    ExpireRooms();
  }
}

}  // namespace tandem::worker

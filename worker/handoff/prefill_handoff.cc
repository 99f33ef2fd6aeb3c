#include "worker/handoff/prefill_handoff.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kvtransfer/frame.h"
#include "spdlog/spdlog.h"
#include "worker/conversions.h"
#include "worker/handoff/control_channel.h"
#include "worker/handoff/handoff_clock.h"
#include "worker/handoff/kv_geometry.h"

namespace tandem::worker {

// How long the transfer engine tries to deliver a failed leg's CompletionNotice(ok=false).
constexpr absl::Duration kFailureNoticeTimeout = absl::Seconds(5);

using Clock = MonoClock;

struct PrefillHandoff::Leg {
  uint64_t room = 0;
  std::string rid;  // the engine request's id: "p<room>"
  proto::PrefillRequest req;
  engine::SamplingParams sampling;
  PrefillDone done;
  Deadline bootstrap_deadline = Deadline::Never();
  Deadline transfer_deadline = Deadline::Never();  // set when the first layer's K/V is computed
  bool started = false;
  bool prefill_done = false;
  bool notified = false;
  bool finished = false;
  Registration reg;
  std::set<kv::BatchId> batches;
  int pending = 0;
  int32_t first_token = -1;
  float logprob = 0;
  std::vector<engine::TokenLogprob> top;  // the first token's alternatives, when asked for
  proto::PromptLogprobs prompt_logprobs;  // with return_logprob
  int64_t cached = 0;
  engine::RequestTimings timings;
  Clock::time_point t_start;
  Clock::time_point t_first_write;
};

absl::StatusOr<std::unique_ptr<PrefillHandoff>> PrefillHandoff::Create(engine::Engine* engine,
                                                                       HandoffOptions options) {
  std::unique_ptr<PrefillHandoff> h(new PrefillHandoff(engine, std::move(options)));
  if (absl::Status s = h->Start(); !s.ok()) return s;
  return h;
}

PrefillHandoff::PrefillHandoff(engine::Engine* engine, HandoffOptions options)
    : engine_(engine), options_(std::move(options)) {}

PrefillHandoff::~PrefillHandoff() { Shutdown(); }

absl::Status PrefillHandoff::Start() {
  engine::KvCacheStorage* storage = engine_->kv_storage();
  compat_ = KvCompatibility(options_.served_model_name, engine_->model_config(), *storage);
  kv::EngineOptions eo;
  eo.name = options_.worker_id;
  eo.cluster_secret = options_.cluster_secret;
  eo.compat = compat_;
  ASSIGN_OR_RETURN(transfer_, StartKvTransfer(options_.transfer, std::move(eo), *storage));
  try {
    router_ = zmq::socket_t(zmq_context_, zmq::socket_type::router);
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxControlBytes));
    router_.set(zmq::sockopt::handshake_ivl, kv::kZmqHandshakeMs);
    // Messages are queued per connection before the bootstrap thread can check their seal:
    // keep that queue short (ZMQ then stops reading the connection, it drops nothing), so a
    // connection holds at most kBootstrapQueuedMessages x kMaxControlBytes before the check.
    router_.set(zmq::sockopt::rcvhwm, kBootstrapQueuedMessages);
    const std::string port =
        options_.bootstrap_port == 0 ? "*" : std::to_string(options_.bootstrap_port);
    router_.bind(absl::StrCat("tcp://", options_.bootstrap_host, ":", port));
    const std::string endpoint = router_.get(zmq::sockopt::last_endpoint);
    bootstrap_port_ = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  } catch (const zmq::error_t& e) {
    transfer_->Shutdown();
    return absl::UnavailableError(absl::StrCat("--disaggregation-bootstrap-port: cannot listen on ",
                                               options_.bootstrap_host, ":",
                                               options_.bootstrap_port, ": ", e.what()));
  }
  bootstrap_thread_ = std::thread([this] { BootstrapLoop(); });
  return absl::OkStatus();
}

void PrefillHandoff::Shutdown() {
  if (stop_.exchange(true)) return;
  if (bootstrap_thread_.joinable()) bootstrap_thread_.join();
  std::vector<std::shared_ptr<Leg>> legs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [room, leg] : legs_) legs.push_back(leg);
  }
  for (auto& leg : legs) Fail(leg, absl::UnavailableError("the prefill worker is shutting down"));
  if (transfer_) transfer_->Shutdown();
  router_.close();
}

int64_t PrefillHandoff::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(legs_.size());
}

void PrefillHandoff::RunPrefill(const proto::PrefillRequest& request, PrefillDone done) {
  if (stop_.load()) {
    done(absl::UnavailableError("the prefill worker is shutting down"));
    return;
  }
  if (request.bootstrap_room() == 0) {
    done(absl::InvalidArgumentError("bootstrap_room must be set (non-zero) on a prefill leg"));
    return;
  }
  auto sampling = SamplingParamsFromProto(request.sampling_params(),
                                          static_cast<int32_t>(engine_->model_config().vocab_size));
  if (!sampling.ok()) {
    done(sampling.status());
    return;
  }
  auto leg = std::make_shared<Leg>();
  leg->room = request.bootstrap_room();
  leg->rid = absl::StrCat("p", leg->room);
  leg->req = request;
  leg->sampling = *sampling;
  leg->done = std::move(done);
  leg->t_start = options_.now();
  leg->bootstrap_deadline = Deadline::At(leg->t_start + ToMono(options_.bootstrap_timeout()));
  // max_new_tokens 0: the request ends here, with no decode leg and no room registration.
  const bool prefill_only = leg->sampling.max_new_tokens == 0;
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (legs_.count(leg->room)) {
      leg->finished = true;
    } else if (prefill_only) {
      legs_[leg->room] = leg;
      leg->started = true;
    } else {
      legs_[leg->room] = leg;
      auto it = registrations_.find(leg->room);
      if (it != registrations_.end()) {
        leg->reg = std::move(it->second);
        registrations_.erase(it);
        leg->started = start = true;
      }
    }
  }
  if (leg->finished) {
    leg->done(absl::AlreadyExistsError(
        absl::StrCat("bootstrap room ", leg->room, " already has a prefill leg on this worker")));
    return;
  }
  if (prefill_only) {
    StartPrefillOnlyLeg(leg);
  } else if (start) {
    StartLeg(leg);
  }
}

void PrefillHandoff::StartPrefillOnlyLeg(const std::shared_ptr<Leg>& leg) {
  engine::Request r;
  r.rid = leg->rid;
  r.input_ids.assign(leg->req.input_ids().begin(), leg->req.input_ids().end());
  r.sampling = leg->sampling;
  r.return_logprob = leg->req.return_logprob();
  if (leg->req.has_logprob_start_len()) r.logprob_start_len = leg->req.logprob_start_len();
  r.mode = engine::RequestMode::kGenerate;  // generates nothing, holds nothing afterwards
  r.callbacks.on_output = [this, leg](const engine::RequestOutput& out) {
    if (!out.last) return;
    if (out.finish && out.finish->kind == engine::FinishReason::Kind::kAbort) {
      Fail(leg, absl::AbortedError(out.finish->message));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (leg->finished) return;
      leg->finished = true;
      auto it = legs_.find(leg->room);
      if (it != legs_.end() && it->second == leg) legs_.erase(it);
    }
    proto::PrefillResponse resp;
    resp.set_bootstrap_room(leg->room);
    resp.set_first_token_id(-1);
    resp.set_prompt_tokens(leg->req.input_ids_size());
    resp.set_cached_tokens(static_cast<int32_t>(out.cached_tokens));
    proto::PhaseTimings* t = resp.mutable_timings();
    t->set_queue_s(out.timings.queue);
    t->set_prefill_compute_s(out.timings.prefill);
    t->set_first_token_s(std::chrono::duration<double>(options_.now() - leg->t_start).count());
    proto::DecodeEvent* event = resp.mutable_final_event();
    AppendOutput(out, leg->req.return_logprob(), event);
    *event->mutable_timings() = *t;
    leg->done(std::move(resp));
  };
  if (absl::Status s = engine_->Submit(std::move(r)); !s.ok()) Fail(leg, s);
}

void PrefillHandoff::StartLeg(const std::shared_ptr<Leg>& leg) {
  const int64_t n = leg->req.input_ids_size();
  const int64_t bs = engine_->config().block_size;
  if (leg->reg.num_tokens != n ||
      static_cast<int64_t>(leg->reg.blocks.size()) < (n + bs - 1) / bs) {
    Fail(leg, absl::InvalidArgumentError(
                  absl::StrCat("decode worker ", leg->reg.decode_id, " registered room ", leg->room,
                               " for ", leg->reg.num_tokens, " tokens in ", leg->reg.blocks.size(),
                               " blocks, but the prompt has ", n, " tokens")));
    return;
  }
  // --transfer-timeout counts from the moment the prefill starts computing (the first layer's
  // K/V), not while the request waits in this worker's queue behind others.
  engine::Request r;
  r.rid = leg->rid;
  r.input_ids.assign(leg->req.input_ids().begin(), leg->req.input_ids().end());
  r.sampling = leg->sampling;
  r.return_logprob = leg->req.return_logprob();
  if (leg->req.has_logprob_start_len()) r.logprob_start_len = leg->req.logprob_start_len();
  r.mode = engine::RequestMode::kPrefillOnly;
  r.callbacks.on_kv_layer = [this, leg](const engine::KvLayerEvent& e) { OnKvLayer(leg, e); };
  r.callbacks.on_output = [this, leg](const engine::RequestOutput& out) { OnOutput(leg, out); };
  if (absl::Status s = engine_->Submit(std::move(r)); !s.ok()) Fail(leg, s);
}

void PrefillHandoff::OnKvLayer(const std::shared_ptr<Leg>& leg, const engine::KvLayerEvent& e) {
  std::vector<kv::WriteOp> ops;
  kv::PeerId peer = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leg->finished) return;
    if (leg->transfer_deadline.is_never()) {
      leg->transfer_deadline = Deadline::At(options_.now() + ToMono(options_.transfer_timeout()));
    }
    ops = LayerWrites(*engine_->kv_storage(), e.layer, e.block_ids, leg->reg.blocks, e.begin_pos,
                      e.end_pos);
    if (ops.empty()) return;
    if (leg->t_first_write == Clock::time_point()) leg->t_first_write = options_.now();
    ++leg->pending;
    peer = leg->reg.peer;
  }
  kv::SubmitOptions so;
  so.deadline = TransferDeadline(leg->transfer_deadline, options_.now());
  so.on_done = [this, leg](kv::BatchId id, const kv::BatchStatus& st) { OnBatchDone(leg, id, st); };
  auto submitted = transfer_->Submit(peer, ops, std::move(so));
  if (!submitted.ok() || !submitted->accepted) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --leg->pending;
    }
    Fail(leg, submitted.ok()
                  ? absl::ResourceExhaustedError(absl::StrCat("KV transfer queue to decode worker ",
                                                              leg->reg.decode_id, " is full"))
                  : absl::Status(submitted.status().code(),
                                 absl::StrCat("KV transfer to decode worker ", leg->reg.decode_id,
                                              ": ", submitted.status().message())));
    return;
  }
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leg->finished) {
      cancel = true;
    } else {
      leg->batches.insert(submitted->id);
    }
  }
  if (cancel) (void)transfer_->Cancel(submitted->id);
}

void PrefillHandoff::OnBatchDone(const std::shared_ptr<Leg>& leg, kv::BatchId id,
                                 const kv::BatchStatus& st) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    leg->batches.erase(id);
    --leg->pending;
    if (leg->finished) return;
  }
  if (st.state != kv::BatchState::kCompleted) {
    const absl::StatusCode code = st.state == kv::BatchState::kTimedOut
                                      ? absl::StatusCode::kDeadlineExceeded
                                      : absl::StatusCode::kUnavailable;
    Fail(leg,
         absl::Status(code, absl::StrCat("KV transfer to decode worker ", leg->reg.decode_id, " ",
                                         kv::BatchStateName(st.state), ": ", st.error.message())));
    return;
  }
  MaybeComplete(leg);
}

void PrefillHandoff::OnOutput(const std::shared_ptr<Leg>& leg, const engine::RequestOutput& out) {
  if (out.kv_held && !out.token_ids.empty()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      leg->prefill_done = true;
      leg->first_token = out.token_ids[0];
      leg->logprob = out.logprobs.empty() ? 0.0f : out.logprobs[0];
      if (!out.top_logprobs.empty()) leg->top = out.top_logprobs[0];
      if (leg->req.return_logprob() && out.input_logprob_start >= 0) {
        PromptLogprobsToProto(out, &leg->prompt_logprobs);
      }
      leg->cached = out.cached_tokens;
      leg->timings = out.timings;
    }
    MaybeComplete(leg);
    return;
  }
  if (out.last) {
    const std::string why = out.finish && !out.finish->message.empty()
                                ? out.finish->message
                                : std::string("the prefill ended without a first token");
    Fail(leg, absl::AbortedError(why));
  }
}

void PrefillHandoff::MaybeComplete(const std::shared_ptr<Leg>& leg) {
  proto::ControlMessage m;
  kv::PeerId peer = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leg->finished || leg->notified || !leg->prefill_done || leg->pending > 0) return;
    leg->notified = true;
    peer = leg->reg.peer;
    proto::CompletionNotice* c = m.mutable_completion_notice();
    c->set_bootstrap_room(leg->room);
    c->set_ok(true);
    c->set_first_token_id(leg->first_token);
    c->set_first_token_logprob(leg->logprob);
    for (const engine::TokenLogprob& t : leg->top) {
      c->add_first_token_top_ids(t.token);
      c->add_first_token_top_logprobs(t.logprob);
    }
    c->set_cached_tokens(static_cast<int32_t>(leg->cached));
    c->set_prefill_compute_s(leg->timings.prefill);
    if (leg->t_first_write != Clock::time_point()) {
      c->set_transfer_s(std::chrono::duration<double>(options_.now() - leg->t_first_write).count());
    }
  }
  kv::SubmitOptions so;
  const Clock::time_point now = options_.now();
  so.deadline = TransferDeadline(leg->transfer_deadline.is_never()
                                     ? Deadline::At(now + ToMono(options_.transfer_timeout()))
                                     : leg->transfer_deadline,
                                 now);
  so.on_done = [this, leg](kv::BatchId, const kv::BatchStatus& st) {
    if (st.state != kv::BatchState::kCompleted) {
      Fail(leg, absl::UnavailableError(
                    absl::StrCat("completion notice to decode worker ", leg->reg.decode_id, " ",
                                 kv::BatchStateName(st.state), ": ", st.error.message())));
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (leg->finished) return;
      leg->finished = true;
      auto it = legs_.find(leg->room);
      if (it != legs_.end() && it->second == leg) legs_.erase(it);
    }
    engine_->ReleaseHeld(leg->rid);
    proto::PrefillResponse resp;
    resp.set_bootstrap_room(leg->room);
    resp.set_first_token_id(leg->first_token);
    resp.set_first_token_logprob(leg->logprob);
    resp.set_prompt_tokens(leg->req.input_ids_size());
    resp.set_cached_tokens(static_cast<int32_t>(leg->cached));
    if (leg->req.return_logprob()) *resp.mutable_prompt_logprobs() = leg->prompt_logprobs;
    proto::PhaseTimings* t = resp.mutable_timings();
    t->set_queue_s(leg->timings.queue);
    t->set_prefill_compute_s(leg->timings.prefill);
    if (leg->t_first_write != Clock::time_point()) {
      t->set_transfer_s(std::chrono::duration<double>(options_.now() - leg->t_first_write).count());
    }
    t->set_first_token_s(std::chrono::duration<double>(options_.now() - leg->t_start).count());
    leg->done(std::move(resp));
  };
  auto id =
      transfer_->Notify(peer, SealControl(options_.cluster_secret, std::move(m)), std::move(so));
  if (!id.ok()) Fail(leg, id.status());
}

void PrefillHandoff::Fail(const std::shared_ptr<Leg>& leg, absl::Status status) {
  std::vector<kv::BatchId> batches;
  bool registered = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leg->finished) return;
    leg->finished = true;
    auto it = legs_.find(leg->room);
    if (it != legs_.end() && it->second == leg) legs_.erase(it);
    batches.assign(leg->batches.begin(), leg->batches.end());
    registered = leg->reg.peer != 0;
  }
  spdlog::warn("prefill leg for room {} failed: {}", leg->room, std::string(status.message()));
  for (kv::BatchId id : batches) (void)transfer_->Cancel(id);
  if (registered && transfer_->state() == kv::EngineState::kServing) {
    // Delivered after every write that reached the network, so the decode worker can free the
    // room's blocks knowing nothing more lands in them.
    proto::ControlMessage m;
    proto::CompletionNotice* c = m.mutable_completion_notice();
    c->set_bootstrap_room(leg->room);
    c->set_ok(false);
    c->set_error(absl::StrCat("prefill worker ", options_.worker_id, ": ", status.message()));
    kv::SubmitOptions so;
    const Clock::time_point now = options_.now();
    so.deadline = TransferDeadline(Deadline::At(now + ToMono(kFailureNoticeTimeout)), now);
    so.on_done = [](kv::BatchId, const kv::BatchStatus&) {};
    (void)transfer_->Notify(leg->reg.peer, SealControl(options_.cluster_secret, std::move(m)),
                            std::move(so));
  }
  engine_->Abort(leg->rid, std::string(status.message()));
  leg->done(std::move(status));
}

bool PrefillHandoff::AbortRoom(uint64_t room, const std::string& reason) {
  std::shared_ptr<Leg> leg;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = legs_.find(room);
    if (it == legs_.end()) {
      registrations_.erase(room);
      return false;
    }
    leg = it->second;
  }
  Fail(leg, absl::AbortedError(reason));
  return true;
}

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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
    peers_[m.decode_worker_id()] = {*peer, m.transfer_descriptor(), m.incarnation()};
  }
  spdlog::info("bootstrap: decode worker {} registered", m.decode_worker_id());
  r->set_accepted(true);
  return SealControl(options_.cluster_secret, std::move(reply));
}

std::string PrefillHandoff::HandleRoom(const proto::RoomRegistration& m) {
  kv::PeerId peer = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
  std::shared_ptr<Leg> start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Registration reg;
    reg.decode_id = m.decode_worker_id();
    reg.peer = peer;
    reg.blocks.assign(m.dst_block_ids().begin(), m.dst_block_ids().end());
    reg.num_tokens = m.num_tokens();
    // The decode worker's time left, counted on this host's monotonic clock from now: its wall
    // clock may differ from ours by minutes.
    reg.deadline = DeadlineFromBudget(m.budget_ms(), options_.now(), options_.room_budget());
    auto it = legs_.find(m.bootstrap_room());
    if (it == legs_.end()) {
      constexpr size_t kMaxEarlyRegistrations = 1 << 16;
      if (registrations_.size() < kMaxEarlyRegistrations) {
        registrations_[m.bootstrap_room()] = std::move(reg);
      }
      return "";
    }
    if (it->second->started) return "";  // a duplicate registration
    it->second->reg = std::move(reg);
    it->second->started = true;
    start = it->second;
  }
  StartLeg(start);
  return "";
}

void PrefillHandoff::CheckDeadlines() {
  const Clock::time_point now = options_.now();
  std::vector<std::pair<std::shared_ptr<Leg>, absl::Status>> expired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [room, leg] : legs_) {
      if (!leg->started && Passed(leg->bootstrap_deadline, now)) {
        expired.emplace_back(leg, absl::DeadlineExceededError(absl::StrCat(
                                      "no decode worker registered room ", room, " within ",
                                      absl::FormatDuration(options_.bootstrap_timeout()),
                                      " (--bootstrap-timeout)")));
      } else if (leg->started && Passed(leg->transfer_deadline, now)) {
        expired.emplace_back(
            leg, absl::DeadlineExceededError(absl::StrCat(
                     "room ", room, ": the KV did not reach decode worker ", leg->reg.decode_id,
                     " within ", absl::FormatDuration(options_.transfer_timeout()),
                     " (--transfer-timeout)")));
      }
    }
    for (auto it = registrations_.begin(); it != registrations_.end();) {
      it = Passed(it->second.deadline, now) ? registrations_.erase(it) : std::next(it);
    }
  }
  for (auto& [leg, status] : expired) Fail(leg, status);
}

}  // namespace tandem::worker

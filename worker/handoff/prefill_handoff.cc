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
#include "worker/handoff/prefill_leg.h"

namespace tandem::worker {

// How long the transfer engine tries to deliver a failed leg's CompletionNotice(ok=false).
constexpr absl::Duration kFailureNoticeTimeout = absl::Seconds(5);

using Clock = MonoClock;

// One prefill leg. The fields above `mu` are set before the leg is shared and then only read.
struct PrefillHandoff::Leg {
  Leg(uint64_t room, const proto::PrefillRequest& request, engine::SamplingParams params,
      PrefillDone done_cb, MonoClock::time_point start, const HandoffOptions& options)
      : room(room),
        rid(absl::StrCat("p", room)),
        req(request),
        sampling(std::move(params)),
        prefill_only(sampling.max_new_tokens == 0),
        done(std::move(done_cb)),
        t_start(start),
        machine(room, prefill_only, Deadline::At(start + ToMono(options.bootstrap_timeout())),
                options.bootstrap_timeout(), options.transfer_timeout()) {}

  const uint64_t room;
  const std::string rid;  // the engine request's id: "p<room>"
  const proto::PrefillRequest req;
  const engine::SamplingParams sampling;
  // max_new_tokens 0: the request ends here, with no decode leg and no room registration.
  const bool prefill_only;
  const PrefillDone done;  // called once, by whoever carries out the terminal transition
  const MonoClock::time_point t_start;

  absl::Mutex mu;
  PrefillLegMachine machine ABSL_GUARDED_BY(mu);
  Registration reg ABSL_GUARDED_BY(mu);  // set by RoomRegistered
  int32_t first_token ABSL_GUARDED_BY(mu) = -1;
  float logprob ABSL_GUARDED_BY(mu) = 0;
  std::vector<engine::TokenLogprob> top ABSL_GUARDED_BY(mu);  // with top_logprobs_num
  proto::PromptLogprobs prompt_logprobs ABSL_GUARDED_BY(mu);  // with return_logprob
  int64_t cached ABSL_GUARDED_BY(mu) = 0;
  engine::RequestTimings timings ABSL_GUARDED_BY(mu);
  MonoClock::time_point t_first_write ABSL_GUARDED_BY(mu);
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
  compat_ = KvCompatibility(options_.served_model_name, engine_->model_config(), *storage,
                            engine_->int8_linear());
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
    absl::MutexLock lock(&mu_);
    for (auto& [room, leg] : legs_) legs.push_back(leg);
  }
  for (auto& leg : legs) {
    Apply(leg, Failure(absl::UnavailableError("the prefill worker is shutting down")));
  }
  if (transfer_) transfer_->Shutdown();
  router_.close();
}

int64_t PrefillHandoff::inflight() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(legs_.size());
}

PrefillLegEvent PrefillHandoff::Failure(absl::Status status) {
  return {PrefillLegEvent::Kind::kFailure, "", 0, std::move(status), {}};
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
                                          static_cast<int32_t>(engine_->model_config().vocab_size),
                                          engine_->request_seeds());
  if (!sampling.ok()) {
    done(sampling.status());
    return;
  }
  auto leg = std::make_shared<Leg>(request.bootstrap_room(), request, *std::move(sampling),
                                   std::move(done), options_.now(), options_);
  std::optional<Registration> early;
  bool duplicate = false;
  {
    absl::MutexLock lock(&mu_);
    duplicate = legs_.count(leg->room) > 0;
    if (!duplicate) legs_[leg->room] = leg;
    auto it = registrations_.find(leg->room);
    if (!duplicate && !leg->prefill_only && it != registrations_.end()) {
      early = std::move(it->second);
      registrations_.erase(it);
    }
  }
  if (duplicate) {
    leg->done(absl::AlreadyExistsError(
        absl::StrCat("bootstrap room ", leg->room, " already has a prefill leg on this worker")));
    return;
  }
  if (leg->prefill_only) {
    StartPrefillOnlyLeg(leg);
  } else if (early) {
    Register(leg, *std::move(early));
  }
}

void PrefillHandoff::DeliverRegistration(uint64_t room, Registration reg) {
  std::shared_ptr<Leg> leg;
  {
    absl::MutexLock lock(&mu_);
    auto it = legs_.find(room);
    if (it == legs_.end()) {
      // Before its leg: kept (within its budget) until the leg comes.
      constexpr size_t kMaxEarlyRegistrations = 1 << 16;
      if (registrations_.size() < kMaxEarlyRegistrations) registrations_[room] = std::move(reg);
      return;
    }
    leg = it->second;
  }
  Register(leg, std::move(reg));
}

void PrefillHandoff::Register(const std::shared_ptr<Leg>& leg, Registration reg) {
  PrefillLegActions actions;
  {
    absl::MutexLock lock(&leg->mu);
    PrefillLegEvent e{PrefillLegEvent::Kind::kRoomRegistered, reg.decode_id, 0, {}, {}};
    actions = leg->machine.Apply(e);
    if (actions.start_prefill) leg->reg = std::move(reg);  // else a duplicate: ignored
  }
  Run(leg, std::move(actions));
}

void PrefillHandoff::Apply(const std::shared_ptr<Leg>& leg, const PrefillLegEvent& event) {
  PrefillLegActions actions;
  {
    absl::MutexLock lock(&leg->mu);
    actions = leg->machine.Apply(event);
  }
  Run(leg, std::move(actions));
}

void PrefillHandoff::Forget(const std::shared_ptr<Leg>& leg) {
  absl::MutexLock lock(&mu_);
  auto it = legs_.find(leg->room);
  if (it != legs_.end() && it->second == leg) legs_.erase(it);
}

void PrefillHandoff::Run(const std::shared_ptr<Leg>& leg, PrefillLegActions actions) {
  for (kv::BatchId id : actions.cancel) (void)transfer_->Cancel(id);
  if (actions.fail) {
    Forget(leg);
    const absl::Status status = *std::move(actions.fail);
    spdlog::warn("prefill leg for room {} failed: {}", leg->room, std::string(status.message()));
    if (actions.notify_decode && transfer_->state() == kv::EngineState::kServing) {
      // Delivered after every write that reached the network, so the decode worker can free the
      // room's blocks knowing nothing more lands in them.
      kv::PeerId peer = 0;
      {
        absl::MutexLock lock(&leg->mu);
        peer = leg->reg.peer;
      }
      proto::ControlMessage m;
      proto::CompletionNotice* c = m.mutable_completion_notice();
      c->set_bootstrap_room(leg->room);
      c->set_ok(false);
      c->set_error(absl::StrCat("prefill worker ", options_.worker_id, ": ", status.message()));
      kv::SubmitOptions so;
      const Clock::time_point now = options_.now();
      so.deadline = TransferDeadline(Deadline::At(now + ToMono(kFailureNoticeTimeout)), now);
      so.on_done = [](kv::BatchId, const kv::BatchStatus&) {};
      (void)transfer_->Notify(peer, SealControl(options_.cluster_secret, std::move(m)),
                              std::move(so));
    }
    engine_->Abort(leg->rid, std::string(status.message()));
    leg->done(status);
    return;
  }
  if (actions.start_prefill) StartLeg(leg);
  if (actions.send_notice) SendNotice(leg);
  if (actions.finish) {
    Forget(leg);
    engine_->ReleaseHeld(leg->rid);
    leg->done(Answer(leg));
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
      Apply(leg, Failure(absl::AbortedError(out.finish->message)));
      return;
    }
    PrefillLegActions actions;
    {
      absl::MutexLock lock(&leg->mu);
      actions = leg->machine.Apply({PrefillLegEvent::Kind::kPrefillOnlyDone, "", 0, {}, {}});
    }
    if (!actions.finish) return;  // failed meanwhile (an abort): already answered
    Forget(leg);
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
  if (absl::Status s = engine_->Submit(std::move(r)); !s.ok()) Apply(leg, Failure(s));
}

void PrefillHandoff::StartLeg(const std::shared_ptr<Leg>& leg) {
  const int64_t n = leg->req.input_ids_size();
  const int64_t bs = engine_->config().block_size;
  Registration reg;
  {
    absl::MutexLock lock(&leg->mu);
    reg = leg->reg;
  }
  if (reg.num_tokens != n || static_cast<int64_t>(reg.blocks.size()) < (n + bs - 1) / bs) {
    Apply(leg, Failure(absl::InvalidArgumentError(
                   absl::StrCat("decode worker ", reg.decode_id, " registered room ", leg->room,
                                " for ", reg.num_tokens, " tokens in ", reg.blocks.size(),
                                " blocks, but the prompt has ", n, " tokens"))));
    return;
  }
  engine::Request r;
  r.rid = leg->rid;
  r.input_ids.assign(leg->req.input_ids().begin(), leg->req.input_ids().end());
  r.sampling = leg->sampling;
  r.return_logprob = leg->req.return_logprob();
  if (leg->req.has_logprob_start_len()) r.logprob_start_len = leg->req.logprob_start_len();
  r.mode = engine::RequestMode::kPrefillOnly;
  r.callbacks.on_kv_layer = [this, leg](const engine::KvLayerEvent& e) { OnKvLayer(leg, e); };
  r.callbacks.on_output = [this, leg](const engine::RequestOutput& out) { OnOutput(leg, out); };
  if (absl::Status s = engine_->Submit(std::move(r)); !s.ok()) Apply(leg, Failure(s));
}

void PrefillHandoff::OnKvLayer(const std::shared_ptr<Leg>& leg, const engine::KvLayerEvent& e) {
  using Kind = PrefillLegEvent::Kind;
  std::vector<kv::WriteOp> ops;
  kv::PeerId peer = 0;
  std::string decode_id;
  Deadline deadline = Deadline::Never();
  {
    absl::MutexLock lock(&leg->mu);
    const Clock::time_point now = options_.now();
    (void)leg->machine.Apply({Kind::kLayerComputed, "", 0, {}, now});
    if (!leg->machine.writing()) return;
    ops = LayerWrites(*engine_->kv_storage(), e.layer, e.block_ids, leg->reg.blocks, e.begin_pos,
                      e.end_pos);
    if (ops.empty()) return;
    if (leg->t_first_write == Clock::time_point()) leg->t_first_write = now;
    (void)leg->machine.Apply({Kind::kWriteStarting, "", 0, {}, now});
    peer = leg->reg.peer;
    decode_id = leg->reg.decode_id;
    deadline = leg->machine.transfer_deadline();
  }
  kv::SubmitOptions so;
  so.deadline = TransferDeadline(deadline, options_.now());
  so.on_done = [this, leg, decode_id](kv::BatchId id, const kv::BatchStatus& st) {
    absl::Status status;
    if (st.state != kv::BatchState::kCompleted) {
      const absl::StatusCode code = st.state == kv::BatchState::kTimedOut
                                        ? absl::StatusCode::kDeadlineExceeded
                                        : absl::StatusCode::kUnavailable;
      status =
          absl::Status(code, absl::StrCat("KV transfer to decode worker ", decode_id, " ",
                                          kv::BatchStateName(st.state), ": ", st.error.message()));
    }
    Apply(leg, {Kind::kWriteDone, "", id, std::move(status), {}});
  };
  auto submitted = transfer_->Submit(peer, ops, std::move(so));
  if (!submitted.ok() || !submitted->accepted) {
    // Never submitted, so no kWriteDone follows: the write is done here, as failed.
    Apply(leg,
          {Kind::kWriteDone,
           "",
           0,
           submitted.ok() ? absl::ResourceExhaustedError(absl::StrCat(
                                "KV transfer queue to decode worker ", decode_id, " is full"))
                          : absl::Status(submitted.status().code(),
                                         absl::StrCat("KV transfer to decode worker ", decode_id,
                                                      ": ", submitted.status().message())),
           {}});
    return;
  }
  Apply(leg, {Kind::kWriteSubmitted, "", submitted->id, {}, {}});
}

void PrefillHandoff::OnOutput(const std::shared_ptr<Leg>& leg, const engine::RequestOutput& out) {
  if (out.kv_held && !out.token_ids.empty()) {
    PrefillLegActions actions;
    {
      absl::MutexLock lock(&leg->mu);
      leg->first_token = out.token_ids[0];
      leg->logprob = out.logprobs.empty() ? 0.0f : out.logprobs[0];
      if (!out.top_logprobs.empty()) leg->top = out.top_logprobs[0];
      if (leg->req.return_logprob() && out.input_logprob_start >= 0) {
        PromptLogprobsToProto(out, &leg->prompt_logprobs);
      }
      leg->cached = out.cached_tokens;
      leg->timings = out.timings;
      actions = leg->machine.Apply({PrefillLegEvent::Kind::kFirstToken, "", 0, {}, {}});
    }
    Run(leg, std::move(actions));
    return;
  }
  if (out.last) {
    const std::string why = out.finish && !out.finish->message.empty()
                                ? out.finish->message
                                : std::string("the prefill ended without a first token");
    Apply(leg, Failure(absl::AbortedError(why)));
  }
}

void PrefillHandoff::SendNotice(const std::shared_ptr<Leg>& leg) {
  proto::ControlMessage m;
  kv::PeerId peer = 0;
  std::string decode_id;
  Deadline deadline = Deadline::Never();
  const Clock::time_point now = options_.now();
  {
    absl::MutexLock lock(&leg->mu);
    peer = leg->reg.peer;
    decode_id = leg->reg.decode_id;
    deadline = leg->machine.transfer_deadline();
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
      c->set_transfer_s(std::chrono::duration<double>(now - leg->t_first_write).count());
    }
  }
  kv::SubmitOptions so;
  // A prompt with nothing to write (every layer empty) never started the transfer deadline.
  if (deadline.is_never()) deadline = Deadline::At(now + ToMono(options_.transfer_timeout()));
  so.deadline = TransferDeadline(deadline, now);
  so.on_done = [this, leg, decode_id](kv::BatchId, const kv::BatchStatus& st) {
    absl::Status status;
    if (st.state != kv::BatchState::kCompleted) {
      status = absl::UnavailableError(absl::StrCat("completion notice to decode worker ", decode_id,
                                                   " ", kv::BatchStateName(st.state), ": ",
                                                   st.error.message()));
    }
    Apply(leg, {PrefillLegEvent::Kind::kNoticeDelivered, "", 0, std::move(status), {}});
  };
  auto id =
      transfer_->Notify(peer, SealControl(options_.cluster_secret, std::move(m)), std::move(so));
  if (!id.ok()) {
    Apply(leg, {PrefillLegEvent::Kind::kNoticeDelivered, "", 0, id.status(), {}});
  }
}

proto::PrefillResponse PrefillHandoff::Answer(const std::shared_ptr<Leg>& leg) {
  const Clock::time_point now = options_.now();
  absl::MutexLock lock(&leg->mu);
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
    t->set_transfer_s(std::chrono::duration<double>(now - leg->t_first_write).count());
  }
  t->set_first_token_s(std::chrono::duration<double>(now - leg->t_start).count());
  return resp;
}

bool PrefillHandoff::AbortRoom(uint64_t room, const std::string& reason) {
  std::shared_ptr<Leg> leg;
  {
    absl::MutexLock lock(&mu_);
    auto it = legs_.find(room);
    if (it == legs_.end()) {
      registrations_.erase(room);
      return false;
    }
    leg = it->second;
  }
  Apply(leg, Failure(absl::AbortedError(reason)));
  return true;
}

void PrefillHandoff::CheckDeadlines() {
  const Clock::time_point now = options_.now();
  std::vector<std::shared_ptr<Leg>> legs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [room, leg] : legs_) legs.push_back(leg);
    for (auto it = registrations_.begin(); it != registrations_.end();) {
      it = Passed(it->second.deadline, now) ? registrations_.erase(it) : std::next(it);
    }
  }
  for (const std::shared_ptr<Leg>& leg : legs) {
    Apply(leg, {PrefillLegEvent::Kind::kTick, "", 0, {}, now});
  }
}

}  // namespace tandem::worker

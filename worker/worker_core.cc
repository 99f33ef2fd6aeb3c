#include "worker/worker_core.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/kv_event_log.h"
#include "common/status.h"
#include "common/steady_cond_var.h"
#include "common/version.h"
#include "worker/conversions.h"

namespace tandem::worker {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// `seconds` from now on the steady clock, saturating: a timeout past ~30 years (or NaN) never
// passes, where converting it would overflow.
MonoClock::time_point SteadyDeadlineAfter(double seconds) {
  if (!(seconds < 1e9)) return MonoClock::time_point::max();
  return Deadline::After(RealClock(), std::chrono::duration_cast<MonoClock::duration>(
                                          std::chrono::duration<double>(std::max(seconds, 0.0))))
      .when();
}

proto::HealthResponse MakeHealth(proto::HealthResponse::Status status, std::string message) {
  proto::HealthResponse h;
  h.set_status(status);
  h.set_message(std::move(message));
  return h;
}

proto::ServerInfo::Role RoleToProto(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return proto::ServerInfo::PREFILL;
    case WorkerRole::kDecode:
      return proto::ServerInfo::DECODE;
    case WorkerRole::kColocated:
      return proto::ServerInfo::COLOCATED;
  }
  return proto::ServerInfo::ROLE_UNSPECIFIED;
}

}  // namespace

absl::Status CheckSharePromptWith(const proto::DecodeRequest& request) {
  const std::string& share = request.share_prompt_with();
  if (share.size() > kMaxSharePromptWithBytes) {
    return absl::InvalidArgumentError(absl::StrCat("share_prompt_with must be at most ",
                                                   kMaxSharePromptWithBytes, " bytes, got ",
                                                   share.size()));
  }
  for (size_t i = 0; i < share.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(share[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("share_prompt_with must be printable ASCII (0x20-0x7e); byte ", i, " is ",
                       static_cast<int>(c)));
    }
  }
  if (!request.bootstrap_host().empty()) {
    return absl::InvalidArgumentError(
        "share_prompt_with and bootstrap_host exclude each other: a leg that shares a live "
        "leg's prompt KV receives none from a prefill worker");
  }
  if (share == request.rid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("share_prompt_with names the leg itself ('", share, "')"));
  }
  return absl::OkStatus();
}

struct WorkerCore::Leg {
  std::string rid;
  uint64_t serial = 0;
  uint64_t room = 0;
  bool stream = true;
  bool return_logprob = false;
  bool had_transfer = false;  // fed by a prefill worker
  DecodeEventSink sink;
  Clock::time_point start;
  std::atomic<bool> cancelled{false};  // the client went away
  // Touched only on the engine loop thread:
  std::optional<Clock::time_point> first_token;
  proto::DecodeEvent pending;  // a non-streaming leg's accumulated event
};

WorkerCore::WorkerCore(engine::Engine* engine, WorkerCoreOptions options, MetricsRegistry* registry,
                       KvHandoff* handoff, PrefillLegs* prefill)
    : engine_(engine),
      options_(std::move(options)),
      handoff_(handoff),
      prefill_(prefill),
      phase_metrics_(registry, options_.served_model_name) {}

void WorkerCore::StartPrefill(const proto::PrefillRequest& request, PrefillLegs::PrefillDone done) {
  if (options_.role != WorkerRole::kPrefill || prefill_ == nullptr) {
    phase_metrics_.RecordRejected();
    done(absl::FailedPreconditionError(
        "this worker is not a prefill worker: send prefill legs to tandem-prefill"));
    return;
  }
  if (draining_.load()) {
    phase_metrics_.RecordRejected();
    done(absl::UnavailableError(
        "draining: this worker is shutting down and admits no new requests"));
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    ++prefill_legs_;
  }
  prefill_->RunPrefill(
      request, [this, done = std::move(done)](absl::StatusOr<proto::PrefillResponse> response) {
        LegTimings t;
        if (response.ok()) {
          cache_hit_tokens_ += response->cached_tokens();
          cache_query_tokens_ += response->prompt_tokens();
          t.queue = response->timings().queue_s();
          t.prefill_compute = response->timings().prefill_compute_s();
          t.transfer = response->timings().transfer_s();
          t.first_token = response->timings().first_token_s();
        }
        phase_metrics_.RecordLeg(t, response.ok(),
                                 response.ok() ? LegOutcome::kFinished : LegOutcome::kAborted,
                                 /*completion_tokens=*/0);  // the decode worker counts them
        done(std::move(response));
        absl::MutexLock lock(&mu_);
        --prefill_legs_;
        legs_changed_.SignalAll();
      });
}

WorkerCore::~WorkerCore() = default;

std::string WorkerCore::NewRid(const char* prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrFormat("%s%016x", prefix, rng());
}

absl::StatusOr<LegId> WorkerCore::StartDecode(const proto::DecodeRequest& request,
                                              DecodeEventSink sink) {
  auto reject = [this](absl::Status s) {
    phase_metrics_.RecordRejected();
    return s;
  };
  if (draining_.load()) {
    return reject(absl::UnavailableError(
        "draining: this worker is shutting down and admits no new requests"));
  }
  const bool remote = !request.bootstrap_host().empty();
  const std::string& share = request.share_prompt_with();
  if (!share.empty()) {
    if (absl::Status s = CheckSharePromptWith(request); !s.ok()) return reject(s);
    if (options_.role == WorkerRole::kPrefill) {
      return reject(absl::FailedPreconditionError(
          "share_prompt_with is for decode and colocated workers: this is a prefill worker"));
    }
  } else if (!remote && options_.role != WorkerRole::kColocated &&
             !(options_.role == WorkerRole::kDecode && options_.decode_takes_colocated_legs)) {
    return reject(absl::FailedPreconditionError(
        options_.role == WorkerRole::kDecode
            ? "the request names no prefill worker (bootstrap_host is empty) but this decode "
              "worker runs with --allow-local-prefill=false (and without --local-prefill) and does "
              "not "
              "prefill it"
            : "the request names no prefill worker (bootstrap_host is empty) but this worker runs "
              "without --local-prefill and cannot prefill it"));
  }
  if (remote && options_.role == WorkerRole::kColocated) {
    return reject(absl::FailedPreconditionError(
        absl::StrCat("the request names prefill worker ", request.bootstrap_host(), ":",
                     request.bootstrap_port(),
                     " but this worker runs with --local-prefill and takes no KV "
                     "handoff")));
  }
  if (remote && handoff_ == nullptr) {
    return reject(
        absl::UnimplementedError("KV handoff from a prefill worker is not part of this build"));
  }
  absl::StatusOr<engine::SamplingParams> sampling = SamplingParamsFromProto(
      request.sampling_params(), engine_->model_config().vocab_size, engine_->request_seeds());
  if (!sampling.ok()) return reject(sampling.status());

  auto leg = std::make_shared<Leg>();
  leg->rid = request.rid().empty() ? NewRid("req-") : request.rid();
  leg->room = request.bootstrap_room();
  leg->stream = request.stream();
  leg->return_logprob = request.return_logprob();
  leg->had_transfer = remote;
  leg->sink = std::move(sink);
  leg->start = Clock::now();

  engine::Request r;
  r.rid = leg->rid;
  r.input_ids.assign(request.input_ids().begin(), request.input_ids().end());
  r.sampling = *std::move(sampling);
  r.return_logprob = request.return_logprob();
  if (request.has_logprob_start_len()) r.logprob_start_len = request.logprob_start_len();
  // The engine shares the named leg's prompt KV when it can and computes the prompt otherwise.
  r.share_prompt_with = share;
  r.callbacks.on_output = [this, leg](const engine::RequestOutput& out) { OnOutput(leg, out); };
  if (remote) {
    if (absl::Status s = handoff_->PrepareDecodeLeg(request, &r); !s.ok()) return reject(s);
  }
  {
    absl::MutexLock lock(&mu_);
    if (legs_.count(leg->rid)) {
      return reject(
          absl::AlreadyExistsError(absl::StrCat("request '", leg->rid, "' is already running")));
    }
    if (leg->room != 0) {
      auto it = rooms_.find(leg->room);
      if (it != rooms_.end()) {
        return reject(absl::AlreadyExistsError(absl::StrCat(
            "bootstrap_room ", leg->room, " is already in use by request '", it->second, "'")));
      }
      rooms_[leg->room] = leg->rid;
    }
    leg->serial = next_serial_++;
    legs_[leg->rid] = leg;
  }
  if (absl::Status s = engine_->Submit(std::move(r)); !s.ok()) {
    EndLeg(*leg);
    return reject(s);
  }
  return LegId{leg->rid, leg->serial};
}

void WorkerCore::OnOutput(const std::shared_ptr<Leg>& leg, const engine::RequestOutput& out) {
  const Clock::time_point now = Clock::now();
  if (!out.token_ids.empty()) {
    last_output_ns_.store(MonoNowNs());
    if (!leg->first_token) leg->first_token = now;
  }
  proto::DecodeEvent streamed;
  proto::DecodeEvent* event = leg->stream ? &streamed : &leg->pending;
  if (leg->stream && out.token_ids.empty() && out.text.empty() && !out.last) return;
  AppendOutput(out, leg->return_logprob, event);
  if (!out.last) {
    if (leg->stream) leg->sink(std::move(streamed));
    return;
  }
  LegTimings t;
  t.queue = out.timings.queue;
  t.prefill_compute = leg->had_transfer ? 0.0 : out.timings.prefill;
  // Fed by a prefill worker: from the blocks' reservation until the KV and first token landed
  // (the prefill worker's compute overlaps it; its own metrics split the two).
  t.transfer = leg->had_transfer ? out.timings.prefill : 0.0;
  t.first_token = leg->first_token ? Seconds(*leg->first_token - leg->start) : 0.0;
  t.decode = out.timings.decode;
  *event->mutable_timings() = PhaseTimingsToProto(t);
  LegOutcome outcome = LegOutcome::kFinished;
  if (leg->cancelled.load()) {
    outcome = LegOutcome::kCancelled;
  } else if (out.finish && out.finish->kind == engine::FinishReason::Kind::kAbort) {
    outcome = LegOutcome::kAborted;
  }
  phase_metrics_.RecordLeg(t, leg->had_transfer, outcome, out.completion_tokens);
  if (leg->first_token) {
    cache_query_tokens_.fetch_add(out.prompt_tokens);
    // A leg fed by a prefill worker reports that worker's hits (which it counts itself); this
    // worker's own radix cache served none of the prompt.
    cache_hit_tokens_.fetch_add(leg->had_transfer ? 0 : out.cached_tokens);
  }
  leg->sink(std::move(*event));
  // After the sink: a drain that sees no legs knows every last event has been handed over.
  EndLeg(*leg);
}

void WorkerCore::EndLeg(const Leg& leg) {
  absl::MutexLock lock(&mu_);
  auto it = legs_.find(leg.rid);
  if (it != legs_.end() && it->second.get() == &leg) {
    legs_.erase(it);
    legs_changed_.SignalAll();
  }
  if (leg.room != 0) {
    auto room = rooms_.find(leg.room);
    if (room != rooms_.end() && room->second == leg.rid) rooms_.erase(room);
  }
}

void WorkerCore::CancelDecode(const LegId& id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = legs_.find(id.rid);
    if (it == legs_.end() || it->second->serial != id.serial) return;  // already ended
    it->second->cancelled.store(true);
  }
  engine_->Abort(id.rid, "the client cancelled the request");
}

proto::AbortResponse WorkerCore::Abort(const proto::AbortRequest& request) {
  std::string rid;
  {
    absl::MutexLock lock(&mu_);
    if (request.target_case() == proto::AbortRequest::kBootstrapRoom) {
      auto it = rooms_.find(request.bootstrap_room());
      if (it != rooms_.end()) rid = it->second;
    } else if (request.target_case() == proto::AbortRequest::kRid && legs_.count(request.rid())) {
      rid = request.rid();
    }
  }
  proto::AbortResponse response;
  if (rid.empty() && prefill_ != nullptr &&
      request.target_case() == proto::AbortRequest::kBootstrapRoom) {
    response.set_found(prefill_->AbortRoom(request.bootstrap_room(), request.reason().empty()
                                                                         ? "aborted by request"
                                                                         : request.reason()));
    return response;
  }
  response.set_found(!rid.empty());
  if (!rid.empty()) {
    engine_->Abort(rid, request.reason().empty() ? "aborted by request" : request.reason());
  }
  return response;
}

void WorkerCore::Health(const proto::HealthRequest& request,
                        std::function<void(proto::HealthResponse)> done) {
  if (draining_.load()) {
    done(MakeHealth(
        proto::HealthResponse::DRAINING,
        absl::StrCat("draining: finishing ", live_legs(), " requests and admitting none")));
    return;
  }
  if (!request.generate()) {
    done(MakeHealth(proto::HealthResponse::SERVING, "serving"));
    return;
  }
  const int64_t now = MonoNowNs();
  const double since_output = static_cast<double>(now - last_output_ns_.load()) * 1e-9;
  if (last_output_ns_.load() != 0 && since_output < options_.health_recent_output_s) {
    done(MakeHealth(proto::HealthResponse::SERVING,
                    absl::StrFormat("the model produced a token %.3f s ago", since_output)));
    return;
  }
  // A busy engine (a long prefill yields no token until its last chunk) is making progress
  // while its steps end, or the one running started within the probe's timeout; a probe would
  // only wait behind that step, holding the asker (and the status port's thread) meanwhile.
  const engine::Engine::Progress progress = engine_->progress();
  const double since_step_end = static_cast<double>(now - progress.step_ended_ns) * 1e-9;
  if (progress.step_ended_ns != 0 && since_step_end < options_.health_recent_output_s) {
    done(MakeHealth(proto::HealthResponse::SERVING,
                    absl::StrFormat("the engine finished a step %.3f s ago", since_step_end)));
    return;
  }
  const double step_running = static_cast<double>(now - progress.step_started_ns) * 1e-9;
  if (progress.step_started_ns > progress.step_ended_ns &&
      step_running < options_.health_generate_timeout_s) {
    done(MakeHealth(proto::HealthResponse::SERVING,
                    absl::StrFormat("the engine has been running a step for %.3f s (at most "
                                    "%.0f s before it counts as stuck)",
                                    step_running, options_.health_generate_timeout_s)));
    return;
  }
  // A real one-token request through the whole engine: admission, forward pass, sampling.
  engine::Request probe;
  probe.rid = NewRid("health-");
  probe.input_ids = {std::max<int32_t>(engine_->model_config().bos_token_id, 0)};
  probe.sampling.temperature = 0;
  probe.sampling.max_new_tokens = 1;
  probe.sampling.ignore_eos = true;
  auto shared_done = std::make_shared<std::function<void(proto::HealthResponse)>>(done);
  probe.callbacks.on_output = [shared_done](const engine::RequestOutput& out) {
    if (!out.last) return;
    if (out.finish && out.finish->kind == engine::FinishReason::Kind::kAbort) {
      (*shared_done)(
          MakeHealth(proto::HealthResponse::NOT_SERVING,
                     absl::StrCat("the health probe was aborted: ", out.finish->message)));
    } else if (out.completion_tokens < 1) {
      (*shared_done)(
          MakeHealth(proto::HealthResponse::NOT_SERVING, "the health probe ended without a token"));
    } else {
      (*shared_done)(
          MakeHealth(proto::HealthResponse::SERVING, "the model answered a one-token probe"));
    }
  };
  if (absl::Status s = engine_->Submit(std::move(probe)); !s.ok()) {
    (*shared_done)(MakeHealth(proto::HealthResponse::NOT_SERVING,
                              absl::StrCat("the health probe was refused: ", s.message())));
  }
}

class WorkerCore::HealthProbe {
 public:
  explicit HealthProbe(std::function<void(absl::Status)> first) {
    absl::MutexLock lock(&mu_);
    waiters_.push_back(std::move(first));
  }

  // Adds an asker, unless the answer is already out (then false, and `done` is left alone).
  bool Join(std::function<void(absl::Status)>& done) {
    absl::MutexLock lock(&mu_);
    if (answered_) return false;
    waiters_.push_back(std::move(done));
    return true;
  }

  // The first answer goes to every asker; later ones (the timeout after the engine answered, or
  // the engine after the timeout) are dropped.
  void Answer(const absl::Status& status) {
    std::vector<std::function<void(absl::Status)>> waiters;
    {
      absl::MutexLock lock(&mu_);
      if (answered_) return;
      answered_ = true;
      waiters.swap(waiters_);
    }
    for (auto& done : waiters) done(status);
  }

  bool answered() const {
    absl::MutexLock lock(&mu_);
    return answered_;
  }

 private:
  mutable absl::Mutex mu_;
  bool answered_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::function<void(absl::Status)>> waiters_ ABSL_GUARDED_BY(mu_);
};

void WorkerCore::CheckHealth(std::function<void(absl::Status)> done) {
  if (draining()) {
    done(absl::UnavailableError("draining: this worker is shutting down"));
    return;
  }
  std::shared_ptr<HealthProbe> probe;
  {
    absl::MutexLock lock(&health_mu_);
    if (health_probe_ != nullptr && health_probe_->Join(done)) return;
    health_probe_ = probe = std::make_shared<HealthProbe>(std::move(done));
  }
  proto::HealthRequest request;
  request.set_generate(true);
  Health(request, [probe](proto::HealthResponse h) {
    probe->Answer(h.status() == proto::HealthResponse::SERVING
                      ? absl::OkStatus()
                      : absl::UnavailableError(h.message()));
  });
  if (probe->answered()) return;  // answered from recent progress, without a probe
  const double timeout_s = options_.health_generate_timeout_s;
  health_timer_.RunAt(SteadyDeadlineAfter(timeout_s), [probe, timeout_s] {
    probe->Answer(absl::UnavailableError(
        absl::StrCat("the model did not answer a one-token probe within ", timeout_s, " s")));
  });
}

proto::LoadReport WorkerCore::GetLoad() const {
  const engine::SchedulerLoad load = engine_->Load();
  proto::LoadReport r;
  r.set_running_requests(load.running + load.awaiting_kv + load.held);
  r.set_queued_requests(load.waiting);
  r.set_free_kv_blocks(load.free_blocks);
  r.set_total_kv_blocks(load.total_blocks);
  r.set_kv_block_size(engine_->config().block_size);
  r.set_inflight_transfers(prefill_ != nullptr ? prefill_->inflight() : 0);
  return r;
}

proto::FlushCacheResponse WorkerCore::FlushCache() {
  proto::FlushCacheResponse r;
  // Checked first so that the call never waits behind a forward pass.
  if (const int64_t live = engine_->live_requests(); live > 0) {
    r.set_flushed(false);
    r.set_message(absl::StrCat("not flushed: ", live,
                               " requests are running or queued; the cache is flushed only when "
                               "the worker is idle"));
    return r;
  }
  absl::Status s = engine_->FlushCache();
  r.set_flushed(s.ok());
  r.set_message(s.ok() ? "flushed the prefix cache" : absl::StrCat("not flushed: ", s.message()));
  return r;
}

absl::StatusOr<proto::KvEventsReply> WorkerCore::GetKvEvents(
    const proto::KvEventsRequest& request) const {
  const KvEventLog* log = engine_->kv_event_log();
  if (log == nullptr) {
    return absl::FailedPreconditionError(
        "this worker publishes no KV events (radix cache disabled or --kv-events-buffer 0)");
  }
  proto::KvEventsReply r;
  r.set_incarnation(log->incarnation());
  r.set_block_size(log->block_size());
  if (request.snapshot()) {
    KvSnapshot s = log->Snapshot();
    if (s.block_hashes.size() > kMaxKvSnapshotBlocks) {
      return absl::ResourceExhaustedError(absl::StrCat("KV event snapshot of ",
                                                       s.block_hashes.size(), " blocks is above ",
                                                       kMaxKvSnapshotBlocks));
    }
    r.set_seq(s.seq);
    r.mutable_stored_hashes()->Assign(s.block_hashes.begin(), s.block_hashes.end());
    return r;
  }
  const uint32_t max_events = request.max_events() == 0
                                  ? kMaxKvEventsPerReply
                                  : std::min(request.max_events(), kMaxKvEventsPerReply);
  KvEventBatch batch = log->EventsSince(request.after_seq(), max_events);
  r.set_gap(batch.gap);
  r.set_seq(batch.last_seq);
  r.mutable_events()->Reserve(static_cast<int>(batch.events.size()));
  for (const KvBlockEvent& e : batch.events) {
    proto::KvEventsReply::Event* pe = r.add_events();
    pe->set_seq(e.seq);
    pe->set_removed(e.kind == KvBlockEvent::Kind::kRemoved);
    pe->set_block_hash(e.block_hash);
  }
  return r;
}

proto::ServerInfo WorkerCore::GetServerInfo() const {
  const engine::SchedulerConfig& c = engine_->config();
  proto::ServerInfo info;
  info.set_role(RoleToProto(options_.role));
  info.set_model_path(options_.model_path);
  info.set_served_model_name(options_.served_model_name);
  info.set_context_length(static_cast<int32_t>(c.context_length));
  info.set_max_running_requests(c.max_running_requests);
  info.set_chunked_prefill_size(c.chunked_prefill_size);
  info.set_kv_block_size(c.block_size);
  info.set_total_kv_blocks(c.num_blocks);
  info.set_transfer_backend(options_.transfer_backend);
  info.set_bootstrap_port(options_.bootstrap_port);
  info.set_version(kTandemVersion);
  // avg_spec_accept_length stays 0: there is no speculative decoding.
  info.set_cache_hit_tokens(cache_hit_tokens_.load());
  info.set_cache_query_tokens(cache_query_tokens_.load());
  return info;
}

void WorkerCore::BeginDrain() { draining_.store(true); }

int64_t WorkerCore::live_legs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(legs_.size()) + prefill_legs_.load();
}

bool WorkerCore::WaitNoLegs(double timeout_seconds) {
  const MonoClock::time_point deadline = SteadyDeadlineAfter(timeout_seconds);
  absl::MutexLock lock(&mu_);
  while (!legs_.empty() || prefill_legs_.load() != 0) {
    if (!legs_changed_.WaitUntil(&mu_, deadline)) {
      return legs_.empty() && prefill_legs_.load() == 0;
    }
  }
  return true;
}

void WorkerCore::AbortAllLegs(const std::string& message) {
  std::vector<std::string> rids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [rid, leg] : legs_) rids.push_back(rid);
  }
  for (const std::string& rid : rids) engine_->Abort(rid, message);
}

}  // namespace tandem::worker

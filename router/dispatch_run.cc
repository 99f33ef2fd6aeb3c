#include "router/dispatch_run.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "router/client_errors.h"

namespace tandem::router {
namespace {

constexpr MonoClock::duration kAbortTimeout = std::chrono::seconds(5);
// A leg's transport deadline is the request's deadline; a transport may report it a little
// before the dispatcher's clock reaches it.
constexpr MonoClock::duration kDeadlineSlack = std::chrono::milliseconds(500);

// Errors that the request itself caused: another worker would answer the same.
bool IsCallerError(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument ||
         code == absl::StatusCode::kFailedPrecondition || code == absl::StatusCode::kOutOfRange;
}

// Errors that count against the worker's circuit breaker.
bool IsWorkerFault(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kInternal ||
         code == absl::StatusCode::kUnknown || code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kAborted || code == absl::StatusCode::kDeadlineExceeded;
}

// The failure as the client sees it: the role and the reason, without the worker's address
// (which goes to the log only, with the full message).
absl::Status LegFailure(const absl::Status& s, const std::string& rid, const std::string& leg,
                        const std::string& url) {
  spdlog::warn("rid {}: {} worker {} failed: {}", rid, leg, url, s.ToString());
  return ClientLegError(s.code(), leg, std::string(s.message()));
}

// Runs one of a leg's callbacks (on a transport or timer thread, where nothing catches): a
// throw is logged and fails the run instead of terminating the process.
template <class Fn, class OnThrow>
void Guarded(const char* what, Fn&& fn, OnThrow&& on_throw) noexcept {
  try {
    fn();
    return;
  } catch (const std::exception& e) {
    spdlog::error("dispatcher: {} threw: {}", what, e.what());
  } catch (...) {
    spdlog::error("dispatcher: {} threw an exception of unknown type", what);
  }
  try {
    on_throw();
  } catch (...) {
    spdlog::error("dispatcher: failing the request after {} threw also threw", what);
  }
}

}  // namespace

Run::Run(Dispatcher* d, std::shared_ptr<const RoutedRequest> request, Dispatcher::EventFn on_event,
         Dispatcher::DoneFn on_done, StartOptions options)
    : d_(d),
      request_(std::move(request)),
      deadline_(
          Deadline::After(d->clock(), absl::ToChronoNanoseconds(d->options_.request_timeout))),
      on_routed_(std::move(options.on_routed)),
      share_with_(std::move(options.share_with)),
      on_event_(std::move(on_event)),
      on_done_(std::move(on_done)) {
  d_->live_runs_.fetch_add(1);
}

Run::~Run() { d_->live_runs_.fetch_sub(1); }

RunState Run::Apply(RunEvent event) {
  const RunState before = state_;
  state_ = NextRunState(state_, event);
  return before;
}

RunState Run::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

void Run::Refuse(absl::Status why) {
  {
    absl::MutexLock lock(&mu_);
    if (done()) return;
    Apply(RunEvent::kEnded);
  }
  Finish(std::move(why));
}

void Run::StartAttempt() {
  auto self = shared_from_this();
  auto a = std::make_shared<Attempt>(&mu_);
  {
    absl::MutexLock lock(&mu_);
    if (done()) return;  // Cancel() or the deadline already finished the run
    Apply(RunEvent::kRetryDue);
    a->number = attempts_++;
  }
  if (deadline_.expired(d_->clock())) {
    Fail(a,
         absl::DeadlineExceededError("the request timed out (--request-timeout-secs) "
                                     "before a worker could take it"),
         false);
    return;
  }
  a->rid = a->number == 0 ? request_->rid : absl::StrCat(request_->rid, "-retry", a->number);
  a->pinned = PinFirstAttempt(*a);
  if (a->pinned) {
    absl::MutexLock lock(&mu_);
    ++uncounted_attempts_;
  }
  const PolicyRequest policy_request{&request_->input_ids, &request_->prompt_text};
  std::vector<WorkerPtr> decodes;
  if (a->pinned) {
    a->decode = share_with_->worker;
  } else {
    decodes = d_->registry_->Available(pd() ? WorkerType::kDecode : WorkerType::kRegular);
  }
  std::vector<WorkerPtr> prefills;
  if (paired(*a)) prefills = d_->registry_->Available(WorkerType::kPrefill);
  if (paired(*a) && !prefill_only() && !decodes.empty()) {
    DecideDisaggregation(a.get(), decodes, prefills, policy_request);
  }
  if (paired(*a)) {
    if (!prefills.empty()) a->prefill = d_->prefill_policy_->Select(prefills, policy_request);
    if (a->prefill == nullptr) {
      a->decode = nullptr;  // chosen for the saturation rule, not yet counted (BeginRequest)
      Fail(a, absl::UnavailableError("no healthy prefill worker to route to"), true);
      return;
    }
    a->prefill->BeginRequest();
    a->prefill->AddPrefillTokens(static_cast<int64_t>(request_->input_ids.size()));
  }
  if (!a->pinned && a->decode == nullptr && !decodes.empty() && !prefill_only()) {
    a->decode = d_->decode_policy_->Select(decodes, policy_request);
  }
  if (a->decode == nullptr && !prefill_only()) {
    if (a->prefill) {
      EndPrefill(*a, true);
      a->prefill = nullptr;
    }
    Fail(a,
         absl::UnavailableError(pd() ? "no healthy decode worker to route to"
                                     : "no healthy worker to route to"),
         true);
    return;
  }
  if (a->decode) a->decode->BeginRequest();
  a->room = paired(*a) ? NewBootstrapRoom() : 0;
  {
    absl::MutexLock lock(&mu_);
    if (done()) {
      a->over = true;
      if (a->prefill) EndPrefill(*a, true);
      if (a->decode) a->decode->EndRequest(true);
      return;
    }
    current_ = a;
  }

  proto::DecodeRequest dr;
  dr.set_rid(a->rid);
  dr.set_bootstrap_room(a->room);
  dr.mutable_input_ids()->Add(request_->input_ids.begin(), request_->input_ids.end());
  *dr.mutable_sampling_params() = request_->sampling;
  dr.set_return_logprob(request_->return_logprob);
  dr.set_stream(request_->stream);
  if (request_->return_logprob && !paired(*a)) {
    dr.set_logprob_start_len(request_->logprob_start_len);
  }
  if (a->pinned) dr.set_share_prompt_with(share_with_->rid);
  a->hold_for_prefill = paired(*a) && scores_prompt();
  a->last_progress = d_->clock().Now();  // before any leg can call back
  LegPtr prefill_call;
  if (paired(*a)) {
    dr.set_bootstrap_host(a->prefill->host());
    dr.set_bootstrap_port(a->prefill->bootstrap_port().value_or(0));
    proto::PrefillRequest pr;
    pr.set_rid(a->rid);
    pr.set_bootstrap_room(a->room);
    pr.mutable_input_ids()->Add(request_->input_ids.begin(), request_->input_ids.end());
    *pr.mutable_sampling_params() = request_->sampling;
    pr.set_return_logprob(request_->return_logprob);
    if (request_->return_logprob) pr.set_logprob_start_len(request_->logprob_start_len);
    prefill_call = a->prefill->legs().StartPrefill(
        std::move(pr), deadline_, [self, a](absl::Status s, proto::PrefillResponse response) {
          Guarded(
              "the prefill leg's completion", [&] { self->OnPrefillDone(a, s, response); },
              [&] { self->FailInternally(a); });
        });
  }
  if (a->decode == nullptr) {
    bool over;
    {
      absl::MutexLock lock(&mu_);
      a->prefill_call = prefill_call;
      over = a->over;
      if (!over) Apply(RunEvent::kLegsSent);
    }
    if (over) {
      prefill_call->Cancel();
      return;
    }
    ArmLease(a, a->last_progress + absl::ToChronoNanoseconds(d_->options_.stall_timeout));
    return;
  }
  LegPtr decode_call = a->decode->legs().StartDecode(
      std::move(dr), deadline_,
      [self, a](const proto::DecodeEvent& e) {
        Guarded(
            "a decode event", [&] { self->OnDecodeEvent(a, e); }, [&] { self->FailInternally(a); });
      },
      [self, a](absl::Status s) {
        Guarded(
            "the decode leg's completion", [&] { self->OnDecodeDone(a, s); },
            [&] { self->FailInternally(a); });
      });
  bool over;
  {
    absl::MutexLock lock(&mu_);
    a->prefill_call = prefill_call;
    a->decode_call = decode_call;
    over = a->over;
    if (!over) Apply(RunEvent::kLegsSent);
    if (!over && on_routed_) a->announced = true;
  }
  // A Cancel() or a failed leg while the calls were being sent saw no handles to cancel.
  if (over) {
    if (prefill_call) prefill_call->Cancel();
    decode_call->Cancel();
    return;
  }
  ArmLease(a, a->last_progress + absl::ToChronoNanoseconds(d_->options_.stall_timeout));
  if (on_routed_) Announce(a, /*gone=*/false);
}

void Run::DecideDisaggregation(Attempt* a, const std::vector<WorkerPtr>& decodes,
                               const std::vector<WorkerPtr>& prefills,
                               const PolicyRequest& policy_request) {
  const DisaggregationOptions& o = d_->options_.disaggregation;
  const auto prompt = static_cast<int64_t>(request_->input_ids.size());
  bool refused;
  {
    absl::MutexLock lock(&mu_);
    refused = local_refused_;
  }
  Disaggregation decision = Disaggregation::kPd;
  if (refused) {
    // A decode worker refused to prefill this request: PD from now on.
  } else if (ShortEnoughForLocalPrefill(o, prompt)) {
    decision = Disaggregation::kLocalShort;
  } else if (PrefillPoolSaturated(o, prefills)) {
    a->decode = d_->decode_policy_->Select(decodes, policy_request);
    const int64_t need = prompt + request_->sampling.max_new_tokens();
    if (a->decode != nullptr && DecodeHasHeadroom(a->decode->load(), need)) {
      decision = Disaggregation::kLocalSaturated;
    }
  }
  a->local = decision != Disaggregation::kPd;
  d_->metrics_->CountDisaggregation(DisaggregationName(decision));
}

void Run::EndPrefill(const Attempt& a, bool success) {
  a.prefill->AddPrefillTokens(-static_cast<int64_t>(request_->input_ids.size()));
  a.prefill->EndRequest(success);
}

void Run::ArmLease(const AttemptPtr& a, MonoClock::time_point when) {
  if (d_->options_.stall_timeout <= absl::ZeroDuration()) return;
  std::weak_ptr<Run> weak_self = weak_from_this();
  std::weak_ptr<Attempt> weak_attempt = a;
  d_->timers_->RunAt(when, [weak_self, weak_attempt] {
    std::shared_ptr<Run> self = weak_self.lock();
    AttemptPtr attempt = weak_attempt.lock();
    if (self == nullptr || attempt == nullptr) return;  // the run or the attempt is gone
    Guarded(
        "the stall check", [&] { self->CheckStall(attempt); },
        [&] { self->FailInternally(attempt); });
  });
}

bool Run::PinFirstAttempt(const Attempt& a) const {
  if (a.number != 0 || !share_with_ || share_with_->worker == nullptr || prefill_only()) {
    return false;
  }
  const WorkerPtr& w = share_with_->worker;
  // Removed (or removed and added again: another Worker object) or not available: the ordinary
  // way, as any request would go.
  return w->Available() && d_->registry_->Find(w->url()) == w;
}

void Run::Announce(const AttemptPtr& a, bool gone) {
  const LegPlace place{a->number, gone ? nullptr : a->decode, a->rid};
  Guarded(
      "the routed callback", [&] { on_routed_(place); },
      [&] {
        if (!gone) FailInternally(a);
      });
}

void Run::OnPrefillDone(const AttemptPtr& a, const absl::Status& s,
                        const proto::PrefillResponse& response) {
  const bool answers_alone = a->decode == nullptr;
  bool over;
  bool delivered;
  {
    absl::MutexLock lock(&mu_);
    a->prefill_done = true;
    a->last_progress = d_->clock().Now();
    over = a->over;
    delivered = this->delivered();
    if (answers_alone && !over && s.ok()) {
      a->over = true;
      Apply(RunEvent::kEnded);
    }
  }
  EndPrefill(*a, s.ok() || over || !IsWorkerFault(s.code()));
  if (answers_alone && !over && s.ok()) {
    if (!response.final_event().finished()) {
      Finish(absl::InternalError(
          "the prefill worker answered a request with max_new_tokens 0 without its final event"));
      return;
    }
    {
      absl::MutexLock lock(&deliver_mu_);
      if (!done_delivered_ && on_event_) on_event_(response.final_event());
    }
    Finish(absl::OkStatus());
    return;
  }
  if (s.ok() && !over && a->hold_for_prefill) {
    ReleaseHeld(a, response.prompt_logprobs());
    return;
  }
  if (s.ok() || over) return;
  if (s.code() == absl::StatusCode::kUnavailable) {
    d_->registry_->ReportFailure(a->prefill->url(), std::string(s.message()));
  }
  if (delivered) {
    // The decode stream already started: its worker's own timeout ends it.
    spdlog::warn("rid {}: prefill worker {} failed after the decode stream started: {}", a->rid,
                 a->prefill->url(), std::string(s.message()));
    return;
  }
  Fail(a, LegFailure(s, a->rid, "prefill", a->prefill->url()), !IsCallerError(s.code()));
}

void Run::ReleaseHeld(const AttemptPtr& a, const proto::PromptLogprobs& prompt_logprobs) {
  bool first = true;
  for (;;) {
    std::vector<proto::DecodeEvent> batch;
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (a->over || done()) return;
      if (a->held.empty()) {
        a->hold_for_prefill = false;
        if (first) a->pending_prompt_logprobs = prompt_logprobs;
        if (a->decode_finished) {
          a->over = true;
          Apply(RunEvent::kEnded);
          finish = true;
        }
      } else {
        batch.swap(a->held);
        Apply(RunEvent::kDelivered);
      }
    }
    if (finish) {
      Finish(absl::OkStatus());
      return;
    }
    if (batch.empty()) return;
    if (first) *batch.front().mutable_prompt_logprobs() = prompt_logprobs;
    first = false;
    absl::MutexLock lock(&deliver_mu_);
    for (const proto::DecodeEvent& e : batch) {
      if (!done_delivered_ && on_event_) on_event_(e);
    }
  }
}

void Run::OnDecodeEvent(const AttemptPtr& a, const proto::DecodeEvent& e) {
  std::optional<proto::PromptLogprobs> pending;
  {
    absl::MutexLock lock(&mu_);
    a->last_progress = d_->clock().Now();
    if (request_->stream) a->streaming = true;
    if (a->over || done()) return;
    if (a->hold_for_prefill) {
      a->held.push_back(e);
      return;
    }
    Apply(RunEvent::kDelivered);
    pending.swap(a->pending_prompt_logprobs);
  }
  absl::MutexLock lock(&deliver_mu_);
  if (done_delivered_ || !on_event_) return;
  if (!pending) {
    on_event_(e);  // a throw: Guarded around this call fails it
    return;
  }
  proto::DecodeEvent with_prompt = e;
  *with_prompt.mutable_prompt_logprobs() = *std::move(pending);
  on_event_(with_prompt);
}

void Run::OnDecodeDone(const AttemptPtr& a, const absl::Status& s) {
  bool over;
  bool held = false;
  {
    absl::MutexLock lock(&mu_);
    a->decode_done = true;
    over = a->over;
    if (!over && s.ok() && a->hold_for_prefill) {
      a->decode_finished = true;  // ReleaseHeld finishes the run
      held = true;
    } else if (!over && s.ok()) {
      a->over = true;
      Apply(RunEvent::kEnded);
    }
  }
  a->decode->EndRequest(s.ok() || over || !IsWorkerFault(s.code()));
  if (over || held) return;
  if (s.ok()) {
    Finish(absl::OkStatus());
    return;
  }
  if (s.code() == absl::StatusCode::kUnavailable) {
    d_->registry_->ReportFailure(a->decode->url(), std::string(s.message()));
  }
  if (a->local && s.code() == absl::StatusCode::kFailedPrecondition) {
    absl::MutexLock lock(&mu_);
    local_refused_ = true;  // Fail sends it through a prefill worker at once
  }
  Fail(a, LegFailure(s, a->rid, "decode", a->decode->url()), !IsCallerError(s.code()));
}

void Run::Fail(const AttemptPtr& a, absl::Status why, bool retryable) {
  int retry = 0;
  // A pinned leg failed, or a decode worker refused to prefill: the ordinary way at once.
  bool unpin = false;
  bool refused_local = false;
  bool announced;
  {
    absl::MutexLock lock(&mu_);
    if (done()) return;
    a->over = true;
    announced = a->announced;
    // Only the request's own deadline is the request timeout. A worker's DEADLINE_EXCEEDED well
    // before it (a room's --bootstrap-timeout or --transfer-timeout) is a failed leg: retried.
    const bool timed_out = d_->clock().Now() + kDeadlineSlack >= deadline_.when();
    if (timed_out) {
      why = absl::DeadlineExceededError(
          absl::StrCat("upstream timeout: the request exceeded --request-timeout-secs (",
                       absl::ToInt64Seconds(d_->options_.request_timeout), " s); ", why.message()));
    }
    refused_local = a->local && local_refused_;
    if ((a->pinned || refused_local) && !delivered() && !timed_out) {
      unpin = true;
      if (refused_local) ++uncounted_attempts_;
      retry = attempts_;
      Apply(RunEvent::kRetryScheduled);
    } else if (delivered() || !retryable || timed_out ||
               attempts_ - uncounted_attempts_ > d_->options_.backoff.max_retries) {
      const bool retries_spent = retryable && !delivered() && !timed_out && attempts_ > 1;
      Apply(RunEvent::kEnded);
      if (retries_spent) {
        why = absl::UnavailableError(
            absl::StrCat("all ", attempts_, " attempts failed; last: ", why.message()));
      }
    } else {
      retry = attempts_;
      Apply(RunEvent::kRetryScheduled);
    }
  }
  StopLegs(a, std::string(why.message()));
  if (announced) Announce(a, /*gone=*/true);
  if (retry == 0) {
    Finish(why);
    return;
  }
  auto self = shared_from_this();
  if (unpin && refused_local) {
    spdlog::warn(
        "rid {}: the decode worker refused to prefill it ({}); sending it through a prefill "
        "worker (start decode workers with --allow-local-prefill for conditional "
        "disaggregation)",
        request_->rid, std::string(why.message()));
    d_->timers_->Post([self] { self->StartAttempt(); });
    return;
  }
  if (unpin) {
    spdlog::info("rid {}: the leg sharing {}'s prompt failed ({}); sending it on its own",
                 request_->rid, share_with_->rid, std::string(why.message()));
    d_->timers_->Post([self] { self->StartAttempt(); });
    return;
  }
  d_->metrics_->CountRetry(request_->kind);
  const absl::Duration delay = BackoffDelay(d_->options_.backoff, retry);
  spdlog::info("rid {}: attempt {} failed ({}); retrying in {} with a new pair", request_->rid,
               retry, std::string(why.message()), absl::FormatDuration(delay));
  d_->timers_->RunAfter(absl::ToChronoNanoseconds(delay), [self] { self->StartAttempt(); });
}

void Run::StopLegs(const AttemptPtr& a, const std::string& reason) {
  LegPtr prefill_call, decode_call;
  bool abort_prefill = false, abort_decode = false;
  {
    absl::MutexLock lock(&mu_);
    if (a->prefill && !a->prefill_done) {
      prefill_call = a->prefill_call;
      abort_prefill = true;
    }
    if (a->decode && !a->decode_done) {
      decode_call = a->decode_call;
      abort_decode = true;
    }
  }
  if (prefill_call) prefill_call->Cancel();
  if (decode_call) decode_call->Cancel();
  // Cancelling a call ends it on the worker; the abort also reaches a room that is still queued
  // or waiting for its peer (PD: by room on both sides, so neither holds blocks for it).
  auto abort = [&](const WorkerPtr& w) {
    proto::AbortRequest r;
    if (paired(*a)) {
      r.set_bootstrap_room(a->room);
    } else {
      r.set_rid(a->rid);
    }
    r.set_reason(reason);
    w->legs().AbortLegs(std::move(r), Deadline::After(d_->clock(), kAbortTimeout));
  };
  // In PD mode a room is aborted on both workers even when one leg already ended.
  if (a->prefill && (abort_prefill || (pd() && abort_decode))) abort(a->prefill);
  if (a->decode && (abort_decode || (pd() && abort_prefill))) abort(a->decode);
}

void Run::Cancel() {
  AttemptPtr a;
  {
    absl::MutexLock lock(&mu_);
    if (done()) return;
    Apply(RunEvent::kEnded);
    a = current_;
    if (a) a->over = true;
  }
  if (a) StopLegs(a, "the client disconnected");
  Finish(absl::CancelledError("the client disconnected"));
}

void Run::Finish(absl::Status s) {
  Timers::Id deadline_timer;
  {
    absl::MutexLock lock(&mu_);
    Apply(RunEvent::kEnded);
    deadline_timer = std::exchange(deadline_timer_, 0);
  }
  if (deadline_timer != 0) d_->timers_->Cancel(deadline_timer);
  Dispatcher::DoneFn done;
  {
    absl::MutexLock lock(&deliver_mu_);
    if (done_delivered_) return;
    done_delivered_ = true;
    done = std::move(on_done_);
    on_event_ = nullptr;
    // The caller's callback runs under deliver_mu_ so that no event can overtake it.
    if (done) {
      Guarded(
          "the request's completion callback", [&] { done(std::move(s)); }, [] {});
    }
  }
}

}  // namespace tandem::router

#include "router/dispatcher.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "router/api/response.h"
#include "router/client_errors.h"

namespace tandem::router {
namespace {

constexpr MonoClock::duration kAbortTimeout = std::chrono::seconds(5);
// Once a waiting leg's lease ran out, how often its workers' health is looked at again.
constexpr MonoClock::duration kStallRecheck = std::chrono::seconds(1);
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

int64_t Seconds(MonoClock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

// Runs one of a leg's callbacks (on a gRPC, session-socket or timer thread, where nothing
// catches): a throw is logged and fails the run instead of terminating the process.
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

// One request across its attempts. Owned by shared_ptr: every leg callback keeps it alive.
class Run : public DispatchRun, public std::enable_shared_from_this<Run> {
 public:
  Run(Dispatcher* d, std::shared_ptr<const RoutedRequest> request, Dispatcher::EventFn on_event,
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
  ~Run() override { d_->live_runs_.fetch_sub(1); }

  void StartAttempt();
  void Cancel() override;
  // Arms the request's deadline (DeadlineExceeded when it passes, whatever the legs report).
  void ArmDeadline();
  // Ends the run with `why` before any attempt.
  void Refuse(absl::Status why) {
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      finished_ = true;
    }
    Finish(std::move(why));
  }

 private:
  struct Attempt {
    int number = 0;
    uint64_t room = 0;
    std::string rid;
    WorkerPtr prefill;  // null in plain mode and when pinned
    WorkerPtr decode;
    // A sibling's plain decode leg to share_with_'s worker, sharing that leg's prompt.
    bool pinned = false;
    bool announced = false;  // on_routed_ was told where its leg went
    LegPtr prefill_call;
    LegPtr decode_call;
    bool prefill_done = false;
    bool decode_done = false;
    bool over = false;  // failed, cancelled or finished: later callbacks change nothing
    // PD with prompt logprobs: the decode leg's events wait here until the prefill leg's answer
    // (which carries the prompt logprobs) arrived; the first one delivered carries them.
    bool hold_for_prefill = false;
    std::vector<proto::DecodeEvent> held;
    bool decode_finished = false;  // the decode leg ended OK while its events were held
    // The prefill leg answered before any decode event: the next event carries these.
    std::optional<proto::PromptLogprobs> pending_prompt_logprobs;
    // The lease (--stall-timeout-secs): when the legs were sent or last showed progress (the
    // prefill leg's answer, any decode event), and whether a streamed leg's tokens started, after
    // which silence itself is a stall.
    MonoClock::time_point last_progress;
    bool streaming = false;
  };
  using AttemptPtr = std::shared_ptr<Attempt>;

  void OnPrefillDone(const AttemptPtr& a, const absl::Status& s,
                     const proto::PrefillResponse& response);
  void OnDecodeEvent(const AttemptPtr& a, const proto::DecodeEvent& e);
  void OnDecodeDone(const AttemptPtr& a, const absl::Status& s);
  // The request's deadline passed: the attempt in flight fails DeadlineExceeded, or the run ends
  // so when it is between attempts.
  void OnDeadline() ABSL_LOCKS_EXCLUDED(mu_);
  // A leg callback threw: the request ends with an internal error (not retried: the same
  // request would throw again).
  // Schedules CheckStall at `when` (nothing with --stall-timeout-secs 0). Holds neither the run
  // nor the attempt alive.
  void ArmLease(const AttemptPtr& a, MonoClock::time_point when);
  // Fails the attempt if its lease ran out and it is stalled, else arms the lease again.
  void CheckStall(const AttemptPtr& a) ABSL_LOCKS_EXCLUDED(mu_);
  void FailInternally(const AttemptPtr& a) {
    Fail(a, absl::InternalError("internal error: the router failed while handling the request"),
         false);
  }
  // The current attempt failed with `why`: stop its other leg, then retry or finish.
  void Fail(const AttemptPtr& a, absl::Status why, bool retryable) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the attempt's legs still running and aborts its room/rid on its workers.
  void StopLegs(const AttemptPtr& a, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(absl::Status s) ABSL_LOCKS_EXCLUDED(deliver_mu_);
  bool pd() const { return d_->options_.pd_mode; }
  // The attempt has a room and a prefill leg (PD mode, not a pinned sibling).
  bool paired(const Attempt& a) const { return pd() && !a.pinned; }
  // The first attempt of a sibling whose leader's worker can still take it.
  bool PinFirstAttempt(const Attempt& a) const;
  void Announce(const AttemptPtr& a, bool gone);
  // PD mode, max_new_tokens 0: the prefill worker answers the request alone (no decode leg).
  bool prefill_only() const { return pd() && request_->sampling.max_new_tokens() == 0; }
  // Prompt logprobs beyond the last prompt token were asked for: the worker that prefills
  // computes them.
  bool scores_prompt() const {
    return request_->return_logprob && request_->logprob_start_len >= 0 &&
           request_->logprob_start_len + 1 < static_cast<int64_t>(request_->input_ids.size());
  }
  // Delivers the events held for the prefill leg's answer, the first with `prompt_logprobs`,
  // then any that arrived meanwhile; finishes the run if the decode leg already ended.
  void ReleaseHeld(const AttemptPtr& a, const proto::PromptLogprobs& prompt_logprobs);

  Dispatcher* const d_;
  const std::shared_ptr<const RoutedRequest> request_;
  const Deadline deadline_;
  const std::function<void(const LegPlace&)> on_routed_;
  const std::optional<LegPlace> share_with_;

  absl::Mutex mu_;
  AttemptPtr current_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  int pinned_attempts_ ABSL_GUARDED_BY(mu_) = 0;  // not counted against max_retries
  bool delivered_ ABSL_GUARDED_BY(mu_) = false;   // an event went to the caller: no more retries
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  Timers::Id deadline_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Serializes calls into the caller's callbacks.
  absl::Mutex deliver_mu_;
  bool done_delivered_ ABSL_GUARDED_BY(deliver_mu_) = false;
  Dispatcher::EventFn on_event_ ABSL_GUARDED_BY(deliver_mu_);
  Dispatcher::DoneFn on_done_ ABSL_GUARDED_BY(deliver_mu_);
};

void Run::StartAttempt() {
  auto self = shared_from_this();
  auto a = std::make_shared<Attempt>();
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_ || finished_) return;  // Cancel() already finished the run
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
    ++pinned_attempts_;
  }
  const PolicyRequest policy_request{&request_->input_ids, &request_->prompt_text};
  std::vector<WorkerPtr> decodes;
  if (a->pinned) {
    a->decode = share_with_->worker;
  } else {
    decodes = d_->registry_->Available(pd() ? WorkerType::kDecode : WorkerType::kRegular);
  }
  if (paired(*a)) {
    std::vector<WorkerPtr> prefills = d_->registry_->Available(WorkerType::kPrefill);
    if (!prefills.empty()) a->prefill = d_->prefill_policy_->Select(prefills, policy_request);
    if (a->prefill == nullptr) {
      Fail(a, absl::UnavailableError("no healthy prefill worker to route to"), true);
      return;
    }
    a->prefill->BeginRequest();
  }
  if (!a->pinned && !decodes.empty() && !prefill_only()) {
    a->decode = d_->decode_policy_->Select(decodes, policy_request);
  }
  if (a->decode == nullptr && !prefill_only()) {
    if (a->prefill) {
      a->prefill->EndRequest(true);
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
    if (cancelled_) {
      a->over = true;
      if (a->prefill) a->prefill->EndRequest(true);
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

void Run::ArmDeadline() {
  if (deadline_.is_never()) return;
  std::weak_ptr<Run> weak_self = weak_from_this();
  const Timers::Id id = d_->timers_->RunAt(deadline_.when(), [weak_self] {
    if (std::shared_ptr<Run> self = weak_self.lock()) self->OnDeadline();
  });
  absl::MutexLock lock(&mu_);
  if (finished_) {
    d_->timers_->Cancel(id);
  } else {
    deadline_timer_ = id;
  }
}

void Run::OnDeadline() {
  AttemptPtr a;
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    deadline_timer_ = 0;
    a = current_;
    if (a == nullptr || a->over) {
      // Between attempts (a backoff): nothing to stop.
      finished_ = true;
      a = nullptr;
    }
  }
  const absl::Status why = absl::DeadlineExceededError("the request's deadline passed");
  if (a == nullptr) {
    Finish(absl::DeadlineExceededError(
        absl::StrCat("upstream timeout: the request exceeded --request-timeout-secs (",
                     absl::ToInt64Seconds(d_->options_.request_timeout), " s) between attempts")));
    return;
  }
  Fail(a, why, false);
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

void Run::CheckStall(const AttemptPtr& a) {
  const MonoClock::duration timeout = absl::ToChronoNanoseconds(d_->options_.stall_timeout);
  const MonoClock::time_point now = d_->clock().Now();
  MonoClock::time_point last;
  bool streaming, prefill_waiting, decode_waiting;
  {
    absl::MutexLock lock(&mu_);
    if (a->over || finished_) return;
    last = a->last_progress;
    streaming = a->streaming;
    prefill_waiting = a->prefill != nullptr && !a->prefill_done;
    decode_waiting = a->decode != nullptr && !a->decode_done;
  }
  if (now < last + timeout) {
    ArmLease(a, last + timeout);
    return;
  }
  const int64_t secs = Seconds(now - last);
  if (streaming && decode_waiting) {
    // A decode step takes far less than the lease: the worker stopped (or its link did). Its
    // registry probe tells a stopped worker from a slow one for the other requests.
    spdlog::warn("rid {}: decode worker {} sent nothing for {} s; failing the stream", a->rid,
                 a->decode->url(), secs);
    d_->registry_->ReportFailure(a->decode->url(),
                                 absl::StrCat("a stream sent nothing for ", secs, " s"));
    Fail(a,
         absl::UnavailableError(
             absl::StrCat("the decode worker stalled: its stream sent nothing for ", secs,
                          " s (--stall-timeout-secs)")),
         true);
    return;
  }
  // Waiting for a first event (queued, prefilling, moving KV) or for a non-streamed leg's one
  // answer shows no progress however healthy the worker is, so the lease holds while the
  // workers it waits on pass their health checks.
  const char* role = nullptr;
  const WorkerPtr* stuck = nullptr;
  if (prefill_waiting && !a->prefill->healthy()) {
    role = "prefill";
    stuck = &a->prefill;
  } else if ((decode_waiting || prefill_waiting) && a->decode != nullptr && !a->decode->healthy()) {
    role = "decode";
    stuck = &a->decode;
  }
  if (stuck == nullptr) {
    ArmLease(a, now + std::min(timeout, kStallRecheck));
    return;
  }
  spdlog::warn("rid {}: no progress for {} s and {} worker {} fails its health checks", a->rid,
               secs, role, (*stuck)->url());
  Fail(a,
       absl::UnavailableError(absl::StrCat("the ", role, " worker stalled: no progress for ", secs,
                                           " s and it fails its health checks "
                                           "(--stall-timeout-secs)")),
       true);
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
    delivered = delivered_;
    if (answers_alone && !over && s.ok()) {
      a->over = true;
      delivered_ = true;
      finished_ = true;
    }
  }
  a->prefill->EndRequest(s.ok() || over || !IsWorkerFault(s.code()));
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
      if (a->over || finished_) return;
      if (a->held.empty()) {
        a->hold_for_prefill = false;
        if (first) a->pending_prompt_logprobs = prompt_logprobs;
        if (a->decode_finished) {
          a->over = true;
          finished_ = true;
          finish = true;
        }
      } else {
        batch.swap(a->held);
        delivered_ = true;
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
    if (a->over || finished_) return;
    if (a->hold_for_prefill) {
      a->held.push_back(e);
      return;
    }
    delivered_ = true;
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
      finished_ = true;
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
  Fail(a, LegFailure(s, a->rid, "decode", a->decode->url()), !IsCallerError(s.code()));
}

void Run::Fail(const AttemptPtr& a, absl::Status why, bool retryable) {
  int retry = 0;
  bool unpin = false;  // a pinned leg failed: the ordinary way at once
  bool announced;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || cancelled_) return;
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
    if (a->pinned && !delivered_ && !timed_out) {
      unpin = true;
      retry = attempts_;
    } else if (delivered_ || !retryable || timed_out ||
               attempts_ - pinned_attempts_ > d_->options_.backoff.max_retries) {
      finished_ = true;
      if (retryable && !delivered_ && !timed_out && attempts_ > 1) {
        why = absl::UnavailableError(
            absl::StrCat("all ", attempts_, " attempts failed; last: ", why.message()));
      }
    } else {
      retry = attempts_;
    }
  }
  StopLegs(a, std::string(why.message()));
  if (announced) Announce(a, /*gone=*/true);
  if (retry == 0) {
    Finish(why);
    return;
  }
  auto self = shared_from_this();
  if (unpin) {
    spdlog::info("rid {}: the leg sharing {}'s prompt failed ({}); sending it on its own",
                 request_->rid, share_with_->rid, std::string(why.message()));
    d_->timers_->Post([self] { self->StartAttempt(); });
    return;
  }
  d_->metrics_->retries.Increment();
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
    if (cancelled_ || finished_) return;
    cancelled_ = true;
    finished_ = true;
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
    finished_ = true;
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

Dispatcher::Dispatcher(DispatchOptions options, WorkerRegistry* registry, Policy* prefill_policy,
                       Policy* decode_policy, RouterMetrics* metrics, Timers* timers)
    : options_(std::move(options)),
      registry_(registry),
      prefill_policy_(prefill_policy),
      decode_policy_(decode_policy),
      metrics_(metrics),
      own_timers_(timers == nullptr ? std::make_unique<TimerQueue>() : nullptr),
      timers_(timers != nullptr ? timers : own_timers_.get()) {}

Dispatcher::~Dispatcher() {
  // Retries that will not happen release their runs. Injected timers are the owner's to stop.
  if (own_timers_ != nullptr) own_timers_->Stop();
  // Legs cancelled at shutdown still call back on gRPC threads; wait for them (bounded).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (live_runs_.load() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  if (live_runs_.load() > 0) {
    spdlog::warn("dispatcher: {} requests still had legs in flight at shutdown", live_runs_.load());
  }
}

std::shared_ptr<DispatchRun> Dispatcher::Start(std::shared_ptr<const RoutedRequest> request,
                                               EventFn on_event, DoneFn on_done,
                                               StartOptions options) {
  // A leg over the workers' message limit would be refused by every worker: 413 at once, never
  // sent and never retried.
  const size_t leg_bytes = LegBytesUpperBound(*request);
  if (leg_bytes > kMaxLegBytes) {
    spdlog::warn("rid {}: {} byte leg is over the workers' limit; refused", request->rid,
                 leg_bytes);
    auto run = std::make_shared<Run>(this, std::move(request), std::move(on_event),
                                     std::move(on_done), std::move(options));
    run->Refuse(WithHttpStatus(
        absl::ResourceExhaustedError(absl::StrCat(
            "the request is too large to send to a worker: its ", leg_bytes,
            " bytes exceed the limit of ", kMaxLegBytes, " bytes; send a shorter prompt")),
        413));
    return run;
  }
  auto run = std::make_shared<Run>(this, std::move(request), std::move(on_event),
                                   std::move(on_done), std::move(options));
  run->ArmDeadline();
  run->StartAttempt();
  return run;
}

bool MaySharePrompt(const RoutedRequest& request) {
  if (request.sampling.max_new_tokens() == 0) return false;
  const bool scores_prompt =
      request.return_logprob && request.logprob_start_len >= 0 &&
      request.logprob_start_len < static_cast<int64_t>(request.input_ids.size());
  return !scores_prompt;
}

absl::Status Dispatcher::CanRoute() const {
  if (options_.pd_mode) {
    if (registry_->Available(WorkerType::kPrefill).empty()) {
      return absl::UnavailableError("no healthy prefill worker");
    }
    if (registry_->Available(WorkerType::kDecode).empty()) {
      return absl::UnavailableError("no healthy decode worker");
    }
    return absl::OkStatus();
  }
  if (registry_->Available(WorkerType::kRegular).empty()) {
    return absl::UnavailableError("no healthy worker");
  }
  return absl::OkStatus();
}

}  // namespace tandem::router

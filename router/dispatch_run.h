// Run: one request dispatched across its attempts (the Dispatcher's rules: router/dispatcher.h),
// and RunState, the state machine it moves through. Internal to the dispatcher; its unit tests
// (tests/router/dispatcher_rules_test.cc) drive it through Dispatcher::Start.
#ifndef TANDEM_ROUTER_DISPATCH_RUN_H_
#define TANDEM_ROUTER_DISPATCH_RUN_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/timer_queue.h"
#include "proto/worker.pb.h"
#include "router/dispatcher.h"
#include "router/policy/policy.h"
#include "router/workers/leg.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {

// Where a run is. Transitions (NextRunState; RunEvent names the arrows):
//
//   kRouting --kLegsSent--> kWaiting            the attempt's legs went to their workers
//   kRouting | kWaiting --kDelivered--> kStreaming
//                                               an event reached the caller: no more retries
//   kRouting | kWaiting --kRetryScheduled--> kBackoff
//                                               the attempt failed before any event and a
//                                               retry is left (or a pinned leg goes the
//                                               ordinary way at once)
//   kBackoff --kRetryDue--> kRouting            the backoff passed: a new pair, a new room
//   any --kEnded--> kDone                       success, a final failure, Cancel(), the
//                                               request deadline; `on_done` follows, once
//
// kDone is final. An event that names no arrow from the current state leaves it as it is (a
// leg may deliver before the thread that sent it records kLegsSent, so kStreaming ignores
// kLegsSent).
enum class RunState { kRouting, kWaiting, kStreaming, kBackoff, kDone };
enum class RunEvent { kLegsSent, kDelivered, kRetryScheduled, kRetryDue, kEnded };

// "routing" | "waiting" | "streaming" | "backoff" | "done".
const char* RunStateName(RunState state);
// The state after `event` in `state` (the table above).
RunState NextRunState(RunState state, RunEvent event);

// One request across its attempts (router/dispatcher.h has the rules). Owned by shared_ptr:
// every leg callback and timer keeps it alive, or holds it weakly.
//
// Its state (state_, RunState) moves only by Apply(RunEvent), under mu_; what each state
// allows is in RunState's comment. Each attempt's own progress (its legs, held events, lease)
// is in Attempt, also under mu_. Callbacks into the caller run under deliver_mu_ only, never
// under mu_; legs are cancelled and aborted with no lock held.
//
// Thread-safety: thread-safe; leg callbacks, timers and Cancel() may race.
class Run : public DispatchRun, public std::enable_shared_from_this<Run> {
 public:
  Run(Dispatcher* d, std::shared_ptr<const RoutedRequest> request, Dispatcher::EventFn on_event,
      Dispatcher::DoneFn on_done, StartOptions options);
  ~Run() override;

  void StartAttempt();
  void Cancel() override;
  // Arms the request's deadline (DeadlineExceeded when it passes, whatever the legs report).
  void ArmDeadline();
  // Ends the run with `why` before any attempt.
  void Refuse(absl::Status why) ABSL_LOCKS_EXCLUDED(mu_);
  RunState state() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One attempt: a worker (plain) or a pair and a room (PD). The fields above `announced` are
  // set by StartAttempt before the attempt is published (current_) and read-only afterwards;
  // the rest are the run's mutex's (`mu`), also while StartAttempt fills them in before any leg
  // can call back.
  struct Attempt {
    explicit Attempt(absl::Mutex* run_mu) : mu(run_mu) {}

    absl::Mutex* const mu;  // the run's mu_
    int number = 0;
    uint64_t room = 0;
    std::string rid;
    WorkerPtr prefill;  // null in plain mode and when pinned
    WorkerPtr decode;
    // A sibling's plain decode leg to share_with_'s worker, sharing that leg's prompt.
    bool pinned = false;
    // PD mode, conditional disaggregation: the decode worker prefills the prompt itself (one
    // plain decode leg, no room).
    bool local = false;
    bool announced ABSL_GUARDED_BY(mu) = false;  // on_routed_ was told where its leg went
    LegPtr prefill_call ABSL_GUARDED_BY(mu);
    LegPtr decode_call ABSL_GUARDED_BY(mu);
    bool prefill_done ABSL_GUARDED_BY(mu) = false;
    bool decode_done ABSL_GUARDED_BY(mu) = false;
    // Failed, cancelled or finished: later callbacks change nothing.
    bool over ABSL_GUARDED_BY(mu) = false;
    // PD with prompt logprobs: the decode leg's events wait here until the prefill leg's answer
    // (which carries the prompt logprobs) arrived; the first one delivered carries them.
    bool hold_for_prefill ABSL_GUARDED_BY(mu) = false;
    std::vector<proto::DecodeEvent> held ABSL_GUARDED_BY(mu);
    // The decode leg ended OK while its events were held.
    bool decode_finished ABSL_GUARDED_BY(mu) = false;
    // The prefill leg answered before any decode event: the next event carries these.
    std::optional<proto::PromptLogprobs> pending_prompt_logprobs ABSL_GUARDED_BY(mu);
    // The lease (--stall-timeout-secs): when the legs were sent or last showed progress (the
    // prefill leg's answer, any decode event), and whether a streamed leg's tokens started, after
    // which silence itself is a stall.
    MonoClock::time_point last_progress ABSL_GUARDED_BY(mu);
    bool streaming ABSL_GUARDED_BY(mu) = false;
  };
  using AttemptPtr = std::shared_ptr<Attempt>;

  void OnPrefillDone(const AttemptPtr& a, const absl::Status& s,
                     const proto::PrefillResponse& response);
  void OnDecodeEvent(const AttemptPtr& a, const proto::DecodeEvent& e);
  void OnDecodeDone(const AttemptPtr& a, const absl::Status& s);
  // The request's deadline passed: the attempt in flight fails DeadlineExceeded, or the run ends
  // so when it is between attempts.
  void OnDeadline() ABSL_LOCKS_EXCLUDED(mu_);
  // Schedules CheckStall at `when` (nothing with --stall-timeout-secs 0). Holds neither the run
  // nor the attempt alive.
  void ArmLease(const AttemptPtr& a, MonoClock::time_point when);
  // Fails the attempt if its lease ran out and it is stalled, else arms the lease again.
  void CheckStall(const AttemptPtr& a) ABSL_LOCKS_EXCLUDED(mu_);
  // A leg callback threw: the request ends with an internal error (not retried: the same
  // request would throw again).
  void FailInternally(const AttemptPtr& a) {
    Fail(a, absl::InternalError("internal error: the router failed while handling the request"),
         false);
  }
  // The current attempt failed with `why`: stop its other leg, then retry or finish.
  void Fail(const AttemptPtr& a, absl::Status why, bool retryable) ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels the attempt's legs still running and aborts its room/rid on its workers.
  void StopLegs(const AttemptPtr& a, const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(absl::Status s) ABSL_LOCKS_EXCLUDED(mu_, deliver_mu_);
  // The one place state_ changes: NextRunState. Returns the state it left.
  RunState Apply(RunEvent event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return state_ == RunState::kDone; }
  // An event reached the caller: no more retries.
  bool delivered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_ == RunState::kStreaming;
  }
  bool pd() const { return d_->options_.pd_mode; }
  // The attempt has a room and a prefill leg (PD mode, not a pinned sibling, not local).
  bool paired(const Attempt& a) const { return pd() && !a.pinned && !a.local; }
  // PD mode: decides whether the attempt's decode worker prefills it (a->local), choosing the
  // decode worker first when the saturation rule needs its load, and counts the decision.
  void DecideDisaggregation(Attempt* a, const std::vector<WorkerPtr>& decodes,
                            const std::vector<WorkerPtr>& prefills,
                            const PolicyRequest& policy_request) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the attempt's prefill worker's count of it (BeginRequest, AddPrefillTokens).
  void EndPrefill(const Attempt& a, bool success);
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

  mutable absl::Mutex mu_;
  RunState state_ ABSL_GUARDED_BY(mu_) = RunState::kRouting;
  AttemptPtr current_ ABSL_GUARDED_BY(mu_);
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  // Attempts not counted against max_retries: pinned siblings' and refused local ones'.
  int uncounted_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  // A decode worker refused a local attempt (FAILED_PRECONDITION: --allow-local-prefill=false):
  // every later attempt is PD.
  bool local_refused_ ABSL_GUARDED_BY(mu_) = false;
  Timers::Id deadline_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Serializes calls into the caller's callbacks.
  absl::Mutex deliver_mu_;
  bool done_delivered_ ABSL_GUARDED_BY(deliver_mu_) = false;
  Dispatcher::EventFn on_event_ ABSL_GUARDED_BY(deliver_mu_);
  Dispatcher::DoneFn on_done_ ABSL_GUARDED_BY(deliver_mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_DISPATCH_RUN_H_

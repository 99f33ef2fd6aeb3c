// Dispatcher: sends one routed request to workers and reports its decode stream, with SGLang
// router's failure rules (DESIGN.md "Failure rules").
//
// Plain mode: one Decode leg (no bootstrap host) to a `regular` worker chosen by the policy.
// PD mode: a new random 63-bit room, a prefill worker chosen by the prefill policy and a decode
// worker by the decode policy; both legs are sent at once, the decode leg naming the prefill
// worker's host and bootstrap port. A request is counted against a worker (BeginRequest) from the
// moment it is chosen until its leg ends (EndRequest, which feeds the circuit breaker). A PD
// request with max_new_tokens 0 has no decode leg: the prefill worker answers it alone
// (PrefillResponse.final_event, delivered as the run's one event).
//
// Retries: only while no event has been delivered to the caller. When a leg fails, the other leg
// is cancelled at once (and, in PD mode, the room aborted on both workers), then after a backoff
// with jitter a new pair and a new room are tried, up to BackoffOptions::max_retries times. After
// that the request fails with Unavailable naming the worker's role and its error (the worker's
// address goes to the log only, never to the client). A prefill leg failing
// after the decode stream delivered an event is left to the decode worker, whose own timeout ends
// the stream; the caller then sees the error. Caller errors reported by a worker
// (INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE) are not retried.
//
// Conditional disaggregation (PD mode, DispatchOptions::disaggregation, router/disaggregation.h):
// each attempt of a request that is not a pinned sibling and decodes something is decided anew,
// pd or local; a local attempt sends one plain decode leg (no prefill leg, no room, no bootstrap
// host) to the policy-chosen decode worker, which prefills the prompt itself, and is aborted by
// rid as a plain-mode leg is. A decode worker that refuses it (FAILED_PRECONDITION: started with
// --allow-local-prefill=false) makes the run try again at once as PD, outside max_retries, and
// every later attempt of the run is PD. Every decision is counted
// (tandem_router_disaggregation_decisions_total{decision}).
//
// Sharing a prompt (docs/router.md "Several choices in one request"): a run started with
// StartOptions::on_routed reports where each of its attempts sent its decode leg (PD) or plain
// leg (LegPlace), after the leg was handed to that worker's session, and that the place is gone
// when the attempt fails. A run started with StartOptions::share_with (a sibling) first sends one
// plain decode leg (no prefill leg, no room, no bootstrap host) to that worker with
// share_prompt_with = that leg's rid, if the worker is still registered and available;
// otherwise, and for every attempt after a pinned one, it is an ordinary request (policy-chosen
// worker or pair, share_prompt_with clear). A pinned leg that fails before any event was
// delivered is tried again at once the ordinary way, whatever the error (a worker that does not
// know share_prompt_with refuses the leg), and that second try does not count against
// max_retries. Legs to one worker travel in order on its session, so a sibling started from
// on_routed reaches the worker after the leg it names, unless the session was replaced in
// between; the worker then computes the sibling's prompt itself.
//
// Stalled legs (a lease per attempt, DispatchOptions::stall_timeout): a streamed decode leg whose
// tokens started and then sent nothing for stall_timeout failed, and its worker is reported to
// the registry (probed at once, as an UNAVAILABLE leg). Before that (queued, prefilling, moving
// KV) and for a non-streamed leg, which sends only its answer, silence is no sign: once
// stall_timeout passed since the legs were sent or last showed progress (the prefill leg's
// answer, a decode event), the attempt fails only when a worker it waits on fails its health
// checks, looked at every second. A stalled attempt fails as any failed leg: retried while no
// event reached the caller, else the run ends Unavailable; its legs are cancelled and its room
// aborted on both workers either way. The checks are timers on the dispatcher's timer thread.
//
// A request whose leg would exceed the workers' message limit (kMaxLegBytes,
// router/client_errors.h) is never sent: it ends at once with ResourceExhausted carrying HTTP
// 413 (WithHttpStatus). A callback of a leg that throws is logged and ends the run with Internal.
//
// Legs: each worker's WorkerLegs (router/workers/leg.h, Worker::legs()) starts them; the
// dispatcher sees absl::Status only, whatever carries the leg.
//
// Time: the request deadline (DispatchOptions::request_timeout from Start), the backoff and the
// leases are timers on the dispatcher's Timers, and every rule reads that Timers' clock: a
// monotonic one in production, a ManualClock in tests. At the request deadline the attempt in
// flight fails DeadlineExceeded (not retried; its legs are cancelled and its room aborted), or
// the run ends so between attempts, whatever the legs report; the legs carry the same deadline.
//
// Every run ends with exactly one `on_done` call: OK after the final event, Cancelled after
// Cancel(), DeadlineExceeded when the request timeout passed, else the failure. `on_event` and
// `on_done` are never called at the same time for one run and never after on_done; they run on
// the legs' transport threads or the dispatcher's timer thread and must not block.
//
// Thread-safety: thread-safe. The registry, policies and metrics must outlive the dispatcher; the
// dispatcher must outlive its runs' callbacks (destroy it after the registry stopped and the
// clients' calls finished, i.e. at process shutdown after the HTTP server).
#ifndef TANDEM_ROUTER_DISPATCHER_H_
#define TANDEM_ROUTER_DISPATCHER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/timer_queue.h"
#include "proto/worker.pb.h"
#include "router/api/request.h"
#include "router/disaggregation.h"
#include "router/policy/policy.h"
#include "router/retry.h"
#include "router/router_metrics.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {

struct DispatchOptions {
  bool pd_mode = false;
  BackoffOptions backoff;  // max_retries = 0 with --disable-retries
  absl::Duration request_timeout = absl::Seconds(1800);
  // The lease (--stall-timeout-secs; zero: none): see "Stalled legs" in the class comment.
  absl::Duration stall_timeout = absl::Seconds(30);
  // PD mode: which prompts their decode worker prefills itself (router/disaggregation.h).
  DisaggregationOptions disaggregation;
};

// One request being dispatched. Cancel() (client gone) cancels its legs, aborts its room on both
// workers and ends it with Cancelled. Thread-safe, idempotent.
class DispatchRun {
 public:
  virtual ~DispatchRun() = default;
  virtual void Cancel() = 0;
};

// Where one attempt of a run sent its decode leg (PD) or plain leg: the leg siblings share the
// prompt of (DecodeRequest.share_prompt_with).
struct LegPlace {
  int attempt = 0;   // the run's attempt: 0 first, a retry's higher
  WorkerPtr worker;  // null: that attempt failed and its leg is gone (a retry may follow)
  std::string rid;   // the leg's rid ("<rid>-retryN" for a retry)
};

// How one run relates to others that share its prompt. Both empty: an independent request.
struct StartOptions {
  // Called with each attempt's LegPlace once its leg was sent, and again with a null worker when
  // that attempt fails; never while the dispatcher holds a lock, on the thread that started the
  // attempt (the caller's of Start, or the timer thread) or a leg's callback thread. Calls for
  // one attempt may arrive in either order: a place with a null worker for attempt k outranks a
  // place for k. An attempt whose leg failed before its place was reported is not reported at
  // all. Must not block; may Start other runs.
  std::function<void(const LegPlace&)> on_routed;
  // A sibling: the leg it shares the prompt of (worker not null). See the class comment.
  std::optional<LegPlace> share_with;
};

// Whether the choices of `request`'s prompt (n > 1) may share its prompt KV: not when the
// request asks for the prompt's logprobs (logprob_start_len within the prompt, echo with
// logprobs: the worker that prefills computes them, and a sibling computes only the prompt's
// tail) and not with max_new_tokens 0 (nothing is decoded; the prefill worker's or colocated
// worker's radix cache shares the prompt anyway).
bool MaySharePrompt(const RoutedRequest& request);

class Dispatcher {
 public:
  using EventFn = std::function<void(const proto::DecodeEvent&)>;
  using DoneFn = std::function<void(absl::Status)>;

  // `prefill_policy` is used only in PD mode; `decode_policy` picks decode or regular workers.
  // `timers` (null: a TimerQueue of its own, on the real monotonic clock) runs the retries,
  // leases and request deadlines and gives the time every rule reads; tests pass a ManualClock
  // (common/manual_clock.h). It must outlive the dispatcher.
  Dispatcher(DispatchOptions options, WorkerRegistry* registry, Policy* prefill_policy,
             Policy* decode_policy, RouterMetrics* metrics, Timers* timers = nullptr);
  ~Dispatcher();
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // Starts `request`; see the class comment for the callbacks' contract.
  std::shared_ptr<DispatchRun> Start(std::shared_ptr<const RoutedRequest> request, EventFn on_event,
                                     DoneFn on_done, StartOptions options = {});

  // Whether a request could be routed now: in plain mode an available regular worker, in PD mode
  // an available prefill and an available decode worker. Unavailable names what is missing.
  absl::Status CanRoute() const;

  const DispatchOptions& options() const { return options_; }

  // Runs `fn` soon on the dispatcher's timer thread, never in the caller's frame.
  void Post(std::function<void()> fn) { timers_->Post(std::move(fn)); }
  // The clock of its deadlines, backoff and leases.
  const Clock& clock() const { return timers_->clock(); }

 private:
  friend class Run;

  const DispatchOptions options_;
  WorkerRegistry* const registry_;
  Policy* const prefill_policy_;
  Policy* const decode_policy_;
  RouterMetrics* const metrics_;

  const std::unique_ptr<TimerQueue> own_timers_;
  Timers* const timers_;
  std::atomic<int64_t> live_runs_{0};  // Run objects alive (their legs may still call back)
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_DISPATCHER_H_

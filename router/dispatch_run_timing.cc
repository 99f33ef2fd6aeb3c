// Run's clocks: its state table, the request deadline, and the check of the stall lease
// (router/dispatch_run.h; the rest of Run is in dispatch_run.cc).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "router/dispatch_run.h"

namespace tandem::router {
namespace {

// Once a waiting leg's lease ran out, how often its workers' health is looked at again.
constexpr MonoClock::duration kStallRecheck = std::chrono::seconds(1);

int64_t Seconds(MonoClock::duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

const char* RunStateName(RunState state) {
  switch (state) {
    case RunState::kRouting:
      return "routing";
    case RunState::kWaiting:
      return "waiting";
    case RunState::kStreaming:
      return "streaming";
    case RunState::kBackoff:
      return "backoff";
    case RunState::kDone:
      return "done";
  }
  return "done";
}

RunState NextRunState(RunState state, RunEvent event) {
  if (state == RunState::kDone) return state;
  switch (event) {
    case RunEvent::kLegsSent:
      return state == RunState::kRouting ? RunState::kWaiting : state;
    case RunEvent::kDelivered:
      return state == RunState::kRouting || state == RunState::kWaiting ? RunState::kStreaming
                                                                        : state;
    case RunEvent::kRetryScheduled:
      return state == RunState::kRouting || state == RunState::kWaiting ? RunState::kBackoff
                                                                        : state;
    case RunEvent::kRetryDue:
      return state == RunState::kBackoff ? RunState::kRouting : state;
    case RunEvent::kEnded:
      return RunState::kDone;
  }
  return state;
}

void Run::ArmDeadline() {
  if (deadline_.is_never()) return;
  std::weak_ptr<Run> weak_self = weak_from_this();
  const Timers::Id id = d_->timers_->RunAt(deadline_.when(), [weak_self] {
    if (std::shared_ptr<Run> self = weak_self.lock()) self->OnDeadline();
  });
  absl::MutexLock lock(&mu_);
  if (done()) {
    d_->timers_->Cancel(id);
  } else {
    deadline_timer_ = id;
  }
}

void Run::OnDeadline() {
  AttemptPtr a;
  {
    absl::MutexLock lock(&mu_);
    if (done()) return;
    deadline_timer_ = 0;
    a = current_;
    if (state_ == RunState::kBackoff || a == nullptr || a->over) {
      // Between attempts: nothing to stop.
      Apply(RunEvent::kEnded);
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

void Run::CheckStall(const AttemptPtr& a) {
  const MonoClock::duration timeout = absl::ToChronoNanoseconds(d_->options_.stall_timeout);
  const MonoClock::time_point now = d_->clock().Now();
  MonoClock::time_point last;
  bool streaming, prefill_waiting, decode_waiting;
  {
    absl::MutexLock lock(&mu_);
    if (a->over || done()) return;
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

}  // namespace tandem::router

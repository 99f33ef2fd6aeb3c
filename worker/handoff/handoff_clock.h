// Time in the KV handoff. Every deadline a worker keeps is monotonic (common/clock.h), read
// through a NowFn so tests can drive it; only relative budgets cross hosts
// (RoomRegistration.budget_ms), because two hosts' wall clocks may differ by minutes.
//
// Stateless functions; thread-safe.
#ifndef TANDEM_WORKER_HANDOFF_HANDOFF_CLOCK_H_
#define TANDEM_WORKER_HANDOFF_HANDOFF_CLOCK_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tandem::worker {

// The monotonic clock the handoff reads (MonoNow outside tests).
using NowFn = std::function<MonoClock::time_point()>;

// The longest budget a received RoomRegistration can set: a peer's value is untrusted, and no
// room waits a day for its KV.
inline constexpr std::chrono::hours kMaxRoomBudget{24};

// Whether `deadline` has passed at `now` (Deadline::expired() reads the real clock, not a NowFn).
inline bool Passed(const Deadline& deadline, MonoClock::time_point now) {
  return now >= deadline.when();
}

// The budget to send for `deadline` at `now`: the time left in whole milliseconds, at least 1 (0
// on the wire means "not set"). Never() sends kMaxRoomBudget.
inline int64_t BudgetMs(const Deadline& deadline, MonoClock::time_point now) {
  if (deadline.is_never()) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(kMaxRoomBudget).count();
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.when() - now);
  return std::max<int64_t>(1, left.count());
}

// The deadline a received `budget_ms` sets here: `now` plus the budget, capped at kMaxRoomBudget;
// a budget <= 0 (not set) means `fallback` from now.
inline Deadline DeadlineFromBudget(int64_t budget_ms, MonoClock::time_point now,
                                   absl::Duration fallback) {
  constexpr int64_t kMaxMs =
      std::chrono::duration_cast<std::chrono::milliseconds>(kMaxRoomBudget).count();
  if (budget_ms <= 0) {
    const absl::Duration wait =
        std::clamp(fallback, absl::ZeroDuration(), absl::Milliseconds(kMaxMs));
    return Deadline::At(
        now + std::chrono::duration_cast<MonoClock::duration>(absl::ToChronoNanoseconds(wait)));
  }
  return Deadline::At(now + std::chrono::milliseconds(std::min(budget_ms, kMaxMs)));
}

// A monotonic deadline as the instant kvtransfer's SubmitOptions take (absl::Time): the time left
// at `now` added to the wall clock of this call, InfiniteFuture for Never().
inline absl::Time TransferDeadline(const Deadline& deadline, MonoClock::time_point now) {
  if (deadline.is_never()) return absl::InfiniteFuture();
  const MonoClock::duration left = std::max(MonoClock::duration::zero(), deadline.when() - now);
  return absl::Now() + absl::FromChrono(left);
}

// `d` as the monotonic clock's duration.
inline MonoClock::duration ToMono(absl::Duration d) {
  return std::chrono::duration_cast<MonoClock::duration>(absl::ToChronoNanoseconds(d));
}

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_HANDOFF_CLOCK_H_

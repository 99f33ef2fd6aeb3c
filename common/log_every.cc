#include "common/log_every.h"

#include "absl/time/clock.h"

namespace tandem {

bool LogEvery::Allow() {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  int64_t last_ms = last_ms_.load(std::memory_order_relaxed);
  const bool due = last_ms == INT64_MIN || now_ms - last_ms >= every_ms_;
  return due && last_ms_.compare_exchange_strong(last_ms, now_ms, std::memory_order_relaxed);
}

bool LogEvery::Allow(int64_t* suppressed) {
  if (!Allow()) {
    suppressed_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *suppressed = suppressed_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace tandem

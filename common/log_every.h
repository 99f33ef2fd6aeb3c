// LogEvery: lets at most one event through per interval, whichever thread asks. For the log lines
// a stranger can cause (a refused connection, say), which must not fill the disk however fast they
// come:
//   LogEvery refusal_logs_{absl::Seconds(1)};
//   if (refusal_logs_.Allow()) spdlog::warn("connection from {} refused: {}", peer, why);
//
// Thread-safety: thread-safe (one atomic, no lock).
#ifndef TANDEM_COMMON_LOG_EVERY_H_
#define TANDEM_COMMON_LOG_EVERY_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"

namespace tandem {

class LogEvery {
 public:
  explicit LogEvery(absl::Duration every) : every_ms_(absl::ToInt64Milliseconds(every)) {}
  LogEvery(const LogEvery&) = delete;
  LogEvery& operator=(const LogEvery&) = delete;

  // True for the first call, then for the first call at least `every` after the last true one.
  bool Allow();

 private:
  const int64_t every_ms_;
  std::atomic<int64_t> last_ms_{INT64_MIN};  // INT64_MIN: never
};

}  // namespace tandem

#endif  // TANDEM_COMMON_LOG_EVERY_H_

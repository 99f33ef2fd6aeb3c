// LogEvery: lets at most one event through per interval, whichever thread asks. For the log lines
// a stranger can cause (a refused connection, say), which must not fill the disk however fast they
// come:
//   LogEvery refusal_logs_{absl::Seconds(1)};
//   if (refusal_logs_.Allow()) spdlog::warn("connection from {} refused: {}", peer, why);
// or, so that the line also says how many were not logged since the last one:
//   int64_t more = 0;
//   if (refusal_logs_.Allow(&more)) spdlog::warn("... refused: {} ({} more since)", why, more);
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
  // The same, counting the calls that were refused: when true, `*suppressed` is how many calls
  // of this form returned false since the last true one.
  bool Allow(int64_t* suppressed);

 private:
  const int64_t every_ms_;
  std::atomic<int64_t> last_ms_{INT64_MIN};  // INT64_MIN: never
  std::atomic<int64_t> suppressed_{0};       // Allow(int64_t*) calls refused since the last true
};

}  // namespace tandem

#endif  // TANDEM_COMMON_LOG_EVERY_H_

// DirectAnswer: what lets a thread other than a connection's strand write a whole HTTP answer to
// the connection's socket itself (http_session.h, "Direct answers"). The strand allows it while
// the connection waits for the answer with its disconnect watch armed; one answering thread then
// sends the bytes; the strand learns of it when the watch completes (TakeSent), writes what the
// socket did not take (TakeRest), and closes a connection left idle after it (IdleSince).
//
// Thread-safety: TrySend and IdleSince from any thread; the rest from the strand. The socket is
// written only between Allow(true) and the first of TrySend, TakeSent, Close; Close is called
// before the strand closes the socket.
#ifndef TANDEM_COMMON_HTTP_DIRECT_ANSWER_H_
#define TANDEM_COMMON_HTTP_DIRECT_ANSWER_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tandem::http_internal {

class DirectAnswer {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Result {
    kNotAllowed,  // nothing written: the strand writes the answer
    kSent,        // written whole
    kPartial,     // the rest waits in TakeRest: the caller has the strand write it
  };

  DirectAnswer() = default;
  DirectAnswer(const DirectAnswer&) = delete;
  DirectAnswer& operator=(const DirectAnswer&) = delete;

  // Strand, before the first Allow(true): the connected socket's descriptor.
  void SetSocket(int fd) { fd_ = fd; }
  // Strand: whether the current exchange may be answered directly from now on.
  void Allow(bool allow) ABSL_LOCKS_EXCLUDED(mu_);
  // Any thread: when allowed, writes the bytes `wire()` returns (built under the lock, so what
  // the strand wrote before Allow is visible to it) and allows no other write.
  Result TrySend(const std::function<std::string()>& wire) ABSL_LOCKS_EXCLUDED(mu_);
  // Strand: whether an answer was written whole since the last Allow; clears that and the
  // allowance.
  bool TakeSent() ABSL_LOCKS_EXCLUDED(mu_);
  // Strand: the bytes a kPartial TrySend left.
  std::string TakeRest() ABSL_LOCKS_EXCLUDED(mu_);
  // Strand: no direct write from now on; the socket is about to close.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // Any thread: when the connection has sat for `idle` or more since an answer written whole
  // (nothing has come since, or the strand would have taken it), that answer's time.
  std::optional<Clock::time_point> IdleSince(Clock::time_point now, Clock::duration idle) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Strand: whether the connection is still idle after the answer written at `at`.
  bool StillIdleAfter(Clock::time_point at) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  int fd_ = -1;
  mutable absl::Mutex mu_;
  bool allowed_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<Clock::time_point> sent_at_ ABSL_GUARDED_BY(mu_);  // written whole, then
  std::string rest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_DIRECT_ANSWER_H_

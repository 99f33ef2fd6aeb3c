#include "common/http_direct_answer.h"

#include <sys/socket.h>
#include <sys/types.h>

#include <utility>

namespace tandem::http_internal {

void DirectAnswer::Allow(bool allow) {
  absl::MutexLock lock(&mu_);
  allowed_ = allow;
}

DirectAnswer::Result DirectAnswer::TrySend(const std::function<std::string()>& wire) {
  absl::MutexLock lock(&mu_);
  if (!allowed_) return Result::kNotAllowed;
  allowed_ = false;
  const std::string bytes = wire();
  // Stamped before the write: the client may act on the answer before this thread runs again.
  const Clock::time_point at = Clock::now();
  // The socket is non-blocking: a full buffer or a broken connection leaves the rest to the
  // strand, whose write reports the error.
  const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(bytes.size())) {
    sent_at_ = at;
    return Result::kSent;
  }
  rest_ = bytes.substr(n > 0 ? static_cast<size_t>(n) : 0);
  return Result::kPartial;
}

bool DirectAnswer::TakeSent() {
  absl::MutexLock lock(&mu_);
  allowed_ = false;
  const bool sent = sent_at_.has_value();
  sent_at_.reset();
  return sent;
}

std::string DirectAnswer::TakeRest() {
  absl::MutexLock lock(&mu_);
  return std::exchange(rest_, std::string());
}

void DirectAnswer::Close() {
  absl::MutexLock lock(&mu_);
  allowed_ = false;
  sent_at_.reset();
}

std::optional<DirectAnswer::Clock::time_point> DirectAnswer::IdleSince(Clock::time_point now,
                                                                       Clock::duration idle) const {
  absl::MutexLock lock(&mu_);
  if (!sent_at_.has_value() || now - *sent_at_ < idle) return std::nullopt;
  return sent_at_;
}

bool DirectAnswer::StillIdleAfter(Clock::time_point at) const {
  absl::MutexLock lock(&mu_);
  return sent_at_ == at;
}

}  // namespace tandem::http_internal

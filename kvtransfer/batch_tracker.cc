#include "kvtransfer/batch_tracker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::kv {

const char* BatchStateName(BatchState state) {
  switch (state) {
    case BatchState::kPending:
      return "pending";
    case BatchState::kInProgress:
      return "in_progress";
    case BatchState::kCompleted:
      return "completed";
    case BatchState::kFailed:
      return "failed";
    case BatchState::kTimedOut:
      return "timed_out";
    case BatchState::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace {
absl::Status Unknown(BatchId id) {
  return absl::NotFoundError(absl::StrCat("unknown or released batch ", id));
}
}  // namespace

BatchId BatchTracker::Create(PeerId peer, uint64_t bytes_total, SubmitOptions options) {
  absl::MutexLock lock(&mu_);
  BatchId id = next_id_++;
  Entry& e = batches_[id];
  e.peer = peer;
  e.status.bytes_total = bytes_total;
  e.options = std::move(options);
  return id;
}

void BatchTracker::MarkInProgress(BatchId id) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it != batches_.end() && it->second.status.state == BatchState::kPending) {
    it->second.status.state = BatchState::kInProgress;
  }
}

void BatchTracker::AddAcked(BatchId id, uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it != batches_.end() && !IsTerminal(it->second.status.state)) {
    it->second.status.bytes_acked += bytes;
  }
}

bool BatchTracker::Finish(BatchId id, BatchState state, absl::Status error) {
  CompletionCallback callback;
  BatchStatus status;
  {
    absl::MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end() || IsTerminal(it->second.status.state)) return false;
    it->second.status.state = state;
    it->second.status.error = std::move(error);
    changed_.SignalAll();
    if (!it->second.options.on_done) return true;
    callback = std::move(it->second.options.on_done);
    status = it->second.status;
    batches_.erase(it);
  }
  callback(id, status);
  return true;
}

absl::StatusOr<BatchStatus> BatchTracker::Poll(BatchId id) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return Unknown(id);
  return it->second.status;
}

absl::StatusOr<BatchStatus> BatchTracker::Wait(BatchId id, absl::Time until) {
  // `until` becomes a monotonic deadline once, so a wall-clock step does not stretch the wait.
  const absl::Duration left = std::max(until - absl::Now(), absl::ZeroDuration());
  const MonoClock::time_point deadline =
      Deadline::After(RealClock(), absl::ToChronoNanoseconds(left)).when();  // saturating
  absl::MutexLock lock(&mu_);
  while (true) {
    auto it = batches_.find(id);
    if (it == batches_.end()) return Unknown(id);
    if (IsTerminal(it->second.status.state) || MonoNow() >= deadline) return it->second.status;
    changed_.WaitUntil(&mu_, deadline);
  }
}

absl::StatusOr<bool> BatchTracker::Cancel(BatchId id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = batches_.find(id);
    if (it == batches_.end()) return Unknown(id);
    if (IsTerminal(it->second.status.state)) return false;
  }
  return Finish(id, BatchState::kCancelled, absl::CancelledError("cancelled by the owner"));
}

absl::Status BatchTracker::Release(BatchId id) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return Unknown(id);
  if (!IsTerminal(it->second.status.state)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batch ", id, " is still ", BatchStateName(it->second.status.state), "; cancel it first"));
  }
  batches_.erase(it);
  return absl::OkStatus();
}

std::vector<BatchId> BatchTracker::ExpireDeadlines(absl::Time now) {
  std::vector<BatchId> expired;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : batches_) {
      if (!IsTerminal(e.status.state) && e.options.deadline <= now) expired.push_back(id);
    }
  }
  std::vector<BatchId> done;
  for (BatchId id : expired) {
    if (Finish(id, BatchState::kTimedOut,
               absl::DeadlineExceededError("deadline passed before the peer acknowledged"))) {
      done.push_back(id);
    }
  }
  return done;
}

void BatchTracker::FailPeer(PeerId peer, const absl::Status& error) {
  std::vector<BatchId> ids;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, e] : batches_) {
      if (!IsTerminal(e.status.state) && (peer == 0 || e.peer == peer)) ids.push_back(id);
    }
  }
  for (BatchId id : ids) Finish(id, BatchState::kFailed, error);
}

absl::Time BatchTracker::NextDeadline() {
  absl::MutexLock lock(&mu_);
  absl::Time next = absl::InfiniteFuture();
  for (const auto& [id, e] : batches_) {
    if (!IsTerminal(e.status.state) && e.options.deadline < next) next = e.options.deadline;
  }
  return next;
}

size_t BatchTracker::size() {
  absl::MutexLock lock(&mu_);
  return batches_.size();
}

bool BatchTracker::IsDone(BatchId id) {
  absl::MutexLock lock(&mu_);
  auto it = batches_.find(id);
  return it == batches_.end() || IsTerminal(it->second.status.state);
}

}  // namespace tandem::kv

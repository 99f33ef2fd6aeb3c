// Batch bookkeeping shared by the backends: ids, states, deadlines, waiters and callbacks.
//
// Implements the batch state machine of transfer_engine.h. A backend creates a batch, reports
// progress (MarkInProgress, AddAcked) and ends it (Finish); the first terminal state wins and
// later reports are ignored. Completion callbacks run outside the lock on the thread that ended
// the batch, after which the batch is forgotten; batches without a callback are kept until
// Release(). Thread-safe.
#ifndef TANDEM_KVTRANSFER_BATCH_TRACKER_H_
#define TANDEM_KVTRANSFER_BATCH_TRACKER_H_

#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/steady_cond_var.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

class BatchTracker {
 public:
  BatchTracker() = default;
  BatchTracker(const BatchTracker&) = delete;
  BatchTracker& operator=(const BatchTracker&) = delete;

  BatchId Create(PeerId peer, uint64_t bytes_total, SubmitOptions options);
  // kPending -> kInProgress; no-op otherwise.
  void MarkInProgress(BatchId id);
  void AddAcked(BatchId id, uint64_t bytes);
  // Moves a running batch to the terminal `state`; returns false if it was already terminal
  // (or unknown). Runs the callback, if any, before returning.
  bool Finish(BatchId id, BatchState state, absl::Status error = absl::OkStatus());

  absl::StatusOr<BatchStatus> Poll(BatchId id);
  absl::StatusOr<BatchStatus> Wait(BatchId id, absl::Time until);
  // Returns true if the batch moved to kCancelled now.
  absl::StatusOr<bool> Cancel(BatchId id);
  absl::Status Release(BatchId id);

  // Times out every running batch whose deadline is <= now; returns their ids.
  std::vector<BatchId> ExpireDeadlines(absl::Time now);
  // Fails every running batch of `peer` (or of every peer when peer == 0).
  void FailPeer(PeerId peer, const absl::Status& error);
  // The earliest deadline among running batches, or InfiniteFuture.
  absl::Time NextDeadline();
  // Number of batches tracked (running or terminal and not yet released).
  size_t size();
  // True if the batch is unknown or terminal.
  bool IsDone(BatchId id);

 private:
  struct Entry {
    PeerId peer;
    BatchStatus status;
    SubmitOptions options;
  };

  absl::Mutex mu_;
  SteadyCondVar changed_;
  BatchId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<BatchId, Entry> batches_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_BATCH_TRACKER_H_

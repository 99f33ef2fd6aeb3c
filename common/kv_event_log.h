// KV events: what a worker's radix cache stores and evicts, as a sequence-numbered log that any
// number of readers pull from, plus the snapshot a reader starts from (docs/router.md "KV events").
//
// The worker side: the radix cache calls Stored/Removed with block hashes (common/kv_block_hash.h)
// on its own thread; each hash is one event with the next sequence number (1, 2, ...). The log
// keeps the last `capacity` events and the set of blocks currently stored. It never blocks the
// writer on a reader and never grows past its bounds: a reader too slow to keep up finds the events
// it needs dropped, gets `gap`, and starts again from a snapshot.
// The reader side (the router): Snapshot() once, then EventsSince(snapshot.seq), then
// EventsSince(last seen seq) forever. A reader that sees another incarnation (the worker restarted)
// or a gap discards what it knew and takes a new snapshot.
//
// Bounds: at most `capacity` events retained; the stored set is bounded by the writer (a radix
// cache stores at most one hash per KV block); a reply holds at most `max_events` events.
// Thread-safety: thread-safe; one mutex, held only to copy in or out.
#ifndef TANDEM_COMMON_KV_EVENT_LOG_H_
#define TANDEM_COMMON_KV_EVENT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"

namespace tandem {

struct KvBlockEvent {
  enum class Kind : uint8_t { kStored, kRemoved };
  uint64_t seq = 0;
  Kind kind = Kind::kStored;
  uint64_t block_hash = 0;
};

// The events after some sequence number.
struct KvEventBatch {
  uint64_t incarnation = 0;
  int32_t block_size = 0;
  // True: events after the asked seq were dropped (or the seq is not of this log): take a
  // snapshot. `events` is then empty.
  bool gap = false;
  std::vector<KvBlockEvent> events;  // consecutive seqs, ascending
  uint64_t last_seq = 0;             // the log's newest seq when the batch was read
};

// Every block stored as of `seq`: applying events after `seq` to it gives the live set.
struct KvSnapshot {
  uint64_t incarnation = 0;
  int32_t block_size = 0;
  uint64_t seq = 0;
  std::vector<uint64_t> block_hashes;  // unordered
};

class KvEventLog {
 public:
  // `incarnation`: a random number naming this process's log (a restarted worker draws another).
  // block_size >= 1 and capacity >= 1 (aborts otherwise: configuration).
  KvEventLog(uint64_t incarnation, int32_t block_size, size_t capacity);
  KvEventLog(const KvEventLog&) = delete;
  KvEventLog& operator=(const KvEventLog&) = delete;

  // Writer side. A hash stored twice, or removed while not stored, is a writer bug: logged, and
  // the set stays exact (no event for the no-op).
  void Stored(std::span<const uint64_t> block_hashes);
  void Removed(std::span<const uint64_t> block_hashes);

  // Reader side. Events with seq > after_seq, at most max_events (>= 1).
  KvEventBatch EventsSince(uint64_t after_seq, size_t max_events) const;
  KvSnapshot Snapshot() const;

  uint64_t incarnation() const { return incarnation_; }
  int32_t block_size() const { return block_size_; }
  uint64_t last_seq() const;
  size_t stored_blocks() const;
  // Events dropped from the retained window since construction (a reader may have missed them).
  uint64_t dropped_events() const;

 private:
  void Append(KvBlockEvent::Kind kind, uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t incarnation_;
  const int32_t block_size_;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  std::deque<KvBlockEvent> events_ ABSL_GUARDED_BY(mu_);  // the newest, seqs consecutive
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<uint64_t> stored_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem

#endif  // TANDEM_COMMON_KV_EVENT_LOG_H_

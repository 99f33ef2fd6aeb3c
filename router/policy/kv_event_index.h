// KvEventIndex: the router's exact view of which KV blocks each worker's radix cache holds, built
// from the workers' KV events (common/kv_event_log.h; docs/router.md "KV events").
//
// Per worker (by URL) it keeps the incarnation, block size, last applied sequence number and the
// set of stored block hashes. A worker's state is *synced* only after a snapshot; events then
// apply strictly in sequence. Anything that could make the set wrong turns the worker back to
// unsynced and empties its set, and the caller must fetch a snapshot (ApplyEvents answers
// kNeedSnapshot): a gap in sequence numbers, a batch marked `gap`, another incarnation (the
// worker restarted: what it held is gone), another block size, or a set past
// max_blocks_per_worker. Events at or below the applied seq (a repeated batch) are skipped. So the
// index is exact or it says it does not know; it never drifts silently.
//
// PredictCachedTokens answers, for a synced worker, how many leading prompt tokens its radix cache
// would reuse (whole blocks, at most max_tokens, as RadixCache::MatchAndRef); for an unsynced or
// unknown worker it answers nullopt, and the caller falls back to the router's prefix tree.
//
// Bounds: max_blocks_per_worker hashes per worker (8 bytes plus a hash-table slot each).
// Thread-safety: thread-safe (one mutex; no I/O, no callbacks).
#ifndef TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_
#define TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/kv_event_log.h"

namespace tandem::router {

class KvEventIndex {
 public:
  // max_blocks_per_worker >= 1: a worker reporting more is treated as unsynced (the router
  // falls back to its tree for it) rather than holding unbounded memory.
  explicit KvEventIndex(size_t max_blocks_per_worker = size_t{1} << 22);
  KvEventIndex(const KvEventIndex&) = delete;
  KvEventIndex& operator=(const KvEventIndex&) = delete;

  enum class Apply { kApplied, kNeedSnapshot };
  // Replaces what is known of `url` with the snapshot. kNeedSnapshot only if it is too large.
  Apply ApplySnapshot(const std::string& url, const KvSnapshot& snapshot);
  // Applies a batch read with EventsSince(NextSeq(url)).
  Apply ApplyEvents(const std::string& url, const KvEventBatch& batch);
  // Forgets `url` (the worker left the cluster).
  void RemoveWorker(const std::string& url);

  // Whether `url` is synced, and the seq to read events after (its last applied seq).
  bool Synced(const std::string& url) const;
  uint64_t NextSeq(const std::string& url) const;

  // Blocks `url`'s cache holds; nullopt when `url` is not synced.
  std::optional<size_t> StoredBlocks(const std::string& url) const;

  // Leading tokens of `tokens` that `url`'s cache holds, in whole blocks, at most max_tokens;
  // nullopt when `url` is not synced.
  std::optional<int64_t> PredictCachedTokens(const std::string& url,
                                             std::span<const int32_t> tokens,
                                             int64_t max_tokens) const;

  struct WorkerView {
    std::string url;
    bool synced = false;
    uint64_t incarnation = 0;
    int32_t block_size = 0;
    uint64_t seq = 0;
    size_t blocks = 0;
    uint64_t snapshots = 0;  // snapshots applied (1 + resyncs)
    uint64_t resyncs = 0;    // times the worker fell out of sync (gap, restart, oversize)
  };
  // Every known worker, sorted by URL (admin endpoint, metrics, tests).
  std::vector<WorkerView> Describe() const;

 private:
  struct Worker {
    bool synced = false;
    uint64_t incarnation = 0;
    int32_t block_size = 0;
    uint64_t seq = 0;
    absl::flat_hash_set<uint64_t> blocks;
    uint64_t snapshots = 0;
    uint64_t resyncs = 0;
  };
  static void Unsync(Worker& w);

  const size_t max_blocks_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_

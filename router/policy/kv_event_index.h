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
// In-flight overlay: the events say what a worker's cache holds once the worker has computed a
// block and the router has polled it, so a burst of prompts sharing a prefix would each be
// predicted uncached. AddPending records the full blocks of a prompt the router has just sent to
// a worker as *pending* there: the worker will hold them once that request's prefill has run. A
// pending block counts as held until the worker's events report it stored (then the stored set
// answers for it, and a later eviction is reflected) or until `pending_ttl` after it was added
// (the request failed, was aborted, or the worker never stored it, e.g. a full pool), and never
// across a resync. A block already stored is not made pending.
//
// Prediction: the cached tokens predicted for a prompt on a worker are the whole blocks of the
// longest prefix of its hash chain that is stored or pending there, at most max_tokens (the
// caller passes prompt length - 1, as the worker's RadixCache::MatchAndRef is called). It equals
// what the worker reuses when the pending blocks' request has computed them before this request
// is admitted; a request admitted in the same scheduler step as the one computing its prefix
// reuses nothing (the engine caches a block after the step that computed it), and the prediction
// then says more than the worker reuses. For an unsynced or unknown worker it answers nullopt,
// and the caller falls back to the router's prefix tree.
//
// Bounds: max_blocks_per_worker hashes per worker, stored and pending each (8 bytes plus a
// hash-table slot each; expired pending blocks are dropped on every applied batch).
// Thread-safety: thread-safe (one mutex; no I/O, no callbacks). The clock must outlive the index.
#ifndef TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_
#define TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/kv_event_log.h"

namespace tandem::router {

class KvEventIndex {
 public:
  // max_blocks_per_worker >= 1: a worker reporting more is treated as unsynced (the router
  // falls back to its tree for it) rather than holding unbounded memory. pending_ttl: how long a
  // block AddPending recorded counts without the worker confirming it.
  explicit KvEventIndex(size_t max_blocks_per_worker = size_t{1} << 22,
                        MonoClock::duration pending_ttl = std::chrono::seconds(5),
                        const Clock& clock = RealClock());
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

  // The block size `url` hashes with; 0 when `url` is not synced.
  int32_t BlockSize(const std::string& url) const;

  // Leading blocks of `chain` (a prompt's KvBlockHashChain with `block_size`) that are stored or
  // pending on `url`; nullopt when `url` is not synced or uses another block size. A caller
  // predicting for several workers hashes the prompt once per block size and calls this.
  std::optional<int64_t> MatchedBlocks(const std::string& url, int32_t block_size,
                                       std::span<const uint64_t> chain) const;

  // Leading tokens of `tokens` that `url`'s cache holds or will hold (pending), in whole blocks,
  // at most max_tokens; nullopt when `url` is not synced. Hashes `tokens`.
  std::optional<int64_t> PredictCachedTokens(const std::string& url,
                                             std::span<const int32_t> tokens,
                                             int64_t max_tokens) const;

  // Records `chain` (a prompt's full blocks, hashed with `block_size`) as pending on `url`: a
  // request with that prompt was sent there. Ignored unless `url` is synced with that block size.
  void AddPending(const std::string& url, int32_t block_size, std::span<const uint64_t> chain);

  struct WorkerView {
    std::string url;
    bool synced = false;
    uint64_t incarnation = 0;
    int32_t block_size = 0;
    uint64_t seq = 0;
    size_t blocks = 0;
    size_t pending = 0;      // pending blocks not yet expired or confirmed
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
    absl::flat_hash_map<uint64_t, MonoClock::time_point> pending;  // hash -> expiry
    uint64_t snapshots = 0;
    uint64_t resyncs = 0;
  };
  static void Unsync(Worker& w);
  // Drops `w`'s pending blocks that expired by `now`.
  static void DropExpired(Worker& w, MonoClock::time_point now);

  const size_t max_blocks_;
  const MonoClock::duration pending_ttl_;
  const Clock& clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_POLICY_KV_EVENT_INDEX_H_

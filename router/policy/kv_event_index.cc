#include "router/policy/kv_event_index.h"

#include <algorithm>

#include "common/kv_block_hash.h"

namespace tandem::router {

KvEventIndex::KvEventIndex(size_t max_blocks_per_worker, MonoClock::duration pending_ttl,
                           const Clock& clock)
    : max_blocks_(std::max<size_t>(max_blocks_per_worker, 1)),
      pending_ttl_(pending_ttl),
      clock_(clock) {}

void KvEventIndex::Unsync(Worker& w) {
  if (w.synced) ++w.resyncs;
  w.synced = false;
  w.blocks.clear();
  w.pending.clear();
  w.seq = 0;
}

void KvEventIndex::DropExpired(Worker& w, MonoClock::time_point now) {
  absl::erase_if(w.pending, [now](const auto& entry) { return entry.second <= now; });
}

KvEventIndex::Apply KvEventIndex::ApplySnapshot(const std::string& url,
                                                const KvSnapshot& snapshot) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[url];
  Unsync(w);
  if (snapshot.block_hashes.size() > max_blocks_ || snapshot.block_size < 1) {
    return Apply::kNeedSnapshot;
  }
  w.blocks.insert(snapshot.block_hashes.begin(), snapshot.block_hashes.end());
  // Placements made before the resync are not trusted; requests routed from now on add theirs.
  w.incarnation = snapshot.incarnation;
  w.block_size = snapshot.block_size;
  w.seq = snapshot.seq;
  w.synced = true;
  ++w.snapshots;
  return Apply::kApplied;
}

KvEventIndex::Apply KvEventIndex::ApplyEvents(const std::string& url, const KvEventBatch& batch) {
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[url];
  if (!w.synced) return Apply::kNeedSnapshot;
  if (batch.gap || batch.incarnation != w.incarnation || batch.block_size != w.block_size) {
    Unsync(w);
    return Apply::kNeedSnapshot;
  }
  for (const KvBlockEvent& e : batch.events) {
    if (e.seq <= w.seq) continue;  // already applied
    if (e.seq != w.seq + 1) {
      Unsync(w);
      return Apply::kNeedSnapshot;
    }
    if (e.kind == KvBlockEvent::Kind::kStored) {
      w.blocks.insert(e.block_hash);
      w.pending.erase(e.block_hash);  // confirmed: the stored set answers for it from now on
      if (w.blocks.size() > max_blocks_) {
        Unsync(w);
        return Apply::kNeedSnapshot;
      }
    } else {
      w.blocks.erase(e.block_hash);
    }
    w.seq = e.seq;
  }
  DropExpired(w, clock_.Now());
  return Apply::kApplied;
}

void KvEventIndex::RemoveWorker(const std::string& url) {
  absl::MutexLock lock(&mu_);
  workers_.erase(url);
}

bool KvEventIndex::Synced(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  return it != workers_.end() && it->second.synced;
}

uint64_t KvEventIndex::NextSeq(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  return it == workers_.end() ? 0 : it->second.seq;
}

std::optional<size_t> KvEventIndex::StoredBlocks(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  if (it == workers_.end() || !it->second.synced) return std::nullopt;
  return it->second.blocks.size();
}

int32_t KvEventIndex::BlockSize(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  return it == workers_.end() || !it->second.synced ? 0 : it->second.block_size;
}

std::optional<int64_t> KvEventIndex::MatchedBlocks(const std::string& url, int32_t block_size,
                                                   std::span<const uint64_t> chain) const {
  const MonoClock::time_point now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  if (it == workers_.end() || !it->second.synced || it->second.block_size != block_size) {
    return std::nullopt;
  }
  const Worker& w = it->second;
  int64_t matched = 0;
  for (uint64_t hash : chain) {
    if (!w.blocks.contains(hash)) {
      auto p = w.pending.find(hash);
      if (p == w.pending.end() || p->second <= now) break;
    }
    ++matched;
  }
  return matched;
}

std::optional<int64_t> KvEventIndex::PredictCachedTokens(const std::string& url,
                                                         std::span<const int32_t> tokens,
                                                         int64_t max_tokens) const {
  // Hash outside the lock (one SHA-256 per block); a block-size change in between is seen by
  // MatchedBlocks.
  const int32_t block_size = BlockSize(url);
  if (block_size < 1) return std::nullopt;
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
      block_size;
  const std::vector<uint64_t> chain = KvBlockHashChain(tokens, block_size, limit);
  std::optional<int64_t> blocks = MatchedBlocks(url, block_size, chain);
  if (!blocks.has_value()) return std::nullopt;
  return *blocks * block_size;
}

void KvEventIndex::AddPending(const std::string& url, int32_t block_size,
                              std::span<const uint64_t> chain) {
  const MonoClock::time_point expiry = clock_.Now() + pending_ttl_;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  if (it == workers_.end() || !it->second.synced || it->second.block_size != block_size) return;
  Worker& w = it->second;
  for (uint64_t hash : chain) {
    if (w.blocks.contains(hash)) continue;
    if (w.pending.size() >= max_blocks_ && !w.pending.contains(hash)) break;
    w.pending[hash] = expiry;
  }
}

std::vector<KvEventIndex::WorkerView> KvEventIndex::Describe() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerView> out;
  out.reserve(workers_.size());
  for (const auto& [url, w] : workers_) {
    out.push_back(WorkerView{url, w.synced, w.incarnation, w.block_size, w.seq, w.blocks.size(),
                             w.pending.size(), w.snapshots, w.resyncs});
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerView& a, const WorkerView& b) { return a.url < b.url; });
  return out;
}

}  // namespace tandem::router

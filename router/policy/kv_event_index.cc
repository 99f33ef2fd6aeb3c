#include "router/policy/kv_event_index.h"

#include <algorithm>

#include "common/kv_block_hash.h"

namespace tandem::router {

KvEventIndex::KvEventIndex(size_t max_blocks_per_worker)
    : max_blocks_(std::max<size_t>(max_blocks_per_worker, 1)) {}

void KvEventIndex::Unsync(Worker& w) {
  if (w.synced) ++w.resyncs;
  w.synced = false;
  w.blocks.clear();
  w.seq = 0;
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
      if (w.blocks.size() > max_blocks_) {
        Unsync(w);
        return Apply::kNeedSnapshot;
      }
    } else {
      w.blocks.erase(e.block_hash);
    }
    w.seq = e.seq;
  }
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

std::optional<int64_t> KvEventIndex::PredictCachedTokens(const std::string& url,
                                                         std::span<const int32_t> tokens,
                                                         int64_t max_tokens) const {
  int32_t block_size = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(url);
    if (it == workers_.end() || !it->second.synced) return std::nullopt;
    block_size = it->second.block_size;
  }
  // Hash outside the lock (one SHA-256 per block); a block-size change in between is seen below.
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
      block_size;
  const std::vector<uint64_t> chain = KvBlockHashChain(tokens, block_size, limit);
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  if (it == workers_.end() || !it->second.synced || it->second.block_size != block_size) {
    return std::nullopt;
  }
  int64_t matched = 0;
  while (matched < static_cast<int64_t>(chain.size()) &&
         it->second.blocks.contains(chain[static_cast<size_t>(matched)])) {
    ++matched;
  }
  return matched * block_size;
}

std::vector<KvEventIndex::WorkerView> KvEventIndex::Describe() const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerView> out;
  out.reserve(workers_.size());
  for (const auto& [url, w] : workers_) {
    out.push_back(WorkerView{url, w.synced, w.incarnation, w.block_size, w.seq, w.blocks.size(),
                             w.snapshots, w.resyncs});
  }
  std::sort(out.begin(), out.end(),
            [](const WorkerView& a, const WorkerView& b) { return a.url < b.url; });
  return out;
}

}  // namespace tandem::router

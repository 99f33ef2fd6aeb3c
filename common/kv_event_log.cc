#include "common/kv_event_log.h"

#include <algorithm>

#include "common/check.h"
#include "spdlog/spdlog.h"

namespace tandem {

KvEventLog::KvEventLog(uint64_t incarnation, int32_t block_size, size_t capacity)
    : incarnation_(incarnation), block_size_(block_size), capacity_(capacity) {
  TANDEM_CHECK(block_size >= 1 && capacity >= 1, "KvEventLog needs block_size and capacity >= 1");
}

void KvEventLog::Stored(std::span<const uint64_t> block_hashes) {
  absl::MutexLock lock(&mu_);
  for (uint64_t h : block_hashes) {
    if (!stored_.insert(h).second) {
      spdlog::error("kv events: block {:016x} stored twice", h);
      continue;
    }
    Append(KvBlockEvent::Kind::kStored, h);
  }
}

void KvEventLog::Removed(std::span<const uint64_t> block_hashes) {
  absl::MutexLock lock(&mu_);
  for (uint64_t h : block_hashes) {
    if (stored_.erase(h) == 0) {
      spdlog::error("kv events: block {:016x} removed but not stored", h);
      continue;
    }
    Append(KvBlockEvent::Kind::kRemoved, h);
  }
}

void KvEventLog::Append(KvBlockEvent::Kind kind, uint64_t hash) {
  events_.push_back(KvBlockEvent{++last_seq_, kind, hash});
  if (events_.size() > capacity_) {
    events_.pop_front();
    ++dropped_;
  }
}

KvEventBatch KvEventLog::EventsSince(uint64_t after_seq, size_t max_events) const {
  absl::MutexLock lock(&mu_);
  KvEventBatch batch;
  batch.incarnation = incarnation_;
  batch.block_size = block_size_;
  batch.last_seq = last_seq_;
  const uint64_t oldest = events_.empty() ? last_seq_ + 1 : events_.front().seq;
  if (after_seq > last_seq_ || after_seq + 1 < oldest) {
    batch.gap = true;
    return batch;
  }
  const size_t first = static_cast<size_t>(after_seq + 1 - oldest);
  const size_t n = std::min(events_.size() - first, std::max<size_t>(max_events, 1));
  batch.events.assign(events_.begin() + static_cast<ptrdiff_t>(first),
                      events_.begin() + static_cast<ptrdiff_t>(first + n));
  return batch;
}

KvSnapshot KvEventLog::Snapshot() const {
  absl::MutexLock lock(&mu_);
  KvSnapshot s;
  s.incarnation = incarnation_;
  s.block_size = block_size_;
  s.seq = last_seq_;
  s.block_hashes.assign(stored_.begin(), stored_.end());
  return s;
}

uint64_t KvEventLog::last_seq() const {
  absl::MutexLock lock(&mu_);
  return last_seq_;
}

size_t KvEventLog::stored_blocks() const {
  absl::MutexLock lock(&mu_);
  return stored_.size();
}

uint64_t KvEventLog::dropped_events() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace tandem

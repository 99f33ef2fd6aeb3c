#include "kvtransfer/tcp/handshake_pool.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::kv {

HandshakePool::HandshakePool(size_t max_total, size_t max_per_source, MonoClock::duration timeout)
    : max_total_(std::max<size_t>(1, max_total)),
      max_per_source_(std::max<size_t>(1, max_per_source)),
      timeout_(timeout) {}

absl::StatusOr<PendingHandshake*> HandshakePool::Admit(const std::string& rid,
                                                       const std::string& source,
                                                       MonoClock::time_point now) {
  Expire(now);
  // A connection that starts over gives up its own slot first, so repeating a Hello never takes
  // more than one.
  if (auto it = by_rid_.find(rid); it != by_rid_.end()) Erase(it);
  if (by_rid_.size() >= max_total_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(by_rid_.size(), " handshakes in progress (the limit)"));
  }
  // Without an address every connection shares the total cap only.
  if (!source.empty() && from_source(source) >= max_per_source_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(max_per_source_, " handshakes in progress from this address (the limit)"));
  }
  PendingHandshake& entry = by_rid_[rid];
  entry.source = source;
  entry.expires = now + timeout_;
  by_expiry_.emplace(entry.expires, rid);
  if (!source.empty()) per_source_[source]++;
  return &entry;
}

std::optional<PendingHandshake> HandshakePool::Take(const std::string& rid,
                                                    MonoClock::time_point now) {
  auto it = by_rid_.find(rid);
  if (it == by_rid_.end()) return std::nullopt;
  if (it->second.expires <= now) {
    Erase(it);
    return std::nullopt;
  }
  // Unindexed first: Erase reads the entry's source, which the move would empty.
  auto node = by_rid_.extract(it);
  Unindex(node.key(), node.mapped());
  return std::move(node.mapped());
}

size_t HandshakePool::Expire(MonoClock::time_point now) {
  size_t n = 0;
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    auto it = by_rid_.find(by_expiry_.begin()->second);
    if (it == by_rid_.end()) {  // cannot happen: Erase keeps both indexes in step
      by_expiry_.erase(by_expiry_.begin());
      continue;
    }
    Erase(it);
    ++n;
  }
  return n;
}

size_t HandshakePool::from_source(const std::string& source) const {
  auto it = per_source_.find(source);
  return it == per_source_.end() ? 0 : it->second;
}

void HandshakePool::Unindex(const std::string& rid, const PendingHandshake& entry) {
  by_expiry_.erase({entry.expires, rid});
  if (!entry.source.empty()) {
    auto s = per_source_.find(entry.source);
    if (s != per_source_.end() && --s->second == 0) per_source_.erase(s);
  }
}

void HandshakePool::Erase(Map::iterator it) {
  Unindex(it->first, it->second);
  by_rid_.erase(it);
}

}  // namespace tandem::kv

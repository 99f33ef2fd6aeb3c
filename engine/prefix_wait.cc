#include "engine/prefix_wait.h"

#include <algorithm>

namespace tandem::engine {

void PrefixWait::AddRunning(std::span<const int32_t> prompt, int64_t cached_tokens) {
  if (radix_ == nullptr) return;
  const int64_t bs = radix_->block_size();
  if (cached_tokens < static_cast<int64_t>(prompt.size()) / bs * bs) prefills_.push_back(prompt);
}

bool PrefixWait::Holds(std::span<const int32_t> tokens, int64_t max_tokens) const {
  if (radix_ == nullptr || prefills_.empty()) return false;
  const int64_t bs = radix_->block_size();
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(tokens.size()), std::max<int64_t>(max_tokens, 0)) /
      bs * bs;
  int64_t shared = 0;  // full blocks shared with the prefill sharing most, in tokens
  for (std::span<const int32_t> prompt : prefills_) {
    const int64_t n = std::min<int64_t>(limit, static_cast<int64_t>(prompt.size()) / bs * bs);
    if (n <= shared) continue;
    const auto diff = std::mismatch(tokens.begin(), tokens.begin() + n, prompt.begin()).first;
    shared = std::max<int64_t>(shared, (diff - tokens.begin()) / bs * bs);
  }
  return shared > 0 && radix_->PeekMatch(tokens, shared) < shared / bs;
}

}  // namespace tandem::engine

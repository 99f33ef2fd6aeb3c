// PrefixWait: admission's rule that a waiting prompt whose leading blocks another request is
// computing right now waits for them instead of computing them again.
//
// A prompt's blocks enter the radix cache only after the step that computed them, chunk by chunk.
// Requests sharing a long prefix that arrive together would otherwise all be admitted while the
// first computes it, and each compute it again. One PrefixWait serves one admission round: it is
// given every running request, of which those whose prompt's full blocks are not all cached yet
// are the prefills, and Holds() says whether a waiting prompt shares more full blocks with one of
// them than the radix cache can give it now; admission then passes that request over (later ones,
// unrelated, may go first). It is admitted once the prefill's blocks are cached, and reuses them.
// Only running prefills hold anyone, and a running prefill completes, or is aborted or preempted
// (then it holds nobody), so every wait is bounded.
//
// Cost: Holds compares the waiting prompt with each prefill token by token up to their first
// difference, and peeks the cache (no references taken) only when some prefill shares a block.
//
// Thread-compatible. Borrows the cache and the prompts given to AddRunning: they must outlive the
// PrefixWait and not change while it is used.
#ifndef TANDEM_ENGINE_PREFIX_WAIT_H_
#define TANDEM_ENGINE_PREFIX_WAIT_H_

#include <cstdint>
#include <span>
#include <vector>

#include "engine/radix_cache.h"

namespace tandem::engine {

class PrefixWait {
 public:
  // `radix` null (no prefix cache): nothing can be reused, so Holds is always false.
  explicit PrefixWait(const RadixCache* radix) : radix_(radix) {}

  // A running request with `prompt`, the first `cached_tokens` of which it has offered to the
  // cache. It is a prefill, and may hold others, while its prompt's full blocks are not all
  // offered yet.
  void AddRunning(std::span<const int32_t> prompt, int64_t cached_tokens);

  // Whether a waiting request with known tokens `tokens`, which may take at most `max_tokens`
  // of them from the cache, should wait: some prefill shares more full blocks with it (within
  // `max_tokens`) than the cache matches now.
  bool Holds(std::span<const int32_t> tokens, int64_t max_tokens) const;

 private:
  const RadixCache* radix_;
  std::vector<std::span<const int32_t>> prefills_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_PREFIX_WAIT_H_

// radix_cache_bench: the radix prefix cache under a scheduler-like load, beside the unavoidable
// cost of reading and hashing the same prompt tokens once, measured in the same run.
//
//   radix_cache_bench [requests]   (default 20000; bounded to a few seconds)
//
// Pool: 262,144 blocks of 16 tokens. Each request is one of 64 shared 1,024-token system prompts
// plus a unique 512-token tail: MatchAndRef(prompt, len - 1), allocate the rest (evicting LRU
// blocks when the pool is full), Insert, Release. Baseline: absl::Hash over each 16-token block of
// the same prompts (what any lookup keyed by block contents must at least do). Then Evict of
// 100,000 blocks, and evictable_blocks() beside a scan of every block's reference count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/types/span.h"
#include "engine/kv_cache.h"
#include "engine/radix_cache.h"

namespace {

using tandem::engine::BlockPool;
using tandem::engine::BlockTable;
using tandem::engine::RadixCache;
using Clock = std::chrono::steady_clock;

constexpr int32_t kBlocks = 262144, kBs = 16, kSystemPrompts = 64;
constexpr int32_t kSystemTokens = 1024, kTailTokens = 512;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::vector<int32_t> Prompt(int i) {
  std::vector<int32_t> t(kSystemTokens + kTailTokens);
  std::iota(t.begin(), t.begin() + kSystemTokens, (i % kSystemPrompts) * 100000);
  std::iota(t.begin() + kSystemTokens, t.end(), 10000000 + i * kTailTokens);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (requests <= 0) {
    std::fprintf(stderr, "usage: radix_cache_bench [requests > 0]\n");
    return 2;
  }
  BlockPool pool(kBlocks, kBs);
  RadixCache cache(&pool);
  // Prompts are built outside the timed loops so both loops read the same memory.
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(static_cast<size_t>(requests));
  for (int i = 0; i < requests; ++i) prompts.push_back(Prompt(i));

  uint64_t sink = 0;
  const auto h0 = Clock::now();
  for (const auto& p : prompts) {
    for (size_t off = 0; off + kBs <= p.size(); off += kBs) {
      sink += absl::Hash<absl::Span<const int32_t>>()(absl::MakeConstSpan(p.data() + off, kBs));
    }
  }
  const auto h1 = Clock::now();

  int64_t hit_blocks = 0, evicted = 0;
  const auto t0 = Clock::now();
  for (const auto& p : prompts) {
    RadixCache::Match m = cache.MatchAndRef(p, static_cast<int64_t>(p.size()) - 1);
    hit_blocks += static_cast<int64_t>(m.block_ids.size());
    BlockTable t{m.block_ids, m.num_tokens};
    const int64_t rest = static_cast<int64_t>(p.size()) - m.num_tokens;
    const int64_t need = pool.BlocksFor(static_cast<int64_t>(p.size())) -
                         static_cast<int64_t>(t.block_ids.size()) - pool.num_free();
    if (need > 0) evicted += cache.Evict(need);
    auto plan = pool.PlanAppend({{&t, rest}});
    if (!plan.ok() || !pool.Commit(*plan).ok()) {
      std::fprintf(stderr, "allocation failed: %s\n", plan.status().ToString().c_str());
      return 1;
    }
    cache.Insert(p, t.block_ids);
    if (!pool.Release(&t).ok()) return 1;
  }
  const auto t1 = Clock::now();

  const double ours = Seconds(t0, t1), hash = Seconds(h0, h1);
  const double per_req_us = ours / requests * 1e6, hash_us = hash / requests * 1e6;
  std::printf("requests %d, prompt %d tokens (%d blocks), pool %d blocks of %d\n", requests,
              kSystemTokens + kTailTokens, (kSystemTokens + kTailTokens) / kBs, kBlocks, kBs);
  std::printf("hit blocks %ld, evicted on demand %ld, cached at end %ld\n",
              static_cast<long>(hit_blocks), static_cast<long>(evicted),
              static_cast<long>(cache.cached_blocks()));
  std::printf("%-44s %10.2f us/request\n", "baseline: hash every prompt block once", hash_us);
  std::printf("%-44s %10.2f us/request   ratio %.2fx\n", "match + allocate + insert + release",
              per_req_us, per_req_us / hash_us);

  const int64_t to_evict = std::min<int64_t>(100000, cache.evictable_blocks());
  const auto e0 = Clock::now();
  const int64_t freed = cache.Evict(to_evict);
  const auto e1 = Clock::now();
  std::printf("%-44s %10.1f ns/block (%ld blocks)\n", "Evict, LRU leaves first",
              Seconds(e0, e1) / static_cast<double>(freed) * 1e9, static_cast<long>(freed));

  constexpr int kCalls = 1000;
  int64_t scanned = 0, counted = 0;
  const auto s0 = Clock::now();
  for (int c = 0; c < kCalls; ++c) {
    for (int32_t b = 0; b < pool.num_blocks(); ++b) scanned += pool.ref_count(b) == 1 ? 1 : 0;
  }
  const auto s1 = Clock::now();
  for (int c = 0; c < kCalls; ++c) {
    counted += cache.evictable_blocks();
    sink += static_cast<uint64_t>(counted);
  }
  const auto s2 = Clock::now();
  const double scan_ns = Seconds(s0, s1) / kCalls * 1e9, ours_ns = Seconds(s1, s2) / kCalls * 1e9;
  std::printf("%-44s %10.1f ns/call\n", "baseline: scan every block's ref count", scan_ns);
  std::printf("%-44s %10.1f ns/call   (the scan costs %.0fx more)\n", "evictable_blocks()", ours_ns,
              scan_ns / std::max(ours_ns, 1e-3));
  std::printf("(checksum %lu %ld)\n", static_cast<unsigned long>(sink), static_cast<long>(scanned));
  return 0;
}

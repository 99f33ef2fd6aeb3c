// Scheduler: KV blocks, prompt sharing and admission (scheduler.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/scheduler.h"
#include "engine/scheduler_internal.h"

namespace tandem::engine {

using scheduler_internal::CheckBookkeeping;

bool Scheduler::EnsureFree(int64_t blocks) {
  if (pool_->num_free() >= blocks) return true;
  if (radix_) radix_->Evict(blocks - pool_->num_free());
  return pool_->num_free() >= blocks;
}

Scheduler::Sequence* Scheduler::FindLeader(const Sequence& sibling) {
  auto it = seqs_.find(sibling.req.share_prompt_with);
  if (it == seqs_.end() || it->second.get() == &sibling) return nullptr;
  Sequence* leader = it->second.get();
  if (leader->req.mode == RequestMode::kPrefillOnly ||
      leader->req.input_ids != sibling.req.input_ids) {
    return nullptr;
  }
  return leader;
}

int64_t Scheduler::SharableBlocks(const Sequence& sibling) const {
  if (sibling.req.mode != RequestMode::kGenerate || sibling.generated() > 0) return 0;
  // next_scored() <= prompt_len - 1: the last prompt token is always computed for its logits.
  return sibling.next_scored() / pool_->block_size();
}

void Scheduler::TakeSharedPrefix(Sequence* sibling, const Sequence& leader) {
  const int64_t k = SharableBlocks(*sibling);
  if (k > leader.prompt_len / pool_->block_size() ||
      k > static_cast<int64_t>(leader.table.block_ids.size())) {
    CheckBookkeeping(absl::InternalError(absl::StrCat("leader '", leader.req.rid, "' has ",
                                                      leader.table.block_ids.size(),
                                                      " blocks, a sibling asks for ", k)),
                     "prompt sharing");
  }
  std::vector<int32_t> blocks(leader.table.block_ids.begin(),
                              leader.table.block_ids.begin() + static_cast<std::ptrdiff_t>(k));
  CheckBookkeeping(pool_->AddRef(blocks), "prompt sharing");
  sibling->shared_blocks = std::move(blocks);
  sibling->share_pending = false;
}

void Scheduler::OfferPrompt(const Sequence& leader) {
  for (Sequence* seq : waiting_) {
    if (seq->share_pending && seq->req.share_prompt_with == leader.req.rid) {
      TakeSharedPrefix(seq, leader);
    }
  }
}

void Scheduler::DropSharedPrefix(Sequence* seq) {
  if (seq->shared_blocks.empty()) return;
  CheckBookkeeping(pool_->ReleaseBlocks(seq->shared_blocks), "prompt sharing release");
  seq->shared_blocks.clear();
}

bool Scheduler::DropWaitingShares() {
  bool dropped = false;
  for (Sequence* seq : waiting_) {
    dropped |= !seq->shared_blocks.empty();
    DropSharedPrefix(seq);
  }
  return dropped;
}

Scheduler::Sequence* Scheduler::AdmissionHead() const {
  for (Sequence* seq : waiting_) {
    if (!seq->share_pending) return seq;
  }
  return nullptr;
}

bool Scheduler::TryAdmit(Sequence* seq, int64_t reserve_blocks) {
  const int64_t known = static_cast<int64_t>(seq->tokens.size());
  int64_t matched = 0;
  const bool shared = !seq->shared_blocks.empty();
  if (shared) {
    // The leader's full prompt blocks serve as the matched prefix, like a radix hit.
    seq->table.block_ids = std::move(seq->shared_blocks);
    seq->shared_blocks.clear();
    seq->table.num_tokens = static_cast<int64_t>(seq->table.block_ids.size()) * pool_->block_size();
    matched = seq->table.num_tokens;
  } else if (radix_ && seq->req.mode != RequestMode::kDecodeOnly) {
    // Positions still to be scored need their logits: the cache serves only what is before them.
    RadixCache::Match m = radix_->MatchAndRef(seq->tokens, seq->match_limit());
    seq->table.block_ids = std::move(m.block_ids);
    seq->table.num_tokens = m.num_tokens;
    matched = m.num_tokens;
  }
  const int64_t needed =
      pool_->BlocksFor(known) - static_cast<int64_t>(seq->table.block_ids.size());
  const int64_t available = pool_->num_free() + (radix_ ? radix_->evictable_blocks() : 0);
  if (needed + reserve_blocks > available || !EnsureFree(needed)) {
    if (shared) {
      seq->shared_blocks = std::move(seq->table.block_ids);  // kept for the next attempt
    } else if (!seq->table.block_ids.empty()) {
      CheckBookkeeping(pool_->Release(&seq->table), "admission rollback");
    }
    seq->table = BlockTable();
    return false;
  }
  auto plan = pool_->PlanAppend({{&seq->table, known - seq->table.num_tokens}});
  CheckBookkeeping(plan.status(), "admission plan");
  CheckBookkeeping(pool_->Commit(*plan), "admission commit");
  seq->num_computed = matched;
  seq->kv_reported = 0;
  seq->cached_upto = matched;
  if (!seq->admitted_once) {
    seq->admitted_once = true;
    seq->admitted = Clock::now();
    seq->cached_tokens = std::min(matched, seq->prompt_len);
    counters_.prompt_tokens += seq->prompt_len;
    counters_.cached_prompt_tokens += seq->cached_tokens;
  }
  return true;
}

void Scheduler::ReleaseBlocks(Sequence* seq) {
  if (!seq->table.block_ids.empty()) {
    CheckBookkeeping(pool_->Release(&seq->table), "release");
  }
  seq->table = BlockTable();
  seq->num_computed = 0;
  seq->kv_reported = 0;
  seq->cached_upto = 0;
  DropSharedPrefix(seq);
}

void Scheduler::Preempt(Sequence* seq) {
  running_.remove(seq);
  ReleaseBlocks(seq);
  seq->state = State::kWaiting;
  waiting_.push_front(seq);
  ++counters_.preemptions;
}

void Scheduler::CacheComputed(Sequence* seq) {
  if (!radix_ || seq->req.mode == RequestMode::kDecodeOnly) return;
  const int64_t bs = pool_->block_size();
  const int64_t full = seq->num_computed / bs;
  if (full * bs <= seq->cached_upto) return;
  radix_->Insert(std::span<const int32_t>(seq->tokens.data(), static_cast<size_t>(full * bs)),
                 std::span<const int32_t>(seq->table.block_ids.data(), static_cast<size_t>(full)));
  seq->cached_upto = full * bs;
}

}  // namespace tandem::engine

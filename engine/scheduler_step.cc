// Scheduler: one batch (Step) and what it leaves to do (HasWork) (scheduler.h).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/prefix_wait.h"
#include "engine/scheduler.h"
#include "engine/scheduler_internal.h"

namespace tandem::engine {

using scheduler_internal::CheckBookkeeping;

bool Scheduler::HasWork() const {
  if (!running_.empty()) return true;
  if (waiting_.empty()) return false;
  int awaiting = 0;
  for (const auto& [rid, s] : seqs_) awaiting += s->state == State::kAwaitingKv;
  if (awaiting >= config_.max_running_requests) return false;
  // Something waits and nothing runs: admission can only succeed if blocks can be found, and
  // with nothing running every non-held block is free or evictable. Held and awaiting requests
  // change through calls that the caller makes anyway, and so does the prompt KV that pending
  // siblings wait for.
  const Sequence* front = AdmissionHead();
  if (front == nullptr) return false;
  const int64_t available = pool_->num_free() + (radix_ ? radix_->evictable_blocks() : 0);
  const int64_t needed = pool_->BlocksFor(static_cast<int64_t>(front->tokens.size())) -
                         static_cast<int64_t>(front->shared_blocks.size());
  if (needed <= available) return true;
  // A step that cannot admit the head makes waiting siblings give up the blocks they hold.
  for (const Sequence* seq : waiting_) {
    if (!seq->shared_blocks.empty()) return true;
  }
  return false;
}

// The batch a step computes: each sequence with the number of its tokens computed this step, and
// what is left of the step's budgets.
struct Scheduler::StepPlan {
  struct Item {
    Sequence* seq;
    int64_t n;
  };
  std::vector<Item> items;
  int64_t prefill_budget;                        // --max-prefill-tokens (decode is not charged)
  int64_t score_budget = kMaxScoredRowsPerStep;  // prompt positions scored this step

  explicit StepPlan(int64_t max_prefill_tokens) : prefill_budget(max_prefill_tokens) {}

  // The tokens `seq` computes this step when `remaining` are left (0: none this step); charges
  // the budgets. A sequence with more than one token left is prefilling: a chunk of at most
  // `chunk` tokens within the prefill budget. A scored position must be computed in a step that
  // returns its logits: a chunk of a sequence being scored ends where the score rows run out.
  int64_t Take(const Sequence& seq, int64_t remaining, int64_t chunk) {
    if (remaining <= 1) return remaining;
    int64_t n = std::min({remaining, chunk, prefill_budget});
    const int64_t from = seq.next_scored();
    const int64_t rows = std::min(seq.num_computed + n, seq.prompt_len - 1) - from;
    if (rows > 0) {
      if (rows > score_budget) n = from - seq.num_computed + score_budget;
      score_budget -= std::min(rows, score_budget);
    }
    if (n > 0) prefill_budget -= n;
    return n;
  }
};

absl::StatusOr<StepStats> Scheduler::Step() {
  StepStats st;
  GrowRunning(&st);
  StepPlan plan(config_.max_prefill_tokens);
  for (Sequence* seq : running_) {
    // Running sequences first; one with nothing left waits for its KV or its end.
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    if (remaining <= 0) continue;
    const int64_t n = plan.Take(*seq, remaining, config_.chunked_prefill_size);
    if (n > 0) plan.items.push_back({seq, n});
  }
  AdmitWaiting(&plan, &st);
  if (plan.items.empty()) return st;

  std::vector<SequenceInput> batch = BatchInputs(plan, &st);
  // Prefill-only sequences report each layer's K/V as the layer completes (disaggregation).
  std::vector<StepPlan::Item> reporting;
  for (const StepPlan::Item& it : plan.items) {
    if (it.seq->req.mode == RequestMode::kPrefillOnly && it.seq->req.callbacks.on_kv_layer) {
      reporting.push_back(it);
    }
  }
  LayerKvCallback on_layer;
  if (!reporting.empty()) {
    on_layer = [&reporting](int64_t layer) {
      for (const StepPlan::Item& it : reporting) {
        Sequence* seq = it.seq;
        seq->req.callbacks.on_kv_layer({seq->req.rid, layer, seq->table.block_ids, seq->kv_reported,
                                        seq->num_computed + it.n});
      }
    };
  }
  absl::StatusOr<std::span<const float>> logits = model_->Forward(batch, storage_.get(), on_layer);
  if (!logits.ok()) {
    // Validation makes this unreachable for well-formed requests; fail the batch, not the worker.
    const std::string message =
        absl::StrCat("internal error in the forward pass: ", logits.status().message());
    for (const StepPlan::Item& it : plan.items) (void)Abort(it.seq->req.rid, message);
    return logits.status();
  }

  const int64_t vocab = model_->config().vocab_size;
  int64_t row = 0;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const StepPlan::Item& it = plan.items[i];
    const int64_t rows = batch[i].score_end - batch[i].score_begin + (batch[i].want_logits ? 1 : 0);
    CompleteStepItem(
        it.seq, it.n, batch[i],
        logits->subspan(static_cast<size_t>(row * vocab), static_cast<size_t>(rows * vocab)), &st);
    row += rows;
  }
  return st;
}

void Scheduler::GrowRunning(StepStats* st) {
  // A sequence about to compute past its table gets its next block; when blocks run out, cached
  // blocks are evicted, then the youngest running sequences preempted.
  for (;;) {
    std::vector<BlockPool::AppendRequest> growth;
    int64_t needed = 0;
    for (Sequence* seq : running_) {
      const int64_t target = std::min<int64_t>(static_cast<int64_t>(seq->tokens.size()),
                                               seq->num_computed + config_.chunked_prefill_size);
      if (target > seq->table.num_tokens) {
        growth.push_back({&seq->table, target - seq->table.num_tokens});
        needed += pool_->BlocksFor(target) - static_cast<int64_t>(seq->table.block_ids.size());
      }
    }
    if (growth.empty()) return;
    if (EnsureFree(needed)) {
      auto plan = pool_->PlanAppend(growth);
      CheckBookkeeping(plan.status(), "growth plan");
      CheckBookkeeping(pool_->Commit(*plan), "growth commit");
      return;
    }
    Preempt(running_.back());
    ++st->preempted;
  }
}

void Scheduler::AdmitWaiting(StepPlan* plan, StepStats* st) {
  int awaiting = 0;
  for (const auto& [rid, s] : seqs_) awaiting += s->state == State::kAwaitingKv;
  // A sibling waiting for its leader's prompt KV, or a prompt waiting for a running prefill of
  // its leading blocks (engine/prefix_wait.h), is passed over, not waited for.
  PrefixWait prefix_wait(radix_.get());
  auto note_running = [&prefix_wait](const Sequence* seq) {
    if (seq->req.mode == RequestMode::kDecodeOnly) return;  // its cache is filled from outside
    prefix_wait.AddRunning(seq->req.input_ids, seq->cached_upto);
  };
  for (const Sequence* seq : running_) note_running(seq);
  bool shares_dropped = false;
  for (auto w = waiting_.begin();
       w != waiting_.end() &&
       static_cast<int>(running_.size()) + awaiting < config_.max_running_requests;) {
    Sequence* seq = *w;
    if (seq->share_pending ||
        (seq->req.mode != RequestMode::kDecodeOnly && seq->shared_blocks.empty() &&
         prefix_wait.Holds(seq->tokens, seq->match_limit()))) {
      ++w;
      continue;
    }
    const bool decode_only = seq->req.mode == RequestMode::kDecodeOnly && seq->generated() == 0;
    if (!decode_only && plan->prefill_budget <= 0) break;
    if (!TryAdmit(seq, static_cast<int64_t>(running_.size()))) {
      // Nothing runs, so nothing will free blocks by itself: blocks held for waiting siblings
      // must not keep the head out (they compute their prompts themselves instead).
      if (running_.empty() && !shares_dropped && DropWaitingShares()) {
        shares_dropped = true;
        continue;
      }
      break;
    }
    w = waiting_.erase(w);
    ++st->admitted;
    if (decode_only) {
      seq->state = State::kAwaitingKv;
      ++awaiting;
      if (seq->req.callbacks.on_reserved) seq->req.callbacks.on_reserved(seq->table.block_ids);
      continue;
    }
    seq->state = State::kRunning;
    running_.push_back(seq);
    note_running(seq);
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    const int64_t n = plan->Take(*seq, remaining, config_.chunked_prefill_size);
    // n == 0: admitted; it computes once a step has score rows left.
    if (n > 0) plan->items.push_back({seq, n});
  }
}

std::vector<SequenceInput> Scheduler::BatchInputs(const StepPlan& plan, StepStats* st) const {
  std::vector<SequenceInput> batch;
  batch.reserve(plan.items.size());
  for (const StepPlan::Item& it : plan.items) {
    const Sequence* seq = it.seq;
    const bool last = seq->num_computed + it.n == static_cast<int64_t>(seq->tokens.size());
    SequenceInput in{
        std::span<const int32_t>(seq->tokens.data() + seq->num_computed, static_cast<size_t>(it.n)),
        seq->num_computed, seq->table.block_ids, last};
    // Prompt positions of this chunk whose logits score the next prompt token.
    const int64_t lo = std::max(seq->num_computed, seq->next_scored());
    const int64_t hi = std::min(seq->num_computed + it.n, seq->prompt_len - 1);
    if (hi > lo) {
      in.score_begin = lo - seq->num_computed;
      in.score_end = hi - seq->num_computed;
    }
    batch.push_back(in);
    if (it.n > 1) {
      st->prefill_tokens += it.n;
    } else {
      st->decode_tokens += 1;
    }
  }
  st->num_sequences = static_cast<int>(plan.items.size());
  return batch;
}

void Scheduler::CompleteStepItem(Sequence* seq, int64_t n, const SequenceInput& in,
                                 std::span<const float> logits, StepStats* st) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  size_t row = 0;
  for (int64_t k = in.score_begin; k < in.score_end; ++k, ++row) {
    const int64_t pos = seq->num_computed + k;
    SampleResult scored =
        ScoreToken(logits.subspan(row * vocab, vocab), seq->tokens[static_cast<size_t>(pos + 1)],
                   seq->req.sampling.top_logprobs_num);
    seq->input_logprobs.push_back(scored.logprob);
    if (seq->req.sampling.top_logprobs_num > 0) seq->input_top.push_back(std::move(scored.top));
  }
  seq->num_computed += n;
  seq->kv_reported = seq->num_computed;
  if (seq->num_computed < static_cast<int64_t>(seq->tokens.size())) {
    CacheComputed(seq);  // a prompt chunk: its full blocks can serve others already
    return;
  }
  std::span<const float> r = logits.subspan(row * vocab, vocab);
  if (seq->generated() == 0) {
    CacheComputed(seq);
    OfferPrompt(*seq);  // its prompt KV is complete; before a Finish below can drop it
  }
  RequestOutput out;
  if (seq->generated() == 0) AttachInputLogprobs(seq, &out);
  if (seq->req.sampling.max_new_tokens == 0) {
    ++st->finished;
    Finish(seq, FinishReason::Length(0), std::move(out));
    return;
  }
  absl::StatusOr<SampleResult> next = seq->sampler->Sample(r);
  if (!next.ok()) {
    ++st->finished;
    out.text = seq->output->Flush();
    Finish(seq, FinishReason::Abort(absl::StrCat("sampling failed: ", next.status().message())),
           std::move(out));
    return;
  }
  AcceptToken(seq, *next, &out);
  if (!out.finish && seq->generated() >= seq->req.sampling.max_new_tokens) {
    out.finish = FinishReason::Length(seq->generated());
    out.text += seq->output->Flush();
  }
  if (seq->req.mode == RequestMode::kPrefillOnly) {
    // The first token ends this worker's part; the KV stays until ReleaseHeld.
    running_.remove(seq);
    seq->state = State::kHeld;
    out.last = true;
    out.kv_held = true;
    Emit(seq, std::move(out));
    return;
  }
  if (out.finish) {
    ++st->finished;
    FinishReason reason = std::move(*out.finish);
    Finish(seq, std::move(reason), std::move(out));
  } else {
    Emit(seq, std::move(out));
  }
}

}  // namespace tandem::engine

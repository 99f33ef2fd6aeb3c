#include "engine/scheduler.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/scheduler_internal.h"

namespace tandem::engine {
namespace {

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config,
                                                             Model* model,
                                                             const Tokenizer* tokenizer) {
  if (model == nullptr || tokenizer == nullptr) {
    return absl::InvalidArgumentError("scheduler needs a model and a tokenizer");
  }
  SchedulerConfig c = config;
  const int64_t max_pos = model->config().max_position_embeddings;
  if (c.context_length <= 0) c.context_length = max_pos;
  if (c.context_length > max_pos) {
    return absl::InvalidArgumentError(absl::StrCat("--context-length ", c.context_length,
                                                   " exceeds the model's max_position_embeddings ",
                                                   max_pos));
  }
  if (c.num_blocks < 1 || c.num_blocks > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the KV cache must hold between 1 and 2^30 blocks, got ", c.num_blocks));
  }
  if (c.block_size < 1 || c.block_size > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--page-size must be in [1, 1024], got ", c.block_size));
  }
  if (c.max_running_requests < 1 || c.chunked_prefill_size < 1 || c.max_prefill_tokens < 1 ||
      c.max_queued_requests < 0) {
    return absl::InvalidArgumentError(
        "--max-running-requests, --chunked-prefill-size and --max-prefill-tokens must be >= 1");
  }
  auto storage = model->CreateKvCache(c.num_blocks, c.block_size);
  if (!storage.ok()) return storage.status();
  auto pool = std::make_unique<BlockPool>(static_cast<int32_t>(c.num_blocks), c.block_size);
  return std::unique_ptr<Scheduler>(
      new Scheduler(c, model, tokenizer, std::move(pool), std::move(*storage)));
}

Scheduler::Scheduler(const SchedulerConfig& config, Model* model, const Tokenizer* tokenizer,
                     std::unique_ptr<BlockPool> pool, std::unique_ptr<KvCacheStorage> storage)
    : config_(config),
      model_(model),
      tokenizer_(tokenizer),
      pool_(std::move(pool)),
      storage_(std::move(storage)) {
  eos_ids_ = model_->config().eos_token_ids;
  for (int32_t id : tokenizer_->eos_token_ids()) {
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end()) eos_ids_.push_back(id);
  }
  if (config_.enable_radix_cache) {
    radix_ = std::make_unique<RadixCache>(pool_.get());
    if (config_.kv_events_buffer > 0) {
      // The incarnation tells readers that a restarted worker's cache starts empty.
      std::random_device rd;
      const uint64_t incarnation = (uint64_t{rd()} << 32) ^ rd();
      kv_events_ =
          std::make_unique<KvEventLog>(incarnation, pool_->block_size(), config_.kv_events_buffer);
      radix_->SetEventLog(kv_events_.get());
    }
  }
}

Scheduler::~Scheduler() {
  for (auto& [rid, seq] : seqs_) {
    if (!seq->table.block_ids.empty()) (void)pool_->Release(&seq->table);
    if (!seq->shared_blocks.empty()) (void)pool_->ReleaseBlocks(seq->shared_blocks);
  }
  radix_.reset();  // drops the cache's references before the pool goes
}

absl::Status Scheduler::Validate(const Request& request) const {
  if (request.rid.empty()) return absl::InvalidArgumentError("rid must not be empty");
  if (request.input_ids.empty()) {
    return absl::InvalidArgumentError("the input is empty: a request needs at least one token");
  }
  const int32_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < request.input_ids.size(); ++i) {
    const int32_t id = request.input_ids[i];
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("input_ids[", i, "] = ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  const int64_t prompt_len = static_cast<int64_t>(request.input_ids.size());
  if (prompt_len >= config_.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("the input (", prompt_len,
                                                   " tokens) is longer than the model's context ",
                                                   "length (", config_.context_length, " tokens)"));
  }
  if (absl::Status s = ValidateSamplingParams(request.sampling, vocab); !s.ok()) return s;
  const int64_t max_new =
      std::min<int64_t>(request.sampling.max_new_tokens, config_.context_length - prompt_len);
  const int64_t blocks = pool_->BlocksFor(prompt_len + max_new);
  if (blocks > pool_->num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request needs ", blocks, " KV blocks (", prompt_len, " prompt + ",
                     max_new, " new tokens) but this worker's KV cache holds only ",
                     pool_->num_blocks(), " blocks of ", pool_->block_size(), " tokens"));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::Submit(Request request) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  if (seqs_.count(request.rid)) {
    return absl::AlreadyExistsError(absl::StrCat("request '", request.rid, "' is already running"));
  }
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_queued_requests) {
    return absl::ResourceExhaustedError(absl::StrCat("the queue is full (", waiting_.size(),
                                                     " waiting requests, --max-queued-requests)"));
  }
  auto seq = std::make_unique<Sequence>();
  seq->req = std::move(request);
  SamplingParams& sp = seq->req.sampling;
  seq->prompt_len = static_cast<int64_t>(seq->req.input_ids.size());
  sp.max_new_tokens = static_cast<int32_t>(
      std::min<int64_t>(sp.max_new_tokens, config_.context_length - seq->prompt_len));
  sp.min_new_tokens = std::min(sp.min_new_tokens, sp.max_new_tokens);
  if (sp.constraint.kind != GrammarConstraint::Kind::kNone && grammar_vocabulary_ == nullptr) {
    std::vector<std::string> token_bytes(static_cast<size_t>(model_->config().vocab_size));
    for (int32_t id = 0; id < model_->config().vocab_size; ++id) {
      token_bytes[static_cast<size_t>(id)] =
          tokenizer_->TokenBytes(id, /*skip_special_tokens=*/true);
    }
    grammar_vocabulary_ =
        std::make_shared<const grammar::TokenVocabulary>(std::move(token_bytes), eos_ids_);
  }
  auto sampler = Sampler::Create(sp, model_->config().vocab_size, eos_ids_, grammar_vocabulary_);
  if (!sampler.ok()) return sampler.status();
  seq->sampler.emplace(std::move(*sampler));
  seq->output.emplace(*tokenizer_, sp, eos_ids_);
  seq->tokens = seq->req.input_ids;
  if (seq->req.return_logprob) {
    const int64_t start = seq->req.logprob_start_len;
    seq->score_start = start < 0 ? seq->prompt_len - 1 : std::min(start, seq->prompt_len - 1);
  }
  seq->submitted = Clock::now();
  if (!seq->req.share_prompt_with.empty() && SharableBlocks(*seq) > 0) {
    if (Sequence* leader = FindLeader(*seq)) {
      if (leader->state == State::kRunning && leader->num_computed >= leader->prompt_len) {
        TakeSharedPrefix(seq.get(), *leader);
      } else if (leader->generated() == 0 && leader->state != State::kHeld) {
        seq->share_pending = true;  // its prompt KV is still to come
      }
    }
  }
  Sequence* raw = seq.get();
  seqs_.emplace(raw->req.rid, std::move(seq));
  waiting_.push_back(raw);
  return absl::OkStatus();
}

void Scheduler::Emit(Sequence* seq, RequestOutput out) {
  out.rid = seq->req.rid;
  out.prompt_tokens = seq->prompt_len;
  out.completion_tokens = seq->generated();
  out.cached_tokens = seq->cached_tokens;
  if (out.last) {
    const Clock::time_point now = Clock::now();
    if (seq->admitted_once) {
      out.timings.queue = Seconds(seq->admitted - seq->submitted);
      if (seq->generated() > 0) {
        out.timings.prefill = Seconds(seq->first_token - seq->admitted);
        out.timings.decode = Seconds(now - seq->first_token);
      } else {
        out.timings.prefill = Seconds(now - seq->admitted);
      }
    } else {
      out.timings.queue = Seconds(now - seq->submitted);
    }
  }
  if (seq->req.callbacks.on_output) seq->req.callbacks.on_output(out);
}

void Scheduler::Remove(const std::string& rid) {
  for (Sequence* seq : waiting_) {
    if (seq->share_pending && seq->req.share_prompt_with == rid) seq->share_pending = false;
  }
  seqs_.erase(rid);
}

void Scheduler::Finish(Sequence* seq, FinishReason reason, RequestOutput out) {
  CacheComputed(seq);
  ReleaseBlocks(seq);
  running_.remove(seq);
  if (reason.kind == FinishReason::Kind::kAbort) {
    ++counters_.aborted_requests;
  } else {
    ++counters_.finished_requests;
  }
  out.last = true;
  out.finish = std::move(reason);
  Emit(seq, std::move(out));
  Remove(seq->req.rid);
}

void Scheduler::AcceptToken(Sequence* seq, const SampleResult& sampled, RequestOutput* out) {
  const int32_t token = sampled.token;
  if (seq->generated() == 0) seq->first_token = Clock::now();
  seq->tokens.push_back(token);
  ++counters_.generated_tokens;
  out->token_ids.push_back(token);
  if (seq->req.return_logprob) {
    out->logprobs.push_back(sampled.logprob);
    if (seq->req.sampling.top_logprobs_num > 0) out->top_logprobs.push_back(sampled.top);
  }
  OutputProcessor::Update u = seq->output->Push(token);
  out->text += u.text;
  if (u.finish) out->finish = std::move(u.finish);
}

void Scheduler::AttachInputLogprobs(Sequence* seq, RequestOutput* out) {
  if (seq->score_start < 0 || seq->input_sent) return;
  seq->input_sent = true;
  out->input_logprob_start = seq->score_start;
  out->input_logprobs = std::move(seq->input_logprobs);
  out->input_top_logprobs = std::move(seq->input_top);
}

absl::Status Scheduler::Abort(const std::string& rid, const std::string& message) {
  auto it = seqs_.find(rid);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("no live request '", rid, "'"));
  }
  Sequence* seq = it->second.get();
  switch (seq->state) {
    case State::kHeld:
      ReleaseBlocks(seq);
      ++counters_.aborted_requests;
      Remove(rid);
      return absl::OkStatus();
    case State::kWaiting:
      waiting_.remove(seq);
      break;
    case State::kRunning:
    case State::kAwaitingKv:
      break;
  }
  RequestOutput out;
  out.text = seq->output->Flush();
  Finish(seq, FinishReason::Abort(message), std::move(out));
  return absl::OkStatus();
}

absl::Status Scheduler::CompleteTransfer(const std::string& rid, const SampleResult& first) {
  const int32_t first_token = first.token;
  auto it = seqs_.find(rid);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("no live request '", rid, "'"));
  }
  Sequence* seq = it->second.get();
  if (seq->state != State::kAwaitingKv) {
    return absl::FailedPreconditionError(
        absl::StrCat("request '", rid, "' is not waiting for its KV cache"));
  }
  if (absl::Status st = ValidateFirstToken(first, model_->config().vocab_size); !st.ok()) return st;
  seq->num_computed = seq->prompt_len;
  seq->sampler->Observe(first_token);
  RequestOutput out;
  AcceptToken(seq, first, &out);
  seq->state = State::kRunning;
  running_.push_back(seq);
  OfferPrompt(*seq);  // before a Finish below can drop the blocks
  if (out.finish || seq->generated() >= seq->req.sampling.max_new_tokens) {
    FinishReason reason = out.finish ? *out.finish : FinishReason::Length(seq->generated());
    out.text += seq->output->Flush();
    Finish(seq, std::move(reason), std::move(out));
  } else {
    Emit(seq, std::move(out));
  }
  return absl::OkStatus();
}

absl::Status Scheduler::ReleaseHeld(const std::string& rid) {
  auto it = seqs_.find(rid);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("no live request '", rid, "'"));
  }
  Sequence* seq = it->second.get();
  if (seq->state != State::kHeld) {
    return absl::FailedPreconditionError(
        absl::StrCat("request '", rid, "' is not holding KV for a transfer"));
  }
  ReleaseBlocks(seq);
  Remove(rid);
  return absl::OkStatus();
}

absl::Status Scheduler::FlushCache() {
  if (!seqs_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot flush the cache while ", seqs_.size(), " requests are live"));
  }
  if (radix_) radix_->Clear();
  return absl::OkStatus();
}

SchedulerLoad Scheduler::Load() const {
  SchedulerLoad l;
  l.running = static_cast<int>(running_.size());
  l.waiting = static_cast<int>(waiting_.size());
  for (const auto& [rid, s] : seqs_) {
    l.awaiting_kv += s->state == State::kAwaitingKv;
    l.held += s->state == State::kHeld;
  }
  l.free_blocks = pool_->num_free();
  l.total_blocks = pool_->num_blocks();
  if (radix_) {
    l.cached_blocks = radix_->cached_blocks();
    l.evictable_blocks = radix_->evictable_blocks();
  }
  return l;
}

const RadixCache::Stats* Scheduler::radix_stats() const {
  return radix_ ? &radix_->stats() : nullptr;
}

absl::Status Scheduler::CheckInvariants() const {
  const int32_t n = pool_->num_blocks();
  std::vector<int32_t> listed(static_cast<size_t>(n), 0);
  for (const auto& [rid, s] : seqs_) {
    for (const std::vector<int32_t>* ids : {&s->table.block_ids, &s->shared_blocks}) {
      for (int32_t b : *ids) {
        if (b < 0 || b >= n) return absl::InternalError(absl::StrCat(rid, " lists block ", b));
        ++listed[static_cast<size_t>(b)];
      }
    }
    if (s->state != State::kWaiting && !s->shared_blocks.empty()) {
      return absl::InternalError(absl::StrCat("admitted request ", rid, " holds shared blocks"));
    }
    if (s->state == State::kWaiting && !s->table.block_ids.empty()) {
      return absl::InternalError(absl::StrCat("waiting request ", rid, " holds blocks"));
    }
  }
  int64_t cache_held = 0, used = 0;
  for (int32_t b = 0; b < n; ++b) {
    const int32_t extra = pool_->ref_count(b) - listed[static_cast<size_t>(b)];
    if (extra != 0 && extra != 1) {
      return absl::InternalError(absl::StrCat("block ", b, " has ", pool_->ref_count(b),
                                              " references but ", listed[static_cast<size_t>(b)],
                                              " tables list it"));
    }
    if (extra == 1 && !radix_) {
      return absl::InternalError(absl::StrCat("block ", b, " is referenced by no table"));
    }
    cache_held += extra;
    used += pool_->ref_count(b) > 0;
  }
  if (radix_ && cache_held != radix_->cached_blocks()) {
    return absl::InternalError(absl::StrCat("the radix cache claims ", radix_->cached_blocks(),
                                            " blocks but holds ", cache_held));
  }
  if (used + pool_->num_free() != n) {
    return absl::InternalError(absl::StrCat(used, " used + ", pool_->num_free(), " free != ", n));
  }
  return absl::OkStatus();
}

}  // namespace tandem::engine

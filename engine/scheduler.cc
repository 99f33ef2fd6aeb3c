#include "engine/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "engine/prefix_wait.h"

namespace tandem::engine {
namespace {

// Block accounting is the scheduler's own bookkeeping: a failure here is a bug, not bad input,
// and continuing would corrupt other requests' KV.
void CheckBookkeeping(const absl::Status& status, const char* what) {
  TANDEM_CHECK_OK(status, absl::StrCat("KV block bookkeeping in ", what));
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

struct Scheduler::Sequence {
  Request req;
  State state = State::kWaiting;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t num_computed = 0;   // positions whose K/V is in the cache
  int64_t kv_reported = 0;    // kPrefillOnly: positions reported through on_kv_layer
  int64_t cached_upto = 0;    // positions offered to the radix cache
  int64_t cached_tokens = 0;  // prompt tokens matched at first admission
  bool admitted_once = false;
  BlockTable table;
  // Prompt sharing: waiting for the leader's prompt KV (share_prompt_with), and the references
  // taken on the leader's blocks that admission moves into `table` (held while kWaiting).
  bool share_pending = false;
  std::vector<int32_t> shared_blocks;
  std::optional<Sampler> sampler;
  std::optional<OutputProcessor> output;
  // Prompt logprobs (return_logprob): the logits of positions [score_start, prompt_len - 1)
  // score the prompt tokens after them. -1: none asked for.
  int64_t score_start = -1;
  std::vector<float> input_logprobs;
  std::vector<std::vector<TokenLogprob>> input_top;
  bool input_sent = false;
  // The next position whose logits score a prompt token; prompt_len - 1 when all are in.
  int64_t next_scored() const {
    if (score_start < 0 || input_sent) return prompt_len - 1;
    return score_start + static_cast<int64_t>(input_logprobs.size());
  }
  // The most known tokens the radix cache may serve: positions still to score need logits, and
  // the last known token is computed for its own.
  int64_t match_limit() const {
    return std::min(static_cast<int64_t>(tokens.size()) - 1, next_scored());
  }
  Clock::time_point submitted, admitted, first_token;
  int64_t generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

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

absl::StatusOr<StepStats> Scheduler::Step() {
  StepStats st;
  // 1. Decode growth: a sequence about to compute past its table gets its next block; when blocks
  // run out, cached blocks are evicted, then the youngest running sequences preempted.
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
    if (growth.empty()) break;
    if (EnsureFree(needed)) {
      auto plan = pool_->PlanAppend(growth);
      CheckBookkeeping(plan.status(), "growth plan");
      CheckBookkeeping(pool_->Commit(*plan), "growth commit");
      break;
    }
    Preempt(running_.back());
    ++st.preempted;
  }

  // 2. The batch: running sequences first (decode tokens are not charged to the prefill budget).
  struct Item {
    Sequence* seq;
    int64_t n;
  };
  std::vector<Item> items;
  int64_t budget = config_.max_prefill_tokens;
  int64_t score_budget = kMaxScoredRowsPerStep;
  // A scored position must be computed in a step that returns its logits: a chunk of a
  // sequence being scored ends where the step's score rows run out.
  auto clamp_to_scores = [&score_budget](const Sequence* seq, int64_t n) {
    const int64_t from = seq->next_scored();
    const int64_t rows = std::min(seq->num_computed + n, seq->prompt_len - 1) - from;
    if (rows <= 0) return n;
    if (rows > score_budget) n = from - seq->num_computed + score_budget;
    score_budget -= std::min(rows, score_budget);
    return n;
  };
  for (Sequence* seq : running_) {
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    if (remaining <= 0) continue;
    int64_t n = 1;
    if (remaining > 1) {
      n = clamp_to_scores(seq,
                          std::min<int64_t>({remaining, config_.chunked_prefill_size, budget}));
      if (n <= 0) continue;
      budget -= n;
    }
    items.push_back({seq, n});
  }

  // 3. Admission.
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
    if (!decode_only && budget <= 0) break;
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
    ++st.admitted;
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
    int64_t n =
        remaining == 1
            ? 1
            : clamp_to_scores(seq,
                              std::min<int64_t>({remaining, config_.chunked_prefill_size, budget}));
    if (n <= 0) continue;  // admitted; it computes once a step has score rows left
    if (remaining > 1) budget -= n;
    items.push_back({seq, n});
  }
  if (items.empty()) return st;

  // 4. Forward.
  std::vector<SequenceInput> batch;
  batch.reserve(items.size());
  std::vector<Item> prefill_only;
  for (const Item& it : items) {
    Sequence* seq = it.seq;
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
      st.prefill_tokens += it.n;
    } else {
      st.decode_tokens += 1;
    }
    if (seq->req.mode == RequestMode::kPrefillOnly && seq->req.callbacks.on_kv_layer) {
      prefill_only.push_back(it);
    }
  }
  st.num_sequences = static_cast<int>(items.size());
  LayerKvCallback on_layer;
  if (!prefill_only.empty()) {
    on_layer = [&prefill_only](int64_t layer) {
      for (const Item& it : prefill_only) {
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
    for (const Item& it : items) (void)Abort(it.seq->req.rid, message);
    return logits.status();
  }

  // 5. Bookkeeping, sampling and outputs.
  const int64_t vocab = model_->config().vocab_size;
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    Sequence* seq = it.seq;
    for (int64_t k = batch[i].score_begin; k < batch[i].score_end; ++k, ++row) {
      const int64_t pos = seq->num_computed + k;
      SampleResult scored =
          ScoreToken(logits->subspan(static_cast<size_t>(row * vocab), static_cast<size_t>(vocab)),
                     seq->tokens[static_cast<size_t>(pos + 1)], seq->req.sampling.top_logprobs_num);
      seq->input_logprobs.push_back(scored.logprob);
      if (seq->req.sampling.top_logprobs_num > 0) seq->input_top.push_back(std::move(scored.top));
    }
    seq->num_computed += it.n;
    seq->kv_reported = seq->num_computed;
    if (seq->num_computed < static_cast<int64_t>(seq->tokens.size())) {
      CacheComputed(seq);  // a prompt chunk: its full blocks can serve others already
      continue;
    }
    std::span<const float> r =
        logits->subspan(static_cast<size_t>(row * vocab), static_cast<size_t>(vocab));
    ++row;
    if (seq->generated() == 0) {
      CacheComputed(seq);
      OfferPrompt(*seq);  // its prompt KV is complete; before a Finish below can drop it
    }
    RequestOutput out;
    if (seq->generated() == 0) AttachInputLogprobs(seq, &out);
    if (seq->req.sampling.max_new_tokens == 0) {
      ++st.finished;
      Finish(seq, FinishReason::Length(0), std::move(out));
      continue;
    }
    absl::StatusOr<SampleResult> next = seq->sampler->Sample(r);
    if (!next.ok()) {
      ++st.finished;
      out.text = seq->output->Flush();
      Finish(seq, FinishReason::Abort(absl::StrCat("sampling failed: ", next.status().message())),
             std::move(out));
      continue;
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
      continue;
    }
    if (out.finish) {
      ++st.finished;
      FinishReason reason = std::move(*out.finish);
      Finish(seq, std::move(reason), std::move(out));
    } else {
      Emit(seq, std::move(out));
    }
  }
  return st;
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

// Scheduler: continuous batching of many requests over one Model and one paged KV cache.
//
// Every request is a sequence of known tokens (its prompt, then what it generated) of which the
// first `num_computed` have their K/V in the cache. Each Step() builds one batch: every running
// sequence contributes the tokens it still has to compute, a decoding sequence exactly one, a
// prefilling one a chunk of at most --chunked-prefill-size tokens, and all prefill chunks of a
// step together at most --max-prefill-tokens. A sequence whose chunk reaches its last known token
// gets logits, samples its next token, and so decodes. Prefill and decode tokens share the batch
// (the model's kernels are batch-invariant, so this changes no sequence's numbers).
//
// Admission (first come, first served; the head of the queue waits rather than being overtaken,
// except that a sibling waiting for its leader's prompt KV is not the head: see Prompt sharing,
// and neither is a prompt waiting for a running prefill of its leading blocks: see Prefix wait):
// a waiting request is admitted when fewer than --max-running-requests are running and the blocks
// for all its known tokens can be reserved while one free block per running sequence stays as
// decode headroom. The radix prefix cache is consulted first; matched blocks are shared, not
// recomputed (at least the last prompt token is always recomputed, for its logits). When a
// decoding sequence needs a new block and none is free, unreferenced cached blocks are evicted;
// if that is not enough, the most recently admitted running sequence is preempted: its blocks are
// released and it goes back to the front of the queue to be recomputed (prompt + generated tokens)
// later, its sampler state kept, so a preempted request produces exactly the tokens it would have.
//
// Disaggregation hooks:
//   kPrefillOnly: runs the prefill, reports each layer's K/V as it is written (on_kv_layer), emits
//     one output with the first sampled token, and then holds its blocks (the KV is being shipped)
//     until ReleaseHeld() or Abort().
//   kDecodeOnly: reserves blocks for the prompt's K/V when admitted and reports them
//     (on_reserved); the KV is filled from outside; CompleteTransfer() gives the first token and
//     the sequence joins the decode batch.
//
// Prompt sharing (parallel sampling, n > 1): a request naming a live leader in
// `share_prompt_with` with the same input_ids shares the leader's first
// k = next_scored() / block_size full prompt blocks, read-only (k = (prompt_len - 1) / block_size
// without prompt logprobs; a position to be scored needs its own logits, as with the radix cache):
// it is admitted with them as its matched prefix (reported as cached_tokens) and computes only
// the rest, at least the last prompt token, for its own first logits. The leader's prompt KV is
// complete once a kGenerate leader has computed its prompt (when it samples its first token) or
// a kDecodeOnly leader's CompleteTransfer arrived; a sibling submitted before that waits without
// holding up the queue behind it (it is passed over by admission). At that moment every waiting
// sibling takes its references on the shared blocks, so a leader that finishes in the same step
// strands nobody; a later sibling takes them at Submit. A sibling whose leader is unknown, has
// other input_ids, is a prefill-only request, was preempted after its prompt completed, or ends
// before its prompt KV is complete computes its prompt itself (radix match as usual): sharing
// never makes a request fail. References taken but not yet admitted (`shared_blocks`) survive an
// admission that finds no memory, are dropped on abort and shutdown, and are given up (the
// sibling then computes alone) when nothing runs and the queue cannot admit its head, so blocks
// held for siblings never stall the queue. A preempted sibling recomputes without sharing.
//
// Prefix wait (engine/prefix_wait.h): a waiting request (not decode-only, not sharing a leader's
// prompt) whose prompt shares more full blocks, within what it may match, with a running
// request whose prompt blocks are not all in the radix cache yet than the cache can give it now
// is passed over until those blocks are cached, and then reuses them instead of computing the
// same prefix alongside. Later requests may be admitted meanwhile. Only running prefills hold
// anyone; one aborted or preempted holds nobody, so the wait ends when that prefill does.
//
// Outputs: every request's on_output is called with new tokens and text as they are produced;
// the last call has `last` set (and `finish`, except for a prefill-only request whose decode
// continues elsewhere). Callbacks run on the thread calling Step/Abort/CompleteTransfer and must
// not call back into the Scheduler.
//
// Thread-compatible: one thread drives a Scheduler (Engine wraps it with a thread and an inbox).
// Ownership: the Scheduler owns the block pool, the KV storage and the radix cache; the Model and
// Tokenizer are borrowed and must outlive it.
#ifndef TANDEM_ENGINE_SCHEDULER_H_
#define TANDEM_ENGINE_SCHEDULER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/finish_reason.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/output_processor.h"
#include "engine/radix_cache.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

// Prompt positions scored (logits returned besides the sampled rows) per step, over all
// sequences: bounds the logits buffer of a step that scores prompts (each row is vocab floats).
inline constexpr int64_t kMaxScoredRowsPerStep = 64;

struct SchedulerConfig {
  int64_t num_blocks = 0;  // KV blocks in the pool (>= 1)
  int32_t block_size = kDefaultKvBlockSize;
  int max_running_requests = 128;
  int chunked_prefill_size = 512;  // prompt tokens of one sequence per step
  int max_prefill_tokens = 2048;   // prompt tokens of all sequences per step
  int max_queued_requests = 1024;  // waiting requests beyond this are refused
  int64_t context_length = 0;      // 0 = the model's max_position_embeddings
  bool enable_radix_cache = true;
  // KV events (docs/router.md "KV events"): events the log retains for readers; 0: no events.
  // Needs the radix cache.
  size_t kv_events_buffer = 65536;
};

enum class RequestMode {
  kGenerate,     // prefill and decode here
  kPrefillOnly,  // prefill, first token, hold the KV for transfer
  kDecodeOnly,   // reserve blocks, wait for the KV and first token, decode
};

// Wall-clock phases of one request (seconds), reported with its last output.
struct RequestTimings {
  double queue = 0;    // submitted -> admitted (blocks reserved)
  double prefill = 0;  // admitted -> first token (kDecodeOnly: -> CompleteTransfer)
  double decode = 0;   // first token -> finished
};

struct RequestOutput {
  std::string rid;
  std::vector<int32_t> token_ids;  // tokens produced since the previous output
  std::vector<float> logprobs;     // one per token_ids entry, when return_logprob
  // One per token_ids entry when sampling.top_logprobs_num > 0 (and return_logprob): the most
  // likely tokens at that position.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // With return_logprob, on the output that carries the first token (or, when nothing is
  // generated, on the last one): the prompt's logprobs from position input_logprob_start on
  // (SGLang's logprob_start_len). input_logprobs[i] is the logprob of prompt token
  // input_logprob_start + 1 + i given the tokens before it (the token at input_logprob_start
  // itself has none: its logits were not computed); input_top_logprobs in step with it when
  // sampling.top_logprobs_num > 0. input_logprob_start is -1 on every other output.
  int64_t input_logprob_start = -1;
  std::vector<float> input_logprobs;
  std::vector<std::vector<TokenLogprob>> input_top_logprobs;
  std::string text;      // text that became final since the previous output
  bool last = false;     // no further output for this request
  bool kv_held = false;  // kPrefillOnly: blocks kept until ReleaseHeld/Abort
  std::optional<FinishReason> finish;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // tokens generated so far
  int64_t cached_tokens = 0;      // prompt tokens served by the radix cache
  RequestTimings timings;         // filled on the last output
};

// Layer `layer`'s K/V of positions [begin_pos, end_pos) of a prefill-only request is in the cache,
// in `block_ids` (the request's whole block table; position p is in block_ids[p / block_size]).
struct KvLayerEvent {
  std::string_view rid;
  int64_t layer = 0;
  std::span<const int32_t> block_ids;
  int64_t begin_pos = 0;
  int64_t end_pos = 0;
};

struct RequestCallbacks {
  std::function<void(const RequestOutput&)> on_output;
  // kPrefillOnly; called on the forward thread between layers: must be quick.
  std::function<void(const KvLayerEvent&)> on_kv_layer;
  // kDecodeOnly: the blocks that will hold the prompt's K/V (positions [0, prompt length)).
  std::function<void(const std::vector<int32_t>& block_ids)> on_reserved;
};

struct Request {
  std::string rid;
  std::vector<int32_t> input_ids;
  SamplingParams sampling;
  bool return_logprob = false;
  // With return_logprob: the first prompt position whose logprobs are reported (SGLang's
  // logprob_start_len); -1 or beyond the prompt: the last prompt token only, which costs
  // nothing. Positions from it on are computed, never served from the prefix cache (a cached
  // block has K/V but no logits), so the cache is matched only up to it.
  int64_t logprob_start_len = -1;
  RequestMode mode = RequestMode::kGenerate;
  // Parallel sampling: the rid of a live request (the leader) with the same input_ids whose full
  // prompt blocks this one shares instead of computing them (see "Prompt sharing" above). Only
  // for kGenerate requests; ignored for the others. Empty: no sharing. Naming an unknown or
  // unsuitable leader (or the request itself) is not an error: the prompt is computed here.
  std::string share_prompt_with;
  RequestCallbacks callbacks;
};

// What one Step did.
struct StepStats {
  int num_sequences = 0;
  int64_t prefill_tokens = 0;  // tokens of sequences computing more than one token
  int64_t decode_tokens = 0;
  int preempted = 0;
  int admitted = 0;
  int finished = 0;
};

// A snapshot for load reports and metrics.
struct SchedulerLoad {
  int running = 0;  // admitted and computing
  int waiting = 0;  // queued, including preempted
  int awaiting_kv = 0;
  int held = 0;  // prefill-only, KV held for transfer
  int64_t free_blocks = 0;
  int64_t total_blocks = 0;
  int64_t cached_blocks = 0;     // held by the radix cache
  int64_t evictable_blocks = 0;  // of those, freeable now
};

struct SchedulerCounters {
  int64_t preemptions = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t finished_requests = 0;
  int64_t aborted_requests = 0;
};

class Scheduler {
 public:
  // Errors: InvalidArgument on an unusable config; ResourceExhausted if the KV memory cannot be
  // mapped.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(const SchedulerConfig& config,
                                                           Model* model,
                                                           const Tokenizer* tokenizer);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Checks a request without queueing it: empty or out-of-vocabulary input, a prompt that leaves
  // no room in the context, sampling parameters, a request that could never fit the KV pool.
  // max_new_tokens is clamped to the context left after the prompt (as SGLang).
  absl::Status Validate(const Request& request) const;
  // Validates and queues. AlreadyExists for a live rid, ResourceExhausted when the queue is full.
  absl::Status Submit(Request request);
  // Ends the request wherever it is; its blocks are released at once and a last output with
  // FinishReason::Abort(message) is emitted (not for a held prefill-only request, whose last
  // output was already sent). NotFound for an unknown rid.
  absl::Status Abort(const std::string& rid, const std::string& message);
  // kDecodeOnly: the KV of the prompt is in the reserved blocks and `first` (the token, its
  // logprob and alternatives) was sampled by the prefill side. FailedPrecondition unless the
  // request is awaiting its KV; InvalidArgument for a token outside the vocabulary.
  absl::Status CompleteTransfer(const std::string& rid, const SampleResult& first);
  // kPrefillOnly: the KV has been shipped (or given up): drop the request's block references.
  absl::Status ReleaseHeld(const std::string& rid);
  // Frees every cached block no request uses. FailedPrecondition unless no request is live
  // (SGLang's /flush_cache semantics).
  absl::Status FlushCache();

  // Runs one batch; returns what it did (num_sequences == 0: nothing to run).
  absl::StatusOr<StepStats> Step();

  bool HasWork() const;  // something Step could run or admit
  SchedulerLoad Load() const;
  const SchedulerCounters& counters() const { return counters_; }
  const RadixCache::Stats* radix_stats() const;  // null when the cache is disabled
  // The radix cache's KV event log (thread-safe; any thread may read it), or null when events or
  // the cache are off. Fixed at construction; lives as long as the scheduler.
  const KvEventLog* kv_event_log() const { return kv_events_.get(); }
  // Block accounting check for tests: every block's reference count equals the number of live
  // tables listing it plus one if the radix cache holds it, and free + used == total.
  absl::Status CheckInvariants() const;
  const SchedulerConfig& config() const { return config_; }
  KvCacheStorage* kv_storage() { return storage_.get(); }
  const BlockPool& block_pool() const { return *pool_; }

 private:
  struct Sequence;
  enum class State { kWaiting, kRunning, kAwaitingKv, kHeld };
  using Clock = std::chrono::steady_clock;

  Scheduler(const SchedulerConfig& config, Model* model, const Tokenizer* tokenizer,
            std::unique_ptr<BlockPool> pool, std::unique_ptr<KvCacheStorage> storage);

  bool TryAdmit(Sequence* seq, int64_t reserve_blocks);
  bool EnsureFree(int64_t blocks);
  void Preempt(Sequence* seq);
  void ReleaseBlocks(Sequence* seq);
  void CacheComputed(Sequence* seq);
  void Emit(Sequence* seq, RequestOutput out);
  void Finish(Sequence* seq, FinishReason reason, RequestOutput out);
  // Removes a finished request; siblings still waiting for its prompt KV compute their own.
  void Remove(const std::string& rid);
  // Prompt sharing (class comment). The leader `sibling` may share with, or null.
  Sequence* FindLeader(const Sequence& sibling);
  // Blocks of the leader's prompt the sibling would share (0: sharing is pointless).
  int64_t SharableBlocks(const Sequence& sibling) const;
  // Takes the sibling's references on the leader's first SharableBlocks(sibling) blocks.
  void TakeSharedPrefix(Sequence* sibling, const Sequence& leader);
  // The leader's prompt KV just became complete: every sibling waiting on it takes its share.
  void OfferPrompt(const Sequence& leader);
  void DropSharedPrefix(Sequence* seq);
  // Drops every waiting sibling's not yet admitted references; false if there were none.
  bool DropWaitingShares();
  // The first waiting request admission would try, or null.
  Sequence* AdmissionHead() const;
  void AcceptToken(Sequence* seq, const SampleResult& sampled, RequestOutput* out);
  // Moves the prompt logprobs gathered so far into `out` (once per request).
  void AttachInputLogprobs(Sequence* seq, RequestOutput* out);

  // The phases of Step (scheduler_step.cc). StepPlan: the batch being assembled and what is left
  // of the step's budgets.
  struct StepPlan;
  // Gives running sequences the blocks this step computes into, preempting the youngest when
  // even eviction cannot.
  void GrowRunning(StepStats* st);
  // Admits waiting requests in order while slots, blocks and the prefill budget allow.
  void AdmitWaiting(StepPlan* plan, StepStats* st);
  std::vector<SequenceInput> BatchInputs(const StepPlan& plan, StepStats* st) const;
  // After the forward pass: scores prompt positions, caches computed blocks, samples and emits.
  // `logits`: the sequence's rows (score rows, then the last token's when in.want_logits).
  void CompleteStepItem(Sequence* seq, int64_t n, const SequenceInput& in,
                        std::span<const float> logits, StepStats* st);

  SchedulerConfig config_;
  Model* model_;
  const Tokenizer* tokenizer_;
  std::vector<int32_t> eos_ids_;
  // Every token's bytes (model vocab_size entries), built at the first constrained request.
  grammar::TokenVocabularyPtr grammar_vocabulary_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<KvCacheStorage> storage_;
  std::unique_ptr<KvEventLog> kv_events_;  // null when off; outlives radix_, which writes to it
  std::unique_ptr<RadixCache> radix_;      // null when disabled
  std::unordered_map<std::string, std::unique_ptr<Sequence>> seqs_;
  std::list<Sequence*> waiting_;  // FCFS; preempted sequences go to the front
  std::list<Sequence*> running_;  // in admission order
  SchedulerCounters counters_;
  uint64_t admit_counter_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SCHEDULER_H_

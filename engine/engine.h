// Engine: the serving engine a worker daemon runs: the model, its tokenizer and a Scheduler
// driven by one loop thread.
//
// Calls from any thread are posted to an inbox the loop drains between steps, so a caller never
// waits for a forward pass (at most for the inbox lock). Submit checks the request at once and
// returns the error to the caller; everything after that (tokens, text, the finish reason, an
// abort) arrives through the request's callbacks, which run on the loop thread and must be quick
// and must not block on the Engine. Hooks for the disaggregated daemons (prefill-only requests,
// reserve-then-admit decode requests) are the Scheduler's; see scheduler.h.
//
// Shutdown (destructor or Shutdown()): new requests are refused, live ones end with
// FinishReason::Abort("the engine is shutting down"), the loop joins.
//
// Thread-safe.
#ifndef TANDEM_ENGINE_ENGINE_H_
#define TANDEM_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "engine/model.h"
#include "engine/request_seeds.h"
#include "engine/scheduler.h"
#include "engine/serving_options.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

// The SchedulerConfig the serving options describe for `model`, whose loaded weights take
// `weight_bytes`: KV memory (KvCacheBytes) to blocks, capped by --max-total-tokens, and the rest
// by name. InvalidArgument naming the flag when the memory holds no block.
absl::StatusOr<SchedulerConfig> SchedulerConfigFromOptions(const ServingOptions& options,
                                                           const ModelConfig& model,
                                                           int64_t weight_bytes);

class Engine {
 public:
  // Loads the model and tokenizer named by options.model_path and starts the loop. Errors name
  // the flag or the file.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const ServingOptions& options);
  // Takes over an already loaded model and tokenizer (tests, benchmarks); `random_seed` as
  // ServingOptions::random_seed.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(
      const SchedulerConfig& config, std::unique_ptr<Model> model,
      std::unique_ptr<Tokenizer> tokenizer, std::optional<int64_t> random_seed = std::nullopt);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates (errors as Scheduler::Validate), refuses a duplicate live rid (AlreadyExists) or a
  // full engine (ResourceExhausted: running + queued at their limits), then queues.
  absl::Status Submit(Request request);
  // The rest act on the loop thread before the next step; an unknown rid is ignored (the request
  // may have ended meanwhile).
  void Abort(const std::string& rid, const std::string& message);
  // `done` (optional) receives the Scheduler's status, on the loop thread.
  void CompleteTransfer(const std::string& rid, SampleResult first,
                        std::function<void(absl::Status)> done = nullptr);
  void ReleaseHeld(const std::string& rid);
  // Blocks until the loop has tried; FailedPrecondition while requests are live. Load() reflects
  // the flush as soon as this returns.
  absl::Status FlushCache();
  // Stops admitting, aborts live requests, joins the loop. Idempotent.
  void Shutdown();

  // Snapshot refreshed after every step.
  SchedulerLoad Load() const;
  // When the loop last started a step and last ended one without error, as MonoNowNs()
  // (common/clock.h; 0: never, and started is 0 again after a failed step, both after Shutdown);
  // started > ended while a step runs. A health check reads progress here instead of queueing a
  // probe behind a long prefill.
  struct Progress {
    int64_t step_started_ns = 0;
    int64_t step_ended_ns = 0;
  };
  Progress progress() const {
    return {step_started_ns_.load(std::memory_order_relaxed),
            step_ended_ns_.load(std::memory_order_relaxed)};
  }
  int64_t live_requests() const;
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& model_config() const { return model_->config(); }
  // True when the decoder's linear layers run W8A8 int8 (--quantization w8a8 or an int8
  // checkpoint).
  bool int8_linear() const { return model_->weights().int8(); }
  const SchedulerConfig& config() const { return config_; }
  // The seeds of requests that carry none (--random-seed), for the worker to draw when it
  // converts a request. Lives with the engine.
  RequestSeeds& request_seeds() const { return *request_seeds_; }
  // The KV cache memory (stable for the Engine's life), for the transfer engine to register.
  // Its bytes belong to the requests whose blocks they are: read a block only while its request
  // holds it (prefill-only: until ReleaseHeld), write only blocks reported by on_reserved.
  KvCacheStorage* kv_storage() const { return scheduler_->kv_storage(); }
  // What the radix cache stores and evicts, for the router (docs/router.md "KV events"); null
  // when events or the cache are off. Thread-safe, fixed at construction, lives with the engine.
  const KvEventLog* kv_event_log() const { return scheduler_->kv_event_log(); }
  // Blocks until the loop has no live request and Load() reflects that (tests, drains). False on
  // timeout.
  bool WaitIdle(double timeout_seconds);

  // Registers the engine's gauges and counters (tandem_engine_*, and SGLang's sglang:* names
  // labelled model_name = `model_name`) and keeps them current.
  void ExportMetrics(MetricsRegistry* registry, const std::string& model_name);

 private:
  Engine(const SchedulerConfig& config, std::unique_ptr<Model> model,
         std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<Scheduler> scheduler,
         std::optional<int64_t> random_seed);
  void Loop();
  // False (command dropped) once shutting down.
  bool Post(std::function<void(Scheduler&)> command);
  void UpdateMetrics();

  SchedulerConfig config_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Scheduler> scheduler_;  // loop thread only, after construction
  const std::unique_ptr<RequestSeeds> request_seeds_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // inbox or stop
  std::condition_variable idle_cv_;  // live_ emptied
  std::deque<std::function<void(Scheduler&)>> inbox_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<std::string> live_ ABSL_GUARDED_BY(mu_);
  SchedulerLoad load_ ABSL_GUARDED_BY(mu_);
  // live_ emptied since load_ was last refreshed: WaitIdle waits for the refresh.
  bool load_stale_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> step_started_ns_{0};  // progress()
  std::atomic<int64_t> step_ended_ns_{0};
  std::mutex join_mu_;  // serialises Shutdown's join
  std::thread loop_;

  struct Metrics;
  std::unique_ptr<Metrics> metrics_;  // set before requests flow; loop thread updates
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_ENGINE_H_

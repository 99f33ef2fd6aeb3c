#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/clock.h"
#include "common/status.h"
#include "spdlog/spdlog.h"

namespace tandem::engine {

absl::StatusOr<SchedulerConfig> SchedulerConfigFromOptions(const ServingOptions& o,
                                                           const ModelConfig& model,
                                                           int64_t weight_bytes) {
  ASSIGN_OR_RETURN(const int64_t bytes, KvCacheBytes(o, TotalRamBytes(), weight_bytes));
  const int64_t per_block = model.num_layers * KvCacheStorage::BlockBytes(
                                                   o.page_size, model.num_kv_heads, model.head_dim);
  SchedulerConfig c;
  c.block_size = o.page_size;
  c.num_blocks = bytes / per_block;
  if (c.num_blocks < 1) {
    const std::string budget = o.mem_fraction_static > 0
                                   ? absl::StrCat("--mem-fraction-static ", o.mem_fraction_static)
                                   : absl::StrCat("--kv-cache-memory ", o.kv_cache_memory);
    return absl::InvalidArgumentError(absl::StrCat(
        budget, " (", bytes, " bytes for the KV cache) holds no KV block: one block of ",
        o.page_size, " tokens takes ", per_block, " bytes for this model"));
  }
  if (o.max_total_tokens > 0) {
    c.num_blocks =
        std::min<int64_t>(c.num_blocks, (o.max_total_tokens + o.page_size - 1) / o.page_size);
  }
  c.num_blocks = std::min<int64_t>(c.num_blocks, int64_t{1} << 30);
  c.max_running_requests = o.max_running_requests;
  c.chunked_prefill_size = o.chunked_prefill_size;
  c.max_prefill_tokens = o.max_prefill_tokens;
  c.max_queued_requests = o.max_queued_requests;
  c.context_length = o.context_length;
  c.enable_radix_cache = !o.disable_radix_cache;
  c.kv_events_buffer = static_cast<size_t>(o.kv_events_buffer);
  return c;
}

struct Engine::Metrics {
  Gauge* running;
  Gauge* waiting;
  Gauge* awaiting_kv;
  Gauge* held;
  Gauge* free_blocks;
  Gauge* total_blocks;
  Gauge* cached_blocks;
  Counter* prompt_tokens;
  Counter* cached_tokens;
  Counter* generated_tokens;
  Counter* preemptions;
  Counter* finished;
  Counter* aborted;
  Counter* radix_evicted;
  SchedulerCounters last;
  int64_t last_evicted = 0;

  // The same figures under SGLang's names (sglang:*, labelled model_name), so that dashboards
  // and alerts built on an SGLang server's /metrics read a Tandem worker unchanged.
  Gauge* sg_running;
  Gauge* sg_queue;
  Gauge* sg_used_tokens;
  Gauge* sg_token_usage;
  Gauge* sg_max_tokens;
  Gauge* sg_gen_throughput;
  Gauge* sg_cache_hit_rate;
  Counter* sg_prompt_tokens;
  Counter* sg_generation_tokens;
  // gen_throughput and cache_hit_rate are rates over windows of at least kRateWindow.
  std::chrono::steady_clock::time_point window_start;
  SchedulerCounters window_counters;
};

namespace {

constexpr std::chrono::seconds kRateWindow{1};

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const ServingOptions& options) {
  RETURN_IF_ERROR(ValidateServingOptions(options));
  ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::FromModelDir(options.model_path));
  ModelOptions mo;
  mo.threads = options.threads > 0
                   ? options.threads
                   : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ASSIGN_OR_RETURN(mo.quantization, ServingQuantization(options));
  ASSIGN_OR_RETURN(auto model, Model::Load(options.model_path, mo));
  if (options.quantization == "compressed-tensors" && !model->config().int8_checkpoint) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization compressed-tensors: ", options.model_path,
                     "/config.json has no compressed-tensors W8A8 int8 quantization_config (use "
                     "--quantization w8a8 to quantize this checkpoint at load)"));
  }
  ASSIGN_OR_RETURN(
      SchedulerConfig config,
      SchedulerConfigFromOptions(options, model->config(), model->weights().resident_bytes()));
  return Create(config, std::move(model), std::move(tokenizer), options.random_seed);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const SchedulerConfig& config,
                                                       std::unique_ptr<Model> model,
                                                       std::unique_ptr<Tokenizer> tokenizer,
                                                       std::optional<int64_t> random_seed) {
  ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(config, model.get(), tokenizer.get()));
  SchedulerConfig resolved = scheduler->config();
  return std::unique_ptr<Engine>(new Engine(resolved, std::move(model), std::move(tokenizer),
                                            std::move(scheduler), random_seed));
}

Engine::Engine(const SchedulerConfig& config, std::unique_ptr<Model> model,
               std::unique_ptr<Tokenizer> tokenizer, std::unique_ptr<Scheduler> scheduler,
               std::optional<int64_t> random_seed)
    : config_(config),
      model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      scheduler_(std::move(scheduler)),
      request_seeds_(std::make_unique<RequestSeeds>(
          random_seed ? std::optional<uint64_t>(static_cast<uint64_t>(*random_seed))
                      : std::nullopt)) {
  load_ = scheduler_->Load();
  loop_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> join(join_mu_);
  if (loop_.joinable()) loop_.join();
}

bool Engine::Post(std::function<void(Scheduler&)> command) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    inbox_.push_back(std::move(command));
  }
  cv_.notify_all();
  return true;
}

absl::Status Engine::Submit(Request request) {
  RETURN_IF_ERROR(scheduler_->Validate(request));  // reads only immutable configuration
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return absl::UnavailableError("the engine is shutting down");
    if (live_.count(request.rid)) {
      return absl::AlreadyExistsError(
          absl::StrCat("request '", request.rid, "' is already running"));
    }
    const int64_t capacity =
        int64_t{config_.max_running_requests} + int64_t{config_.max_queued_requests};
    if (static_cast<int64_t>(live_.size()) >= capacity) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the worker is full: ", live_.size(), " requests running or queued (",
                       "--max-running-requests ", config_.max_running_requests,
                       " + --max-queued-requests ", config_.max_queued_requests, ")"));
    }
    live_.insert(request.rid);
  }
  // The last output (or a held prefill-only request's release) ends the request's life here.
  auto user_output = std::move(request.callbacks.on_output);
  request.callbacks.on_output = [this, user_output](const RequestOutput& out) {
    if (user_output) user_output(out);
    if (out.last && !out.kv_held) {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(out.rid);
      load_stale_ = load_stale_ || live_.empty();  // WaitIdle waits for the snapshot
    }
  };
  const std::string rid = request.rid;
  const bool posted = Post([request = std::move(request)](Scheduler& s) mutable {
    const std::string rid = request.rid;
    auto on_output = request.callbacks.on_output;
    absl::Status st = s.Submit(std::move(request));
    if (!st.ok()) {
      RequestOutput out;
      out.rid = rid;
      out.last = true;
      out.finish = FinishReason::Abort(std::string(st.message()));
      on_output(out);
    }
  });
  if (!posted) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(rid);
    return absl::UnavailableError("the engine is shutting down");
  }
  return absl::OkStatus();
}

void Engine::Abort(const std::string& rid, const std::string& message) {
  Post([this, rid, message](Scheduler& s) {
    if (s.Abort(rid, message).ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      // A held prefill-only request emits nothing on abort: end its life here.
      live_.erase(rid);
      load_stale_ = load_stale_ || live_.empty();  // WaitIdle waits for the snapshot
    }
  });
}

void Engine::CompleteTransfer(const std::string& rid, SampleResult first,
                              std::function<void(absl::Status)> done) {
  Post([rid, first = std::move(first), done = std::move(done)](Scheduler& s) {
    absl::Status st = s.CompleteTransfer(rid, first);
    if (done) done(st);
  });
}

void Engine::ReleaseHeld(const std::string& rid) {
  Post([this, rid](Scheduler& s) {
    if (s.ReleaseHeld(rid).ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(rid);
      load_stale_ = load_stale_ || live_.empty();  // WaitIdle waits for the snapshot
    }
  });
}

absl::Status Engine::FlushCache() {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  if (!Post([this, promise](Scheduler& s) {
        absl::Status st = s.FlushCache();
        {
          // Callers read Load() right after a flush: refresh the snapshot before answering.
          std::lock_guard<std::mutex> lock(mu_);
          load_ = s.Load();
        }
        promise->set_value(st);
      })) {
    return absl::UnavailableError("the engine is shutting down");
  }
  return result.get();
}

SchedulerLoad Engine::Load() const {
  std::lock_guard<std::mutex> lock(mu_);
  return load_;
}

int64_t Engine::live_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(live_.size());
}

bool Engine::WaitIdle(double timeout_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                           [this] { return live_.empty() && !load_stale_; });
}

void Engine::Loop() {
  for (;;) {
    std::deque<std::function<void(Scheduler&)>> commands;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Idle, the loop still wakes every kRateWindow so that the rate gauges fall to 0.
      cv_.wait_for(lock, kRateWindow,
                   [this] { return stopping_ || !inbox_.empty() || scheduler_->HasWork(); });
      commands.swap(inbox_);
      stopping = stopping_;
    }
    for (auto& command : commands) command(*scheduler_);
    if (stopping) break;
    if (scheduler_->HasWork()) {
      step_started_ns_.store(MonoNowNs(), std::memory_order_relaxed);
      absl::StatusOr<StepStats> st = scheduler_->Step();
      if (st.ok()) {
        step_ended_ns_.store(MonoNowNs(), std::memory_order_relaxed);
      } else {
        step_started_ns_.store(0, std::memory_order_relaxed);  // no progress to report
        spdlog::error("engine step failed: {}", std::string(st.status().message()));
      }
    }
    UpdateMetrics();
  }
  // Shutdown: nothing more can be posted; run what was, then end every live request. No step
  // runs again: progress() reports none.
  step_started_ns_.store(0, std::memory_order_relaxed);
  step_ended_ns_.store(0, std::memory_order_relaxed);
  std::deque<std::function<void(Scheduler&)>> rest;
  std::vector<std::string> rids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(inbox_);
  }
  for (auto& command : rest) command(*scheduler_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    rids.assign(live_.begin(), live_.end());
  }
  for (const std::string& rid : rids) {
    (void)scheduler_->Abort(rid, "the engine is shutting down");
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_.clear();
  inbox_.clear();
  load_stale_ = false;
  idle_cv_.notify_all();
}

void Engine::ExportMetrics(MetricsRegistry* r, const std::string& model_name) {
  auto m = std::make_unique<Metrics>();
  m->running = &r->AddGauge("tandem_engine_running_requests", "Requests computing").Get();
  m->waiting = &r->AddGauge("tandem_engine_waiting_requests", "Requests queued").Get();
  m->awaiting_kv =
      &r->AddGauge("tandem_engine_awaiting_kv_requests", "Decode requests awaiting their KV").Get();
  m->held = &r->AddGauge("tandem_engine_held_requests", "Prefilled requests holding KV").Get();
  m->free_blocks = &r->AddGauge("tandem_engine_kv_free_blocks", "Free KV blocks").Get();
  m->total_blocks = &r->AddGauge("tandem_engine_kv_total_blocks", "KV blocks in the pool").Get();
  m->cached_blocks =
      &r->AddGauge("tandem_engine_radix_cached_blocks", "KV blocks held by the prefix cache").Get();
  m->prompt_tokens =
      &r->AddCounter("tandem_engine_prompt_tokens_total", "Prompt tokens admitted").Get();
  m->cached_tokens = &r->AddCounter("tandem_engine_cached_prompt_tokens_total",
                                    "Prompt tokens served by the prefix cache (hits)")
                          .Get();
  m->generated_tokens =
      &r->AddCounter("tandem_engine_generated_tokens_total", "Tokens generated").Get();
  m->preemptions = &r->AddCounter("tandem_engine_preemptions_total",
                                  "Requests preempted for KV memory (recomputed later)")
                        .Get();
  m->finished =
      &r->AddCounter("tandem_engine_finished_requests_total", "Requests that finished").Get();
  m->aborted =
      &r->AddCounter("tandem_engine_aborted_requests_total", "Requests that were aborted").Get();
  m->radix_evicted = &r->AddCounter("tandem_engine_radix_evicted_blocks_total",
                                    "KV blocks evicted from the prefix cache")
                          .Get();
  const std::vector<std::string> label = {"model_name"};
  auto sg_gauge = [&](const char* name, const char* help) {
    return &r->AddGauge(name, help, label).WithLabels({model_name});
  };
  auto sg_counter = [&](const char* name, const char* help) {
    return &r->AddCounter(name, help, label).WithLabels({model_name});
  };
  m->sg_running = sg_gauge("sglang:num_running_reqs", "The number of running requests");
  m->sg_queue = sg_gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue");
  m->sg_used_tokens = sg_gauge("sglang:num_used_tokens",
                               "The number of used tokens (KV slots not free or evictable)");
  m->sg_token_usage = sg_gauge("sglang:token_usage", "The token usage (used / max tokens)");
  m->sg_max_tokens =
      sg_gauge("sglang:max_total_num_tokens", "Maximum total number of tokens (KV slots)");
  m->sg_gen_throughput = sg_gauge("sglang:gen_throughput", "The generate throughput (token/s)");
  m->sg_cache_hit_rate = sg_gauge("sglang:cache_hit_rate", "The prefix cache hit rate");
  m->sg_prompt_tokens =
      sg_counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.");
  m->sg_generation_tokens =
      sg_counter("sglang:generation_tokens_total", "Number of generation tokens processed.");
  m->window_start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // The loop publishes after each step; until the first one the gauges must already show the
  // pool as it is (all blocks free), not 0 of 0.
  m->free_blocks->Set(static_cast<double>(load_.free_blocks));
  m->total_blocks->Set(static_cast<double>(load_.total_blocks));
  m->cached_blocks->Set(static_cast<double>(load_.cached_blocks));
  m->sg_max_tokens->Set(static_cast<double>(load_.total_blocks * config_.block_size));
  metrics_ = std::move(m);
}

void Engine::UpdateMetrics() {
  const SchedulerLoad load = scheduler_->Load();
  Metrics* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    m = metrics_.get();
  }
  if (m != nullptr) {
    m->running->Set(load.running);
    m->waiting->Set(load.waiting);
    m->awaiting_kv->Set(load.awaiting_kv);
    m->held->Set(load.held);
    m->free_blocks->Set(static_cast<double>(load.free_blocks));
    m->total_blocks->Set(static_cast<double>(load.total_blocks));
    m->cached_blocks->Set(static_cast<double>(load.cached_blocks));
    const SchedulerCounters& c = scheduler_->counters();
    m->prompt_tokens->Increment(static_cast<double>(c.prompt_tokens - m->last.prompt_tokens));
    m->cached_tokens->Increment(
        static_cast<double>(c.cached_prompt_tokens - m->last.cached_prompt_tokens));
    m->generated_tokens->Increment(
        static_cast<double>(c.generated_tokens - m->last.generated_tokens));
    m->preemptions->Increment(static_cast<double>(c.preemptions - m->last.preemptions));
    m->finished->Increment(static_cast<double>(c.finished_requests - m->last.finished_requests));
    m->aborted->Increment(static_cast<double>(c.aborted_requests - m->last.aborted_requests));
    m->sg_prompt_tokens->Increment(static_cast<double>(c.prompt_tokens - m->last.prompt_tokens));
    m->sg_generation_tokens->Increment(
        static_cast<double>(c.generated_tokens - m->last.generated_tokens));
    m->last = c;
    // SGLang's view of the pool: a slot is used unless it is free or the prefix cache could free
    // it now.
    const int64_t block = config_.block_size;
    const int64_t used =
        std::max<int64_t>(load.total_blocks - load.free_blocks - load.evictable_blocks, 0) * block;
    m->sg_running->Set(load.running);
    m->sg_queue->Set(load.waiting);
    m->sg_used_tokens->Set(static_cast<double>(used));
    m->sg_max_tokens->Set(static_cast<double>(load.total_blocks * block));
    m->sg_token_usage->Set(load.total_blocks > 0
                               ? static_cast<double>(used) /
                                     static_cast<double>(load.total_blocks * block)
                               : 0.0);
    const auto now = std::chrono::steady_clock::now();
    if (now - m->window_start >= kRateWindow) {
      const double seconds = std::chrono::duration<double>(now - m->window_start).count();
      const SchedulerCounters& w = m->window_counters;
      m->sg_gen_throughput->Set(static_cast<double>(c.generated_tokens - w.generated_tokens) /
                                seconds);
      // The share of the window's prompt tokens the prefix cache served; a window without a
      // prompt keeps the last rate, as SGLang keeps its last prefill batch's.
      if (const int64_t prompt = c.prompt_tokens - w.prompt_tokens; prompt > 0) {
        m->sg_cache_hit_rate->Set(
            static_cast<double>(c.cached_prompt_tokens - w.cached_prompt_tokens) /
            static_cast<double>(prompt));
      }
      m->window_start = now;
      m->window_counters = c;
    }
    if (const RadixCache::Stats* rs = scheduler_->radix_stats()) {
      m->radix_evicted->Increment(static_cast<double>(rs->evicted_blocks - m->last_evicted));
      m->last_evicted = rs->evicted_blocks;
    }
  }
  // Published after the metrics, so that whoever WaitIdle wakes reads them up to date too.
  std::lock_guard<std::mutex> lock(mu_);
  load_ = load;
  load_stale_ = false;
  if (live_.empty()) idle_cv_.notify_all();
}

}  // namespace tandem::engine

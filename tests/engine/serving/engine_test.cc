// Engine: the threaded wrapper a daemon uses: concurrent submits, outputs on the loop thread,
// refusal when full, aborts, shutdown with live requests, metrics.
#include "engine/engine.h"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

std::unique_ptr<Engine> NewEngine(const std::string& kv = "8MiB", int max_running = 16,
                                  int max_queued = 64) {
  ServingOptions o;
  o.model_path = ShippedModelDir();
  o.kv_cache_memory = kv;
  o.threads = 2;
  o.max_running_requests = max_running;
  o.max_queued_requests = max_queued;
  o.chunked_prefill_size = 64;
  o.max_prefill_tokens = 128;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return std::move(*e);
}

struct Sink {
  std::mutex mu;
  std::map<std::string, Collected> out;
};

Request Make(const std::string& rid, std::vector<int32_t> ids, int max_new, Sink* sink) {
  Request r;
  r.rid = rid;
  r.input_ids = std::move(ids);
  r.sampling.temperature = 0;
  r.sampling.max_new_tokens = max_new;
  r.sampling.ignore_eos = true;
  r.callbacks.on_output = [sink, rid](const RequestOutput& o) {
    std::lock_guard<std::mutex> lock(sink->mu);
    Collected& c = sink->out[rid];
    c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    c.text += o.text;
    c.last = o.last;
    if (o.finish) c.finish = o.finish;
    if (o.last) c.final_output = o;
  };
  return r;
}

TEST(EngineTest, KvMemoryBecomesBlocks) {
  auto e = NewEngine("8MiB");
  // 4 layers x 2 (K, V) x 16 tokens x 4 heads x 32 dims x 2 bytes = 32 KiB per block.
  EXPECT_EQ(e->config().num_blocks, 256);
  EXPECT_EQ(e->Load().total_blocks, 256);
  EXPECT_EQ(e->Load().free_blocks, 256);
  ServingOptions o;
  o.model_path = ShippedModelDir();
  o.kv_cache_memory = "1KiB";
  auto tiny = Engine::Create(o);
  ASSERT_FALSE(tiny.ok());
  EXPECT_NE(tiny.status().message().find("--kv-cache-memory"), std::string::npos);
  o.kv_cache_memory = "lots";
  EXPECT_NE(Engine::Create(o).status().message().find("--kv-cache-memory"), std::string::npos);
  o.model_path = "/nonexistent/model";
  EXPECT_NE(Engine::Create(o).status().message().find("/nonexistent/model"), std::string::npos);
}

TEST(EngineTest, ConcurrentSubmittersAllFinishWithTheSameTokensAsAlone) {
  auto e = NewEngine();
  Sink sink;
  std::mt19937 rng(9);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(RandomTokens(&rng, 5 + 11 * i % 150, 3000));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < 24; i += 4) {
        EXPECT_TRUE(
            e->Submit(Make("c" + std::to_string(i), prompts[static_cast<size_t>(i)], 10, &sink))
                .ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(e->WaitIdle(120));
  auto alone = NewEngine();
  Sink ref;
  for (int i = 0; i < 24; ++i) {
    ASSERT_TRUE(alone->Submit(Make("a", prompts[static_cast<size_t>(i)], 10, &ref)).ok());
    ASSERT_TRUE(alone->WaitIdle(60));
    std::lock_guard<std::mutex> lock(sink.mu);
    EXPECT_EQ(sink.out["c" + std::to_string(i)].tokens, ref.out["a"].tokens) << i;
    ref.out.clear();
  }
  ASSERT_TRUE(e->FlushCache().ok());
  const SchedulerLoad l = e->Load();
  EXPECT_EQ(l.free_blocks, l.total_blocks);
}

TEST(EngineTest, RefusesWhenFullAndDuplicateRids) {
  auto e = NewEngine("8MiB", /*max_running=*/1, /*max_queued=*/1);
  Sink sink;
  ASSERT_TRUE(e->Submit(Make("one", {1, 2, 3}, 100, &sink)).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(e->Submit(Make("one", {4}, 1, &sink))));
  ASSERT_TRUE(e->Submit(Make("two", {1, 2, 3}, 100, &sink)).ok());
  absl::Status full = e->Submit(Make("three", {1}, 1, &sink));
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_NE(full.message().find("--max-queued-requests"), std::string::npos);
  e->Abort("one", "done");
  e->Abort("two", "done");
  ASSERT_TRUE(e->WaitIdle(60));
  std::lock_guard<std::mutex> lock(sink.mu);
  EXPECT_TRUE(sink.out["one"].last);
  EXPECT_TRUE(sink.out["two"].last);
  EXPECT_EQ(sink.out.count("three"), 0u);
}

TEST(EngineTest, ShutdownAbortsLiveRequestsAndRefusesNewOnes) {
  auto e = NewEngine();
  Sink sink;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(e->Submit(Make("s" + std::to_string(i), {1, 2, 3, 4}, 400, &sink)).ok());
  }
  e->Shutdown();
  EXPECT_TRUE(absl::IsUnavailable(e->Submit(Make("late", {1}, 1, &sink))));
  std::lock_guard<std::mutex> lock(sink.mu);
  for (int i = 0; i < 8; ++i) {
    const Collected& c = sink.out["s" + std::to_string(i)];
    ASSERT_TRUE(c.last) << i;
    EXPECT_EQ(c.finish->kind, FinishReason::Kind::kAbort);
    EXPECT_EQ(c.finish->message, "the engine is shutting down");
  }
}

// Polls `registry` until its text holds `line` (the loop publishes rates once a second).
bool EventuallyShows(const MetricsRegistry& registry, const std::string& line) {
  for (int i = 0; i < 500; ++i) {
    if (registry.Render().find(line) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(EngineTest, MetricsFollowTheWork) {
  auto e = NewEngine();
  MetricsRegistry registry;
  e->ExportMetrics(&registry, "tiny");
  const std::string pool_tokens = std::to_string(256 * e->config().block_size);
  // Before any request the pool shows as it is (every block free), not as 0 of 0.
  const std::string idle = registry.Render();
  EXPECT_NE(idle.find("tandem_engine_kv_total_blocks 256"), std::string::npos) << idle;
  EXPECT_NE(idle.find("tandem_engine_kv_free_blocks 256"), std::string::npos) << idle;
  EXPECT_NE(idle.find("sglang:max_total_num_tokens{model_name=\"tiny\"} " + pool_tokens),
            std::string::npos)
      << idle;
  Sink sink;
  std::vector<int32_t> prompt(40, 11);
  ASSERT_TRUE(e->Submit(Make("m1", prompt, 5, &sink)).ok());
  ASSERT_TRUE(e->WaitIdle(60));
  ASSERT_TRUE(e->Submit(Make("m2", prompt, 5, &sink)).ok());
  ASSERT_TRUE(e->WaitIdle(60));
  // WaitIdle returns once the metrics, too, show the finished work.
  const std::string text = registry.Render();
  EXPECT_NE(text.find("tandem_engine_generated_tokens_total 10"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_engine_prompt_tokens_total 80"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_engine_cached_prompt_tokens_total 32"), std::string::npos) << text;
  EXPECT_NE(text.find("tandem_engine_kv_total_blocks 256"), std::string::npos) << text;
  // SGLang's names for the same figures. The prompt's cached blocks are evictable: not used.
  for (const std::string line : {"sglang:generation_tokens_total{model_name=\"tiny\"} 10",
                                 "sglang:prompt_tokens_total{model_name=\"tiny\"} 80",
                                 "sglang:num_running_reqs{model_name=\"tiny\"} 0",
                                 "sglang:num_queue_reqs{model_name=\"tiny\"} 0",
                                 "sglang:num_used_tokens{model_name=\"tiny\"} 0",
                                 "sglang:token_usage{model_name=\"tiny\"} 0"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  // Rates over the last second: 32 of the 80 prompt tokens came from the cache; an idle engine
  // generates nothing.
  EXPECT_TRUE(EventuallyShows(registry, "sglang:cache_hit_rate{model_name=\"tiny\"} 0.4"))
      << registry.Render();
  EXPECT_TRUE(EventuallyShows(registry, "sglang:gen_throughput{model_name=\"tiny\"} 0\n"))
      << registry.Render();
}

}  // namespace
}  // namespace tandem::engine::testing

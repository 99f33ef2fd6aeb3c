// Shared fixtures for the serving-engine tests: the shipped model, loaded once per process, and
// helpers that run requests through a Scheduler until they end.
#ifndef TANDEM_TESTS_ENGINE_SERVING_TEST_ENV_H_
#define TANDEM_TESTS_ENGINE_SERVING_TEST_ENV_H_

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/model.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine::testing {

std::string ShippedModelDir();
Model& SharedModel();
const Tokenizer& SharedTokenizer();

// What a request produced, gathered from its outputs.
struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  int outputs = 0;
  bool last = false;
  bool kv_held = false;
  std::optional<FinishReason> finish;
  RequestOutput final_output;
};

// A request whose outputs land in `sink`.
Request MakeRequest(const std::string& rid, std::vector<int32_t> input_ids, int max_new_tokens,
                    std::map<std::string, Collected>* sink, float temperature = 0.0f,
                    uint64_t seed = 0);

// Steps until nothing is left to run (bounded); fails the test on a step error or a broken
// block invariant after any step.
void RunToIdle(Scheduler* s, int max_steps = 100000);

// Random token ids in [lo, vocab) (avoids the special tokens at the top of the vocabulary).
std::vector<int32_t> RandomTokens(std::mt19937* rng, int n, int vocab_limit);

SchedulerConfig SmallConfig(int64_t num_blocks, int block_size = 16);

// Copies positions [begin, end) of one layer from one engine's cache into another's blocks.
void CopyLayer(const KvCacheStorage& from, std::span<const int32_t> from_blocks, KvCacheStorage* to,
               std::span<const int32_t> to_blocks, int64_t layer, int64_t begin, int64_t end);

}  // namespace tandem::engine::testing

#endif  // TANDEM_TESTS_ENGINE_SERVING_TEST_ENV_H_

#include "tests/engine/serving/test_env.h"

#include <cstring>
#include <filesystem>

#include "gtest/gtest.h"

namespace tandem::engine::testing {

std::string ShippedModelDir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "models/tandem-tiny-english").string();
}

Model& SharedModel() {
  static Model* model = [] {
    auto m = Model::Load(ShippedModelDir(), {.threads = 2});
    if (!m.ok()) {
      ADD_FAILURE() << m.status();
      std::abort();
    }
    return m->release();
  }();
  return *model;
}

const Tokenizer& SharedTokenizer() {
  static Tokenizer* tokenizer = [] {
    auto t = Tokenizer::FromModelDir(ShippedModelDir());
    if (!t.ok()) {
      ADD_FAILURE() << t.status();
      std::abort();
    }
    return t->release();
  }();
  return *tokenizer;
}

Request MakeRequest(const std::string& rid, std::vector<int32_t> input_ids, int max_new_tokens,
                    std::map<std::string, Collected>* sink, float temperature, uint64_t seed) {
  Request r;
  r.rid = rid;
  r.input_ids = std::move(input_ids);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.sampling.max_new_tokens = max_new_tokens;
  r.sampling.ignore_eos = true;
  r.return_logprob = true;
  r.callbacks.on_output = [sink, rid](const RequestOutput& out) {
    Collected& c = (*sink)[rid];
    EXPECT_FALSE(c.last) << rid << ": output after the last one";
    EXPECT_EQ(out.rid, rid);
    c.tokens.insert(c.tokens.end(), out.token_ids.begin(), out.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
    c.text += out.text;
    ++c.outputs;
    c.last = out.last;
    c.kv_held = out.kv_held;
    if (out.finish) c.finish = out.finish;
    if (out.last) c.final_output = out;
  };
  return r;
}

void RunToIdle(Scheduler* s, int max_steps) {
  for (int i = 0; i < max_steps && s->HasWork(); ++i) {
    auto st = s->Step();
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_TRUE(s->CheckInvariants().ok()) << s->CheckInvariants();
  }
  ASSERT_FALSE(s->HasWork()) << "still busy after " << max_steps << " steps";
}

std::vector<int32_t> RandomTokens(std::mt19937* rng, int n, int vocab_limit) {
  std::uniform_int_distribution<int32_t> d(0, vocab_limit - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(*rng);
  return v;
}

SchedulerConfig SmallConfig(int64_t num_blocks, int block_size) {
  SchedulerConfig c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.max_running_requests = 64;
  c.chunked_prefill_size = 48;
  c.max_prefill_tokens = 96;
  c.max_queued_requests = 1024;
  return c;
}

// Copies positions [begin, end) of one layer from one engine's cache into another's blocks.
void CopyLayer(const KvCacheStorage& from, std::span<const int32_t> from_blocks, KvCacheStorage* to,
               std::span<const int32_t> to_blocks, int64_t layer, int64_t begin, int64_t end) {
  const int64_t bs = from.block_size();
  const size_t row = static_cast<size_t>(from.num_kv_heads() * from.head_dim()) * sizeof(bf16);
  for (int64_t p = begin; p < end; ++p) {
    const int64_t fb = from_blocks[static_cast<size_t>(p / bs)];
    const int64_t tb = to_blocks[static_cast<size_t>(p / bs)];
    std::memcpy(to->K(layer, tb, p % bs), from.K(layer, fb, p % bs), row);
    std::memcpy(to->V(layer, tb, p % bs), from.V(layer, fb, p % bs), row);
  }
}

}  // namespace tandem::engine::testing

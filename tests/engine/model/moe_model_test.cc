// Qwen3-MoE through the model: the qwen3_moe config keys, routing (softmax, top k, ties,
// renormalisation), the expert weights in bf16 and int8, and a token's logits independent of its
// batch, its prefill chunking and the thread count (docs/numerics.md "Mixture of experts"); the
// experts of few rows (run together, moe.h) give the bits of the experts run one by one.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/model.h"
#include "engine/moe.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/test_util.h"

namespace tandem::engine {
namespace {

namespace fs = std::filesystem;

std::string ModelDir(const std::string& name) {
  return (fs::path(TANDEM_SOURCE_DIR) / "tests/engine/models" / name).string();
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Model> Load(const std::string& dir, Quantization q, int threads = 2) {
  auto m = Model::Load(dir, {.threads = threads, .quantization = q});
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  // The tiny model's matmuls are below the pool's work threshold: force the split so the
  // thread-count and batch tests really run on several threads.
  (*m)->pool()->set_min_parallel_work(0);
  return std::move(*m);
}

std::vector<int32_t> Tokens(int n, uint32_t seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((seed * 2654435761u + i * 40503u) % 3000);
  return t;
}

std::vector<int32_t> Slice(const std::vector<int32_t>& v, size_t b, size_t e) {
  return std::vector<int32_t>(v.begin() + b, v.begin() + e);
}

// Runs batches through one KV cache: each Step appends each entry's tokens to its table and
// returns the logits of each entry's last token.
class Runner {
 public:
  explicit Runner(Model* model) : model_(model), pool_(128, 16) {
    kv_ = *model->CreateKvCache(pool_.num_blocks(), 16);
  }
  std::vector<std::vector<float>> Step(
      const std::vector<std::pair<BlockTable*, std::vector<int32_t>>>& entries) {
    std::vector<BlockPool::AppendRequest> reqs;
    std::vector<int64_t> starts;
    for (const auto& [t, toks] : entries) {
      reqs.push_back({t, static_cast<int64_t>(toks.size())});
      starts.push_back(t->num_tokens);
    }
    auto plan = pool_.PlanAppend(reqs);
    EXPECT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE(pool_.Commit(*plan).ok());
    std::vector<SequenceInput> batch;
    for (size_t i = 0; i < entries.size(); ++i) {
      batch.push_back({entries[i].second, starts[i], entries[i].first->block_ids, true});
    }
    auto logits = model_->Forward(batch, kv_.get());
    EXPECT_TRUE(logits.ok()) << logits.status();
    const size_t V = static_cast<size_t>(model_->config().vocab_size);
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < entries.size(); ++i) {
      out.emplace_back(logits->begin() + i * V, logits->begin() + (i + 1) * V);
    }
    return out;
  }

 private:
  Model* model_;
  BlockPool pool_;
  std::unique_ptr<KvCacheStorage> kv_;
};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(MoeConfigTest, Qwen3MoeKeysAndSparseLayers) {
  const std::string path = ModelDir("qwen3-moe-tiny") + "/config.json";
  const nlohmann::json base = nlohmann::json::parse(ReadText(path));
  auto c = ModelConfig::FromJsonText(base.dump(), path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.num_experts_per_tok, 2);
  EXPECT_EQ(c->moe.moe_intermediate_size, 48);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_TRUE(c->IsMoeLayer(0));
  EXPECT_FALSE(c->IsMoeLayer(1));  // mlp_only_layers: [1]
  EXPECT_TRUE(c->IsMoeLayer(2));

  nlohmann::json j = base;
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = nlohmann::json::array();
  j.erase("norm_topk_prob");  // HF's default: false
  c = ModelConfig::FromJsonText(j.dump(), path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->moe.norm_topk_prob);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
  // A dense model has no sparse layer.
  j = base;
  j["model_type"] = "qwen3";
  c = ModelConfig::FromJsonText(j.dump(), path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->IsMoeLayer(0));

  struct Bad {
    const char* key;
    nlohmann::json value;  // null: the key removed
    const char* message;
  };
  const Bad bad[] = {
      {"num_experts", nullptr, "missing field 'num_experts'"},
      {"moe_intermediate_size", nullptr, "missing field 'moe_intermediate_size'"},
      {"num_experts_per_tok", 9, "num_experts_per_tok must be in [1, num_experts = 8], got 9"},
      {"num_experts", 0, "num_experts must be in [1, 4096], got 0"},
      {"decoder_sparse_step", 0, "decoder_sparse_step must be positive"},
      {"mlp_only_layers", nlohmann::json::array({3}), "mlp_only_layers entry 3 is not a layer"},
      {"mlp_only_layers", "1", "field 'mlp_only_layers' must be a list"},
      {"norm_topk_prob", 1, "field 'norm_topk_prob' must be a boolean"},
  };
  for (const Bad& b : bad) {
    j = base;
    if (b.value.is_null()) {
      j.erase(b.key);
    } else {
      j[b.key] = b.value;
    }
    auto r = ModelConfig::FromJsonText(j.dump(), path);
    ASSERT_FALSE(r.ok()) << b.key;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.message), std::string::npos) << r.status();
  }
}

// A compressed-tensors config may leave the routers unquantized by name; nothing else but lm_head.
TEST(MoeConfigTest, CompressedTensorsIgnoreMayNameRouterGates) {
  const std::string path = ModelDir("qwen3-moe-tiny-w8a8") + "/config.json";
  const nlohmann::json base = nlohmann::json::parse(ReadText(path));
  ASSERT_EQ(base["quantization_config"]["ignore"],
            nlohmann::json::array({"lm_head", "re:.*mlp.gate$"}));
  nlohmann::json j = base;
  j["quantization_config"]["ignore"] =
      nlohmann::json::array({"lm_head", "model.layers.0.mlp.gate", "model.layers.2.mlp.gate"});
  auto c = ModelConfig::FromJsonText(j.dump(), path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->int8_checkpoint);
  for (const char* bad : {"model.layers.x.mlp.gate", "model.layers.0.mlp.experts.0.gate_proj",
                          "re:.*mlp.gate_proj$", "model.layers..mlp.gate"}) {
    j["quantization_config"]["ignore"] = nlohmann::json::array({"lm_head", bad});
    c = ModelConfig::FromJsonText(j.dump(), path);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("unsupported ignore entry"), std::string::npos)
        << c.status();
  }
}

TEST(MoeRoutingTest, SoftmaxTopKTiesAndRenormalisation) {
  // Logits ln(1), ln(4), ln(2), ln(4), ln(1): probabilities 1/12, 4/12, 2/12, 4/12, 1/12.
  const float logits[] = {0.0f, std::log(4.0f), std::log(2.0f), std::log(4.0f), 0.0f};
  float probs[5];
  int32_t experts[3];
  float weights[3];
  std::copy(logits, logits + 5, probs);
  RouteToken(probs, 5, 3, /*normalize=*/false, experts, weights);
  // The tie between experts 1 and 3 goes to the lower index.
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 3);
  EXPECT_EQ(experts[2], 2);
  EXPECT_NEAR(weights[0], 4.0 / 12, 1e-6);
  EXPECT_NEAR(weights[2], 2.0 / 12, 1e-6);
  float sum = 0;
  for (float p : probs) sum += p;
  EXPECT_NEAR(sum, 1.0f, 1e-6f);

  std::copy(logits, logits + 5, probs);
  RouteToken(probs, 5, 3, /*normalize=*/true, experts, weights);
  EXPECT_NEAR(weights[0], 0.4, 1e-6);
  EXPECT_NEAR(weights[1], 0.4, 1e-6);
  EXPECT_NEAR(weights[2], 0.2, 1e-6);

  // All equal: the first k experts, equal weights.
  float flat[4] = {0.5f, 0.5f, 0.5f, 0.5f};
  RouteToken(flat, 4, 2, true, experts, weights);
  EXPECT_EQ(experts[0], 0);
  EXPECT_EQ(experts[1], 1);
  EXPECT_EQ(weights[0], 0.5f);
}

TEST(MoeModelTest, ExpertsLoadedAndActiveBytesCountTopKExperts) {
  auto model = Load(ModelDir("qwen3-moe-tiny"), Quantization::kNone);
  ASSERT_TRUE(model);
  const ModelConfig& c = model->config();
  const Weights& w = model->weights();
  ASSERT_EQ(w.layers.size(), 3u);
  for (int l : {0, 2}) {
    const LayerWeights& L = w.layers[l];
    EXPECT_NE(L.router, nullptr);
    EXPECT_EQ(L.w_gate_up, nullptr);
    ASSERT_EQ(L.experts.size(), 8u);
    for (const ExpertWeights& x : L.experts) {
      EXPECT_NE(x.w_gate_up, nullptr);
      if (x.w_gate_up_layout == WeightLayout::kOnednn) {
        EXPECT_EQ(x.w_up, nullptr);  // blocks span gate and up rows (weights.h)
      } else {
        EXPECT_EQ(x.w_up, x.w_gate_up + 0 + 48 * 64);  // the up rows follow the gate rows
      }
      EXPECT_NE(x.w_down, nullptr);
    }
  }
  EXPECT_TRUE(w.layers[1].experts.empty());
  EXPECT_EQ(w.layers[1].router, nullptr);
  EXPECT_NE(w.layers[1].w_gate_up, nullptr);
  // bf16: attention 4 matrices, the dense layer's MLP, each sparse layer's router and experts.
  const int64_t h = c.hidden_size, attn = 2 * h * (2 * c.q_dim() + 2 * c.kv_dim());
  const int64_t expert = 2 * 3 * h * 48, router = 2 * 8 * h, lm = 2 * c.vocab_size * h;
  EXPECT_EQ(w.matrix_bytes_per_step(), lm + 3 * attn + 2 * 3 * h * 192 + 2 * (router + 8 * expert));
  EXPECT_EQ(w.active_matrix_bytes_per_token(),
            lm + 3 * attn + 2 * 3 * h * 192 + 2 * (router + 2 * expert));
}

// The property PD == colocated and continuous batching rest on: a token's logits are the same bits
// alone, batched with prefills and decodes of other sequences in any order, chunked, and on any
// thread count.
void ExpectBatchIndependent(const std::string& dir, Quantization q) {
  auto model = Load(dir, q, 3);
  ASSERT_TRUE(model);
  const auto a = Tokens(36, 1), b = Tokens(80, 2), c = Tokens(20, 3);
  Runner alone_run(model.get());
  BlockTable ta;
  std::vector<std::vector<float>> alone;
  alone.push_back(alone_run.Step({{&ta, Slice(a, 0, 30)}})[0]);
  for (int i = 30; i < 36; ++i) alone.push_back(alone_run.Step({{&ta, Slice(a, i, i + 1)}})[0]);

  Runner mixed_run(model.get());
  BlockTable ta2, tb, tc;
  mixed_run.Step({{&tc, Slice(c, 0, 14)}});
  std::vector<std::vector<float>> mixed;
  mixed.push_back(mixed_run.Step({{&tb, Slice(b, 0, 33)}, {&ta2, Slice(a, 0, 30)}})[1]);
  for (int i = 30; i < 36; ++i) {
    const int k = i - 30;
    std::vector<std::pair<BlockTable*, std::vector<int32_t>>> entries;
    if (k % 2 == 0) entries.push_back({&tc, Slice(c, 14 + k / 2, 15 + k / 2)});
    entries.push_back({&ta2, Slice(a, i, i + 1)});
    if (k < 4) entries.push_back({&tb, Slice(b, 33 + 11 * k, 44 + 11 * k)});
    mixed.push_back(mixed_run.Step(entries)[k % 2 == 0 ? 1 : 0]);
  }
  ASSERT_EQ(alone.size(), mixed.size());
  for (size_t i = 0; i < alone.size(); ++i) EXPECT_TRUE(BitwiseEqual(alone[i], mixed[i])) << i;

  // Prefill in chunks == in one piece == with one thread.
  Runner chunk_run(model.get());
  BlockTable tch;
  chunk_run.Step({{&tch, Slice(a, 0, 7)}});
  chunk_run.Step({{&tch, Slice(a, 7, 19)}});
  EXPECT_TRUE(BitwiseEqual(chunk_run.Step({{&tch, Slice(a, 19, 30)}})[0], alone[0]));
  auto one_thread = Load(dir, q, 1);
  ASSERT_TRUE(one_thread);
  Runner single(one_thread.get());
  BlockTable ts;
  EXPECT_TRUE(BitwiseEqual(single.Step({{&ts, Slice(a, 0, 30)}})[0], alone[0]));
}

TEST(MoeModelTest, LogitsIndependentOfBatchChunkingAndThreads) {
  ExpectBatchIndependent(ModelDir("qwen3-moe-tiny"), Quantization::kNone);
}

TEST(Int8MoeModelTest, LogitsIndependentOfBatchChunkingAndThreads) {
  ExpectBatchIndependent(ModelDir("qwen3-moe-tiny"), Quantization::kW8A8);
}

// MoeForward on a sparse layer: each token alone (every expert has one row: the shared
// dispatches) and all tokens in one call (experts of one to a few rows: shared too) give the bits
// of the token's row repeated past kMoeSharedDispatchMaxRows in one call (every expert run on its
// own, each matmul split over the threads), on 1 to 4 threads.
void ExpectSharedDispatchMatchesExpertsOneByOne(Quantization q) {
  auto model = Load(ModelDir("qwen3-moe-tiny"), q);
  ASSERT_TRUE(model);
  const ModelConfig& c = model->config();
  ASSERT_TRUE(c.IsMoeLayer(2));
  const LayerWeights& w = model->weights().layers[2];
  const int64_t h = c.hidden_size, T = 6, repeats = kMoeSharedDispatchMaxRows + 1;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> xs(T * h);
  for (auto& v : xs) v = F32ToBf16(normal(rng));
  MoeScratch s;
  s.Reserve(c, repeats);

  // Reference: each token's row `repeats` times, one thread.
  ThreadPool one(1);
  std::vector<std::vector<float>> ref;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<bf16> rows;
    for (int64_t r = 0; r < repeats; ++r) rows.insert(rows.end(), &xs[t * h], &xs[(t + 1) * h]);
    std::vector<float> out(repeats * h);
    EXPECT_EQ(MoeForward(c, w, rows.data(), h, repeats, &s, &one, out.data()),
              c.moe.num_experts_per_tok);
    EXPECT_EQ(std::memcmp(out.data(), out.data() + (repeats - 1) * h, h * sizeof(float)), 0);
    ref.emplace_back(out.begin(), out.begin() + h);
  }
  for (int threads = 1; threads <= 4; ++threads) {
    ThreadPool pool(threads);
    pool.set_min_parallel_work(0);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> out(h);
      EXPECT_EQ(MoeForward(c, w, xs.data() + t * h, h, 1, &s, &pool, out.data()),
                c.moe.num_experts_per_tok);
      EXPECT_TRUE(BitwiseEqual(out, ref[t])) << "token " << t << ", " << threads << " threads";
    }
    std::vector<float> all(T * h);
    MoeForward(c, w, xs.data(), h, T, &s, &pool, all.data());
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_TRUE(
          BitwiseEqual(std::vector<float>(all.begin() + t * h, all.begin() + (t + 1) * h), ref[t]))
          << "token " << t << " in the batch, " << threads << " threads";
    }
  }
}

TEST(MoeModelTest, SharedDispatchMatchesExpertsRunOneByOne) {
  ExpectSharedDispatchMatchesExpertsOneByOne(Quantization::kNone);
}

TEST(Int8MoeModelTest, SharedDispatchMatchesExpertsRunOneByOne) {
  ExpectSharedDispatchMatchesExpertsOneByOne(Quantization::kW8A8);
}

// tools/make_synthetic_model --moe --w8a8 quantizes the experts as the engine does at load and
// keeps the router bf16 (named in the config's ignore list), so both load the same weights.
TEST(Int8MoeModelTest, CheckpointLoadsAsQuantizationAtLoad) {
  auto from_bf16 = Load(ModelDir("qwen3-moe-tiny"), Quantization::kW8A8);
  auto checkpoint = Load(ModelDir("qwen3-moe-tiny-w8a8"), Quantization::kNone);
  auto bf16 = Load(ModelDir("qwen3-moe-tiny"), Quantization::kNone);
  ASSERT_TRUE(from_bf16 && checkpoint && bf16);
  ASSERT_TRUE(checkpoint->config().int8_checkpoint);
  for (int l : {0, 2}) {
    const LayerWeights& a = from_bf16->weights().layers[l];
    const LayerWeights& b = checkpoint->weights().layers[l];
    ASSERT_NE(b.router, nullptr);
    EXPECT_EQ(std::memcmp(a.router, b.router, 8 * 64 * sizeof(bf16)), 0);
    ASSERT_EQ(a.experts.size(), b.experts.size());
    for (size_t e = 0; e < a.experts.size(); ++e) {
      EXPECT_EQ(a.experts[e].w_gate_up, nullptr);
      for (auto [x, y] : {std::pair{&a.experts[e].w_gate_up_i8, &b.experts[e].w_gate_up_i8},
                          std::pair{&a.experts[e].w_down_i8, &b.experts[e].w_down_i8}}) {
        ASSERT_EQ(x->n, y->n);
        ASSERT_EQ(x->k, y->k);
        EXPECT_EQ(std::memcmp(x->data, y->data, Int8PackedBytes(x->n, x->k)), 0);
        EXPECT_EQ(std::memcmp(x->scales, y->scales, x->n * sizeof(float)), 0);
      }
      EXPECT_EQ(a.experts[e].w_gate_up_i8.n, 2 * 48);
    }
  }
  EXPECT_LT(checkpoint->weights().active_matrix_bytes_per_token(),
            bf16->weights().active_matrix_bytes_per_token());
  const auto prompt = Tokens(40, 7);
  Runner ra(from_bf16.get()), rb(checkpoint.get()), rc(bf16.get());
  BlockTable ta, tb, tc;
  const auto x = ra.Step({{&ta, prompt}})[0];
  EXPECT_TRUE(BitwiseEqual(x, rb.Step({{&tb, prompt}})[0]));
  EXPECT_FALSE(BitwiseEqual(x, rc.Step({{&tc, prompt}})[0])) << "the int8 path did not run";
}

// norm_topk_prob is read: the same weights without renormalisation give other logits.
TEST(MoeModelTest, NormTopkProbChangesTheMixture) {
  const std::string dir = testing::MakeTempDir("moe_no_norm");
  fs::copy_file(ModelDir("qwen3-moe-tiny") + "/model.safetensors", dir + "/model.safetensors");
  nlohmann::json j = nlohmann::json::parse(ReadText(ModelDir("qwen3-moe-tiny") + "/config.json"));
  j["norm_topk_prob"] = false;
  testing::WriteFile(dir + "/config.json", j.dump());
  auto norm = Load(ModelDir("qwen3-moe-tiny"), Quantization::kNone);
  auto plain = Load(dir, Quantization::kNone);
  ASSERT_TRUE(norm && plain);
  Runner rn(norm.get()), rp(plain.get());
  BlockTable tn, tp;
  const auto prompt = Tokens(5, 3);
  EXPECT_FALSE(BitwiseEqual(rn.Step({{&tn, prompt}})[0], rp.Step({{&tp, prompt}})[0]));
}

// A missing expert tensor is named.
TEST(MoeModelTest, MissingExpertIsNamed) {
  const std::string dir = testing::MakeTempDir("moe_missing_expert");
  fs::copy_file(ModelDir("qwen3-moe-tiny") + "/model.safetensors", dir + "/model.safetensors");
  nlohmann::json j = nlohmann::json::parse(ReadText(ModelDir("qwen3-moe-tiny") + "/config.json"));
  j["num_experts"] = 9;
  testing::WriteFile(dir + "/config.json", j.dump());
  auto m = Model::Load(dir, {.threads = 1});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.0.mlp.gate.weight"), std::string::npos)
      << m.status();
  j["num_experts"] = 8;
  j["mlp_only_layers"] = nlohmann::json::array();  // layer 1 has no experts
  testing::WriteFile(dir + "/config.json", j.dump());
  m = Model::Load(dir, {.threads = 1});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("model.layers.1.mlp.gate.weight"), std::string::npos)
      << m.status();
}

}  // namespace
}  // namespace tandem::engine

#include "engine/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/attention.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_int8.h"
#include "engine/moe.h"
#include "engine/ops.h"

namespace tandem::engine {
namespace {

// Adds the time since the previous Lap to *slot when profiling (a no-op otherwise).
class PhaseTimer {
 public:
  explicit PhaseTimer(bool on) : on_(on) {
    if (on_) last_ = std::chrono::steady_clock::now();
  }
  void Lap(double* slot) {
    if (!on_) return;
    const auto now = std::chrono::steady_clock::now();
    *slot += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace

// Activations of one batch. Sized for the largest batch seen so far; grown only at the start of
// Forward, never inside the layer loop.
struct Model::RunState {
  int64_t capacity = 0;                      // tokens
  int64_t logit_capacity = 0;                // rows
  std::vector<int64_t> positions;            // [T]
  std::vector<const int32_t*> block_tables;  // [T] -> the token's sequence's block ids
  std::vector<float> cos, sin;               // [T, head_dim / 2]
  std::vector<float> x;                      // [T, hidden] residual stream
  std::vector<bf16> xb;                      // [T, max(hidden, q_dim, intermediate)]
  std::vector<float> qkv;                    // [T, q_dim + 2 kv_dim]: q | k | v per token
  std::vector<float> att;                    // [T, n_heads * head_dim]
  std::vector<float> proj;                   // [T, hidden] o_proj / down_proj output
  std::vector<float> gate_up;                // [T, 2 intermediate]: gate | up per token
  std::vector<int64_t> logit_rows;           // [R] token index of each wanted row
  std::vector<bf16> xl;                      // [R, hidden] final-normed rows, bf16
  std::vector<float> logits;                 // [R, vocab]
  MoeScratch moe;                            // mixture-of-experts layers (qwen3_moe)
  int64_t xb_stride = 0;

  void Reserve(const ModelConfig& c, int64_t tokens, int64_t rows) {
    if (tokens > capacity) {
      capacity = tokens;
      const auto T = static_cast<size_t>(tokens);
      xb_stride = std::max({c.hidden_size, c.q_dim(), c.intermediate_size});
      positions.resize(T);
      block_tables.resize(T);
      cos.resize(T * c.head_dim / 2);
      sin.resize(T * c.head_dim / 2);
      x.resize(T * c.hidden_size);
      xb.resize(T * xb_stride);
      qkv.resize(T * (c.q_dim() + 2 * c.kv_dim()));
      att.resize(T * c.q_dim());
      proj.resize(T * c.hidden_size);
      gate_up.resize(T * 2 * c.intermediate_size);
      moe.Reserve(c, tokens);
    }
    if (rows > logit_capacity) {
      logit_capacity = rows;
      xl.resize(static_cast<size_t>(rows * c.hidden_size));
      logits.resize(static_cast<size_t>(rows * c.vocab_size));
    }
    logit_rows.clear();
  }
};

absl::StatusOr<Quantization> ParseQuantization(std::string_view name) {
  if (name.empty() || name == "none") return Quantization::kNone;
  if (name == "w8a8" || name == "w8a8_int8") return Quantization::kW8A8;
  return absl::InvalidArgumentError(absl::StrCat("unsupported quantization '", std::string(name),
                                                 "' (supported: w8a8, w8a8_int8, none)"));
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& model_dir,
                                                   const ModelOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfig::FromFile(model_dir + "/config.json"));
  ASSIGN_OR_RETURN(std::unique_ptr<Weights> weights,
                   Weights::Load(model_dir, config, options.quantization == Quantization::kW8A8));
  return std::make_unique<Model>(std::move(config), std::move(weights), options);
}

Model::Model(ModelConfig config, std::unique_ptr<Weights> weights, const ModelOptions& options)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      pool_(options.threads),
      inv_freq_(RopeInvFrequencies(config_)),
      rs_(std::make_unique<RunState>()),
      profiling_(options.profile) {}

Model::~Model() = default;

absl::StatusOr<std::unique_ptr<KvCacheStorage>> Model::CreateKvCache(int64_t num_blocks,
                                                                     int64_t block_size) const {
  return KvCacheStorage::Create(config_.num_layers, num_blocks, block_size, config_.num_kv_heads,
                                config_.head_dim);
}

absl::Status Model::Validate(const std::vector<SequenceInput>& batch,
                             const KvCacheStorage& cache) const {
  if (batch.empty()) return absl::InvalidArgumentError("empty batch");
  if (cache.num_layers() != config_.num_layers || cache.num_kv_heads() != config_.num_kv_heads ||
      cache.head_dim() != config_.head_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache shaped for ", cache.num_layers(), " layers x ", cache.num_kv_heads(),
                     " kv heads x ", cache.head_dim(), " head_dim, model has ", config_.num_layers,
                     " x ", config_.num_kv_heads, " x ", config_.head_dim));
  }
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceInput& in = batch[s];
    const std::string where = absl::StrCat("batch sequence ", s, ": ");
    if (in.tokens.empty()) return absl::InvalidArgumentError(where + "no tokens");
    if (in.start_pos < 0) return absl::InvalidArgumentError(where + "negative start position");
    const int64_t size = static_cast<int64_t>(in.tokens.size());
    if (in.score_begin < 0 || in.score_end > size - (in.want_logits ? 1 : 0) ||
        (in.score_end < in.score_begin && in.score_end != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(where, "score rows [", in.score_begin, ", ",
                                                     in.score_end, ") outside the step"));
    }
    const int64_t end = in.start_pos + static_cast<int64_t>(in.tokens.size());
    if (end > config_.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(where, "position ", end - 1,
                                                     " beyond max_position_embeddings ",
                                                     config_.max_position_embeddings));
    }
    const int64_t blocks_needed = (end + cache.block_size() - 1) / cache.block_size();
    if (static_cast<int64_t>(in.block_ids.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(where, "block table has ", in.block_ids.size(),
                                                     " blocks, ", blocks_needed, " needed for ",
                                                     end, " positions"));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (in.block_ids[b] < 0 || in.block_ids[b] >= cache.num_blocks()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "block id ", in.block_ids[b], " outside the cache"));
      }
    }
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= config_.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "token id ", t, " outside the vocabulary of ", config_.vocab_size));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> Model::Forward(const std::vector<SequenceInput>& batch,
                                                      KvCacheStorage* cache,
                                                      const LayerKvCallback& on_layer_kv) {
  if (cache == nullptr) return absl::InvalidArgumentError("no KV cache");
  RETURN_IF_ERROR(Validate(batch, *cache));
  const ModelConfig& c = config_;
  RunState& rs = *rs_;
  int64_t n_tokens = 0, n_rows = 0;
  for (const SequenceInput& in : batch) {
    n_tokens += static_cast<int64_t>(in.tokens.size());
    n_rows += (in.want_logits ? 1 : 0) + std::max<int64_t>(0, in.score_end - in.score_begin);
  }
  rs.Reserve(c, n_tokens, n_rows);
  PhaseTimer timer(profiling_);
  ++profile_.calls;

  // Embedding rows (bf16 -> fp32, exact), positions, block tables and RoPE angles per token.
  const int64_t half = c.head_dim / 2;
  int64_t t = 0;
  for (const SequenceInput& in : batch) {
    for (size_t i = 0; i < in.tokens.size(); ++i, ++t) {
      // The row goes through xb (free until the first layer) unless the layout is rows.
      const int64_t token = in.tokens[i];
      const bf16* row = weights_->embed + token * c.hidden_size;
      if (weights_->embed_layout != WeightLayout::kRows) {
        CopyWeightRow(weights_->embed, c.vocab_size, c.hidden_size, weights_->embed_layout, token,
                      rs.xb.data());
        row = rs.xb.data();
      }
      ConvertBf16ToF32(row, rs.x.data() + t * c.hidden_size, c.hidden_size);
      rs.positions[t] = in.start_pos + static_cast<int64_t>(i);
      rs.block_tables[t] = in.block_ids.data();
      RopeCosSin(rs.positions[t], inv_freq_.data(), half, rs.cos.data() + t * half,
                 rs.sin.data() + t * half);
    }
    const int64_t first = t - static_cast<int64_t>(in.tokens.size());
    for (int64_t i = in.score_begin; i < in.score_end; ++i) rs.logit_rows.push_back(first + i);
    if (in.want_logits) rs.logit_rows.push_back(t - 1);
  }

  timer.Lap(&profile_.norms);
  for (int64_t l = 0; l < c.num_layers; ++l) Layer(l, n_tokens, cache, on_layer_kv);
  timer = PhaseTimer(profiling_);

  // Final norm and lm_head on the wanted rows only.
  const int64_t h = c.hidden_size;
  for (int64_t r = 0; r < n_rows; ++r) {
    RmsNormToBf16(rs.x.data() + rs.logit_rows[r] * h, h, 1, h, weights_->final_norm.data(),
                  c.rms_norm_eps, rs.xl.data() + r * h, h);
  }
  if (n_rows > 0) {
    MatmulBf16(rs.xl.data(), h, n_rows, h, weights_->lm_head, c.vocab_size, rs.logits.data(),
               c.vocab_size, &pool_, weights_->lm_head_layout);
  }
  timer.Lap(&profile_.lm_head);
  return std::span<const float>(rs.logits.data(), static_cast<size_t>(n_rows * c.vocab_size));
}

void Model::Linear(const bf16* x, int64_t ldx, int64_t T, int64_t k, const bf16* w,
                   WeightLayout layout, const Int8Matrix& w8, int64_t n, float* y) {
  if (w != nullptr) {
    MatmulBf16(x, ldx, T, k, w, n, y, n, &pool_, layout);
  } else {
    MatmulInt8(x, ldx, T, w8, y, n, &pool_);
  }
}

void Model::Layer(int64_t l, int64_t T, KvCacheStorage* cache, const LayerKvCallback& cb) {
  const ModelConfig& c = config_;
  const LayerWeights& w = weights_->layers[l];
  RunState& rs = *rs_;
  const int64_t h = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), f = c.intermediate_size;
  const int64_t hd = c.head_dim, half = hd / 2, xs = rs.xb_stride, qkvd = qd + 2 * kvd;
  const float eps = c.rms_norm_eps;
  PhaseTimer timer(profiling_);
  ForwardProfile& pr = profile_;

  // Attention block: xb = bf16(rmsnorm(x)); q, k, v projections in one pass over wqkv (each
  // output's reduction is the same as with three calls: matmul.h).
  // Work estimates (multiply-add equivalents) let the pool run small steps inline: at decode batch
  // sizes a handoff to a worker costs more than these element-wise passes.
  pool_.ParallelFor(T, 4 * T * h, [&](int64_t b, int64_t e) {
    RmsNormToBf16(rs.x.data() + b * h, h, e - b, h, w.attn_norm.data(), eps, rs.xb.data() + b * xs,
                  xs);
  });
  timer.Lap(&pr.norms);
  Linear(rs.xb.data(), xs, T, h, w.wqkv, w.wqkv_layout, w.wqkv_i8, qkvd, rs.qkv.data());
  timer.Lap(&pr.qkv_proj);

  // Bias, q/k norm, RoPE, then K (after RoPE) and V into the cache as bf16.
  pool_.ParallelFor(T, 8 * T * (qd + 2 * kvd), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* q = rs.qkv.data() + t * qkvd;
      float* k = q + qd;
      float* v = k + kvd;
      if (!w.bq.empty()) {
        for (int64_t i = 0; i < qd; ++i) q[i] += w.bq[i];
        for (int64_t i = 0; i < kvd; ++i) k[i] += w.bk[i];
        for (int64_t i = 0; i < kvd; ++i) v[i] += w.bv[i];
      }
      if (!w.q_norm.empty()) {
        RmsNorm(q, hd, c.num_heads, hd, w.q_norm.data(), eps, q, hd);
        RmsNorm(k, hd, c.num_kv_heads, hd, w.k_norm.data(), eps, k, hd);
      }
      const float* cs = rs.cos.data() + t * half;
      const float* sn = rs.sin.data() + t * half;
      for (int64_t hh = 0; hh < c.num_heads; ++hh) ApplyRope(q + hh * hd, hd, cs, sn);
      for (int64_t hh = 0; hh < c.num_kv_heads; ++hh) ApplyRope(k + hh * hd, hd, cs, sn);
      const int64_t pos = rs.positions[t];
      const int32_t block = rs.block_tables[t][pos / cache->block_size()];
      const int64_t slot = pos % cache->block_size();
      ConvertF32ToBf16(k, cache->K(l, block, slot), kvd);
      ConvertF32ToBf16(v, cache->V(l, block, slot), kvd);
    }
  });
  timer.Lap(&pr.rope_kv);
  if (cb) cb(l);
  timer = PhaseTimer(profiling_);  // the callback's time is not the model's

  AttentionBatch ab;
  ab.n_tokens = T;
  ab.q = rs.qkv.data();
  ab.q_stride = qkvd;
  ab.positions = rs.positions.data();
  ab.block_tables = rs.block_tables.data();
  ab.out = rs.att.data();
  PagedAttention(*cache, l, c.num_heads, ab, &pool_);
  timer.Lap(&pr.attention);

  // o_proj and residual.
  pool_.ParallelFor(T, T * qd, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      ConvertF32ToBf16(rs.att.data() + t * qd, rs.xb.data() + t * xs, qd);
    }
  });
  Linear(rs.xb.data(), xs, T, qd, w.wo, w.wo_layout, w.wo_i8, h, rs.proj.data());
  timer.Lap(&pr.o_proj);
  pool_.ParallelFor(T, 5 * T * h, [&](int64_t b, int64_t e) {
    for (int64_t i = b * h; i < e * h; ++i) rs.x[i] += rs.proj[i];
    RmsNormToBf16(rs.x.data() + b * h, h, e - b, h, w.mlp_norm.data(), eps, rs.xb.data() + b * xs,
                  xs);
  });

  timer.Lap(&pr.norms);

  if (c.IsMoeLayer(l)) {
    // Mixture of experts (moe.h) instead of the dense MLP, then the residual.
    pr.moe_expert_runs += MoeForward(c, w, rs.xb.data(), xs, T, &rs.moe, &pool_, rs.proj.data());
    timer.Lap(&pr.moe);
    pool_.ParallelFor(T, T * h, [&](int64_t b, int64_t e) {
      for (int64_t i = b * h; i < e * h; ++i) rs.x[i] += rs.proj[i];
    });
    timer.Lap(&pr.norms);
    return;
  }

  // MLP: down(bf16(silu(gate) * up)), residual; gate and up in one pass over w_gate_up.
  Linear(rs.xb.data(), xs, T, h, w.w_gate_up, w.w_gate_up_layout, w.w_gate_up_i8, 2 * f,
         rs.gate_up.data());
  timer.Lap(&pr.mlp_gate_up);
  pool_.ParallelFor(T, 8 * T * f, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const float* gu = rs.gate_up.data() + t * 2 * f;
      SiluMulToBf16(gu, gu + f, f, rs.xb.data() + t * xs);
    }
  });
  timer.Lap(&pr.mlp_act);
  Linear(rs.xb.data(), xs, T, f, w.w_down, w.w_down_layout, w.w_down_i8, h, rs.proj.data());
  timer.Lap(&pr.mlp_down);
  pool_.ParallelFor(T, T * h, [&](int64_t b, int64_t e) {
    for (int64_t i = b * h; i < e * h; ++i) rs.x[i] += rs.proj[i];
  });
  timer.Lap(&pr.norms);
}

}  // namespace tandem::engine

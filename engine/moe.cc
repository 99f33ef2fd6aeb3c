#include "engine/moe.h"

#include <algorithm>

#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_int8.h"
#include "engine/ops.h"

namespace tandem::engine {
namespace {

// y [m, n] = x [m, k] (row stride ldx) times a bf16 matrix in `layout`, or the int8 `w8` when
// `w` is null.
void Linear(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, WeightLayout layout,
            const Int8Matrix& w8, int64_t n, float* y, ThreadPool* pool) {
  if (w != nullptr) {
    MatmulBf16(x, ldx, m, k, w, n, y, n, pool, layout);
  } else {
    MatmulInt8(x, ldx, m, w8, y, n, pool);
  }
}

// x [m, k] (row stride k) times an expert matrix [n, k] (bf16 in `layout`, or the int8 `w8` when
// `w` is null) into y [m, n] (row stride n): one product of RunExpertProducts.
struct ExpertProduct {
  const bf16* x = nullptr;
  int64_t m = 0;
  const bf16* w = nullptr;
  WeightLayout layout = WeightLayout::kRows;
  const Int8Matrix* w8 = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  float* y = nullptr;
};

// Output features [j0, j1) of the product (j0 % 4 == 0) on the calling thread: the same kernel as
// the whole matrix, on the view of those weight rows (whole groups of four in kGroups4 and the
// int8 layout).
void RunColumns(const ExpertProduct& p, int64_t j0, int64_t j1) {
  if (p.w != nullptr) {
    MatmulBf16(p.x, p.k, p.m, p.k, p.w + WeightOffset(j0, 0, p.k, p.layout), j1 - j0, p.y + j0, p.n,
               nullptr, p.layout);
    return;
  }
  Int8Matrix rows = *p.w8;
  rows.data += Int8PackedBytes(j0, p.k);
  rows.scales += j0;
  rows.row_sums += j0;
  rows.n = j1 - j0;
  MatmulInt8(p.x, p.k, p.m, rows, p.y + j0, p.n, nullptr);
}

// Runs products product(0), ..., product(count - 1) (ExpertProduct values; no kOnednn layout: its
// blocks are not cut at groups of four weight rows) in one pool dispatch: their weight rows, in
// groups of four, are concatenated into one range that ParallelFor splits, and each thread runs its
// part of every product it meets, back to back, as one single-threaded call on those weight rows
// (each thread converts the product's x itself: m k values, small beside the weights at m <=
// kMoeSharedDispatchMaxRows). An output is one kernel call over all of k on its row of x, the same
// bits as a MatmulBf16 / MatmulInt8 call of the whole matrix on any thread count (matmul.h,
// matmul_int8.h: a row's result never depends on n, on m, on the split or on the thread count). At
// decode batch 1 this replaces a dispatch per expert matrix (16 a layer at top 8), each of whose
// threads read a 0.1-0.5 MB share and then waited at the join, by one for all gate/up matrices and
// one for all downs.
template <typename ProductFn>
void RunExpertProducts(int64_t count, const ProductFn& product, ThreadPool* pool) {
  int64_t groups = 0, work = 0;
  for (int64_t i = 0; i < count; ++i) {
    const ExpertProduct p = product(i);
    groups += (p.n + 3) / 4;
    work += p.m * p.n * p.k;
  }
  pool->ParallelFor(groups, work, [&](int64_t begin, int64_t end) {
    int64_t first = 0;  // first group of product i in the concatenated range
    for (int64_t i = 0; i < count && first < end; ++i) {
      const ExpertProduct p = product(i);
      const int64_t g = (p.n + 3) / 4;
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + g);
      if (lo < hi) RunColumns(p, 4 * (lo - first), std::min(p.n, 4 * (hi - first)));
      first += g;
    }
  });
}

}  // namespace

void MoeScratch::Reserve(const ModelConfig& c, int64_t tokens) {
  if (c.moe.num_experts == 0 || tokens <= capacity) return;
  capacity = tokens;
  const auto T = static_cast<size_t>(tokens);
  const auto k = static_cast<size_t>(c.moe.num_experts_per_tok);
  const auto e = static_cast<size_t>(c.moe.num_experts);
  const auto h = static_cast<size_t>(c.hidden_size);
  const auto f = static_cast<size_t>(c.moe.moe_intermediate_size);
  router.resize(T * e);
  expert.resize(T * k);
  weight.resize(T * k);
  row.resize(T * k);
  expert_begin.resize(e + 1);
  expert_next.resize(e);
  row_token.resize(T * k);
  shared.reserve(e);
  x.resize(T * k * h);
  gate_up.resize(T * k * 2 * f);
  act.resize(T * k * f);
  down.resize(T * k * h);
}

void RouteToken(float* probs, int64_t num_experts, int64_t k, bool normalize, int32_t* experts,
                float* weights) {
  float max = probs[0];
  for (int64_t e = 1; e < num_experts; ++e) max = std::max(max, probs[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < num_experts; ++e) {
    probs[e] = ExpF(probs[e] - max);
    sum += probs[e];
  }
  const float inv = 1.0f / sum;
  for (int64_t e = 0; e < num_experts; ++e) probs[e] *= inv;
  // Top k by repeated selection: strictly greater wins, so the lower index wins a tie.
  for (int64_t r = 0; r < k; ++r) {
    int32_t best = -1;
    for (int64_t e = 0; e < num_experts; ++e) {
      if (std::find(experts, experts + r, static_cast<int32_t>(e)) != experts + r) continue;
      if (best < 0 || probs[e] > probs[best]) best = static_cast<int32_t>(e);
    }
    experts[r] = best;
    weights[r] = probs[best];
  }
  if (normalize) {
    float total = 0.0f;
    for (int64_t r = 0; r < k; ++r) total += weights[r];
    for (int64_t r = 0; r < k; ++r) weights[r] /= total;
  }
}

int64_t MoeForward(const ModelConfig& c, const LayerWeights& w, const bf16* xb, int64_t ldx,
                   int64_t T, MoeScratch* s, ThreadPool* pool, float* out) {
  const int64_t h = c.hidden_size, f = c.moe.moe_intermediate_size;
  const int64_t E = c.moe.num_experts, K = c.moe.num_experts_per_tok;

  // 1-2. Router logits, softmax and top k per token.
  MatmulBf16(xb, ldx, T, h, w.router, E, s->router.data(), E, pool, w.router_layout);
  pool->ParallelFor(T, 16 * T * E * (K + 1), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      RouteToken(s->router.data() + t * E, E, K, c.moe.norm_topk_prob, s->expert.data() + t * K,
                 s->weight.data() + t * K);
    }
  });

  // 3. Group the (token, rank) pairs by expert (a counting sort: tokens in batch order within an
  // expert) and gather their inputs.
  std::fill(s->expert_begin.begin(), s->expert_begin.end(), 0);
  for (int64_t i = 0; i < T * K; ++i) ++s->expert_begin[s->expert[i] + 1];
  for (int64_t e = 0; e < E; ++e) s->expert_begin[e + 1] += s->expert_begin[e];
  std::copy_n(s->expert_begin.begin(), E, s->expert_next.begin());
  for (int64_t i = 0; i < T * K; ++i) {
    const int64_t r = s->expert_next[s->expert[i]]++;
    s->row[i] = static_cast<int32_t>(r);
    s->row_token[r] = static_cast<int32_t>(i / K);
  }
  pool->ParallelFor(T * K, T * K * h, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      std::copy_n(xb + s->row_token[r] * ldx, h, s->x.data() + r * h);
    }
  });

  // Each expert once over its rows: gate/up, SiLU * up (bf16), down. The experts with at most
  // kMoeSharedDispatchMaxRows rows (every expert at decode batch 1) run together, gate/up of all in
  // one dispatch and down of all in another (RunExpertProducts); the others (and every expert in
  // oneDNN's layout) one by one, each matmul split over the threads.
  int64_t ran = 0;
  s->shared.clear();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t m = s->expert_begin[e + 1] - s->expert_begin[e];
    if (m == 0) continue;
    ++ran;
    const ExpertWeights& x = w.experts[e];
    const bool fusable = x.w_gate_up == nullptr || (x.w_gate_up_layout != WeightLayout::kOnednn &&
                                                    x.w_down_layout != WeightLayout::kOnednn);
    if (m <= kMoeSharedDispatchMaxRows && fusable) {
      s->shared.push_back(static_cast<int32_t>(e));
      continue;
    }
    const int64_t r0 = s->expert_begin[e];
    float* gu = s->gate_up.data() + r0 * 2 * f;
    bf16* act = s->act.data() + r0 * f;
    Linear(s->x.data() + r0 * h, h, m, h, x.w_gate_up, x.w_gate_up_layout, x.w_gate_up_i8, 2 * f,
           gu, pool);
    pool->ParallelFor(m, 8 * m * f, [&](int64_t b, int64_t end) {
      for (int64_t r = b; r < end; ++r)
        SiluMulToBf16(gu + r * 2 * f, gu + r * 2 * f + f, f, act + r * f);
    });
    Linear(act, f, m, f, x.w_down, x.w_down_layout, x.w_down_i8, h, s->down.data() + r0 * h, pool);
  }
  if (!s->shared.empty()) {
    const auto count = static_cast<int64_t>(s->shared.size());
    auto rows = [&](int64_t i) {
      return s->expert_begin[s->shared[i] + 1] - s->expert_begin[s->shared[i]];
    };
    RunExpertProducts(
        count,
        [&](int64_t i) {
          const ExpertWeights& x = w.experts[s->shared[i]];
          const int64_t r0 = s->expert_begin[s->shared[i]];
          return ExpertProduct{
              s->x.data() + r0 * h, rows(i), x.w_gate_up, x.w_gate_up_layout,
              &x.w_gate_up_i8,      2 * f,   h,           s->gate_up.data() + r0 * 2 * f};
        },
        pool);
    int64_t shared_rows = 0;
    for (int64_t i = 0; i < count; ++i) shared_rows += rows(i);
    pool->ParallelFor(count, 8 * shared_rows * f, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) {
        const int64_t r0 = s->expert_begin[s->shared[i]];
        for (int64_t r = r0; r < r0 + rows(i); ++r) {
          const float* gu = s->gate_up.data() + r * 2 * f;
          SiluMulToBf16(gu, gu + f, f, s->act.data() + r * f);
        }
      }
    });
    RunExpertProducts(
        count,
        [&](int64_t i) {
          const ExpertWeights& x = w.experts[s->shared[i]];
          const int64_t r0 = s->expert_begin[s->shared[i]];
          return ExpertProduct{s->act.data() + r0 * f, rows(i), x.w_down, x.w_down_layout,
                               &x.w_down_i8,           h,       f,        s->down.data() + r0 * h};
        },
        pool);
  }

  // 4. Combine per token in rank order.
  pool->ParallelFor(T, 2 * T * K * h, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* o = out + t * h;
      std::fill(o, o + h, 0.0f);
      for (int64_t r = 0; r < K; ++r) {
        const float wt = s->weight[t * K + r];
        const float* d = s->down.data() + static_cast<int64_t>(s->row[t * K + r]) * h;
        for (int64_t i = 0; i < h; ++i) o[i] += wt * d[i];
      }
    }
  });
  return ran;
}

}  // namespace tandem::engine

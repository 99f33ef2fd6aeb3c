#include "engine/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

float HalfToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The layout of a fused matrix whose members have `rows` rows each, k columns: the preferred one
// for the whole, except that groups of four rows need every member's rows to be whole groups.
WeightLayout FusedLayout(std::initializer_list<int64_t> rows, int64_t k) {
  int64_t n = 0;
  bool whole_groups = true;
  for (int64_t r : rows) {
    n += r;
    whole_groups = whole_groups && r % 4 == 0;
  }
  const WeightLayout layout = PreferredWeightLayout(n, k);
  return layout == WeightLayout::kGroups4 && !whole_groups ? WeightLayout::kRows : layout;
}

}  // namespace

// Resolves tensor names to files and turns them into bf16 views or converted copies.
class Weights::Loader {
 public:
  Loader(Weights* w, std::vector<std::unique_ptr<SafetensorsFile>>* files, bool int8_checkpoint)
      : w_(w), files_(files), int8_checkpoint_(int8_checkpoint) {}

  absl::Status OpenFiles(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string single = (fs::path(dir) / "model.safetensors").string();
    const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
    std::error_code ec;
    if (fs::exists(single, ec)) {
      ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single));
      for (const auto& [name, info] : f->header().tensors) where_[name] = f.get();
      files_->push_back(std::move(f));
      return absl::OkStatus();
    }
    if (!fs::exists(index, ec)) {
      return absl::NotFoundError(absl::StrCat(dir,
                                              ": neither model.safetensors nor "
                                              "model.safetensors.index.json exists"));
    }
    std::ifstream in(index, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": not valid JSON with an object 'weight_map'"));
    }
    std::map<std::string, SafetensorsFile*> opened;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map entry for '", it.key(), "' is not a file name"));
      }
      const std::string shard = it->get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": tensor '", it.key(), "' names invalid shard '", shard, "'"));
      }
      auto o = opened.find(shard);
      if (o == opened.end()) {
        ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open((fs::path(dir) / shard).string()));
        o = opened.emplace(shard, f.get()).first;
        files_->push_back(std::move(f));
      }
      if (!o->second->Has(it.key())) {
        return absl::NotFoundError(absl::StrCat(o->second->path(), ": missing tensor '", it.key(),
                                                "' (listed in ", index, ")"));
      }
      where_[it.key()] = o->second;
    }
    return absl::OkStatus();
  }

  bool Has(const std::string& name) const { return where_.count(name) > 0; }

  // The tensor `name` with exactly `shape`, of any dtype.
  absl::StatusOr<TensorView> FindAnyType(const std::string& name,
                                         const std::vector<int64_t>& shape) {
    auto it = where_.find(name);
    if (it == where_.end()) {
      std::string files;
      for (const auto& f : *files_) absl::StrAppend(&files, files.empty() ? "" : ", ", f->path());
      return absl::NotFoundError(absl::StrCat("missing tensor '", name, "' in ", files));
    }
    ASSIGN_OR_RETURN(TensorView v, it->second->Get(name));
    if (v.info->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(it->second->path(), ": tensor '", name,
                                                     "' has shape ", ShapeString(v.info->shape),
                                                     ", expected ", ShapeString(shape)));
    }
    return v;
  }

  // The same, of a floating dtype the engine converts to bf16.
  absl::StatusOr<TensorView> Find(const std::string& name, const std::vector<int64_t>& shape) {
    ASSIGN_OR_RETURN(TensorView v, FindAnyType(name, shape));
    if (v.info->dtype != DType::kBF16 && v.info->dtype != DType::kF16 &&
        v.info->dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_[name]->path(), ": tensor '", name, "' has unsupported dtype ",
                       DTypeName(v.info->dtype), " (supported: BF16, F16, F32)"));
    }
    return v;
  }

  // One member of a fused int8 matrix: the tensor `name` (ending in ".weight"), `rows` x k.
  struct Int8Member {
    std::string name;
    int64_t rows;
  };

  // Reserves a fused int8 matrix of the members' rows in the buffer (cache-line aligned) and its
  // scales and sums in the Weights' vectors; Fill packs it and sets *slot. From an int8
  // checkpoint the members are I8 with a "<name>_scale" beside them; otherwise they are floating
  // tensors quantized per row.
  absl::Status Int8Fused(const std::vector<Int8Member>& members, int64_t k, Int8Matrix* slot) {
    Int8Pending p;
    p.slot = slot;
    p.k = k;
    for (const Int8Member& m : members) {
      Int8Source src;
      src.rows = m.rows;
      if (int8_checkpoint_) {
        ASSIGN_OR_RETURN(src.weight, FindAnyType(m.name, {m.rows, k}));
        if (src.weight.info->dtype != DType::kI8) {
          return absl::InvalidArgumentError(
              absl::StrCat(where_[m.name]->path(), ": tensor '", m.name, "' has dtype ",
                           DTypeName(src.weight.info->dtype),
                           ", expected I8 (config.json declares a W8A8 int8 checkpoint)"));
        }
        ASSIGN_OR_RETURN(src.scale, FindScale(m.name + "_scale", m.rows));
      } else {
        ASSIGN_OR_RETURN(src.weight, Find(m.name, {m.rows, k}));
      }
      p.n += m.rows;
      p.sources.push_back(src);
    }
    next_ = (next_ + kAlign - 1) / kAlign * kAlign;
    p.offset = next_;
    next_ += Int8PackedBytes(p.n, k);
    p.row_offset = int8_rows_;
    int8_rows_ += p.n;
    int8_pending_.push_back(std::move(p));
    return absl::OkStatus();
  }

  // Reserves room in the matrix buffer for `name` (which must have exactly `shape`, [rows, k]) and
  // records where *slot must point once the buffer is filled, the matrix stored in `layout`.
  // `group_start` aligns the reservation to a cache line; otherwise the rows directly follow the
  // previous reservation's (members of a fused matrix, which share its layout and k). In
  // WeightLayout::kOnednn a fused matrix is packed as one (its blocks span members), so only its
  // first member's slot is set and the others' are null.
  absl::Status Matrix(const std::string& name, const std::vector<int64_t>& shape, const bf16** slot,
                      WeightLayout layout, bool group_start = true) {
    ASSIGN_OR_RETURN(TensorView v, Find(name, shape));
    if (group_start) {
      next_ = (next_ + kAlign - 1) / kAlign * kAlign;
      group_offset_ = next_;
      group_rows_ = 0;
    }
    pending_.push_back(
        {v, slot, group_offset_, group_rows_, group_start, layout, shape[0], shape[1]});
    group_rows_ += shape[0];
    next_ = group_offset_ + PackedWeightBytes(group_rows_, shape[1], layout);
    return absl::OkStatus();
  }

  // Reserves a mixture-of-experts layer's router (bf16) and experts (bf16, or int8 with `int8`).
  absl::Status MoeLayer(const ModelConfig& c, bool int8, const std::string& p, LayerWeights* L) {
    const int64_t h = c.hidden_size, fm = c.moe.moe_intermediate_size;
    L->router_layout = PreferredWeightLayout(c.moe.num_experts, h);
    RETURN_IF_ERROR(
        Matrix(p + "mlp.gate.weight", {c.moe.num_experts, h}, &L->router, L->router_layout));
    const WeightLayout gate_up_layout = FusedLayout({fm, fm}, h);
    const WeightLayout down_layout = PreferredWeightLayout(h, fm);
    L->experts.resize(static_cast<size_t>(c.moe.num_experts));
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      ExpertWeights& x = L->experts[e];
      const std::string ep = absl::StrCat(p, "mlp.experts.", e, ".");
      x.w_gate_up_layout = gate_up_layout;
      x.w_down_layout = down_layout;
      if (int8) {
        RETURN_IF_ERROR(Int8Fused({{ep + "gate_proj.weight", fm}, {ep + "up_proj.weight", fm}}, h,
                                  &x.w_gate_up_i8));
        RETURN_IF_ERROR(Int8Fused({{ep + "down_proj.weight", h}}, fm, &x.w_down_i8));
      } else {
        RETURN_IF_ERROR(Matrix(ep + "gate_proj.weight", {fm, h}, &x.w_gate_up, gate_up_layout));
        RETURN_IF_ERROR(Matrix(ep + "up_proj.weight", {fm, h}, &x.w_up, gate_up_layout, false));
        RETURN_IF_ERROR(Matrix(ep + "down_proj.weight", {h, fm}, &x.w_down, down_layout));
      }
    }
    return absl::OkStatus();
  }

  // Allocates the buffer, converts every reserved matrix into it, sets the slots, and drops each
  // tensor's file pages from this process once it is copied.
  absl::Status Fill() {
    ASSIGN_OR_RETURN(w_->matrices_, HugePageBuffer::Allocate(static_cast<size_t>(next_)),
                     "weights: ");
    for (size_t g = 0; g < pending_.size();) {
      size_t end = g + 1;
      while (end < pending_.size() && !pending_[end].group_start) ++end;
      if (pending_[g].layout == WeightLayout::kOnednn) {
        FillOnednn(g, end);
        g = end;
        continue;
      }
      for (; g < end; ++g) FillRowsOrGroups(pending_[g]);
    }
    pending_.clear();
    w_->int8_scales_.assign(static_cast<size_t>(int8_rows_), 0.0f);
    w_->int8_sums_.assign(static_cast<size_t>(int8_rows_), 0);
    for (const Int8Pending& p : int8_pending_) FillInt8(p);
    int8_pending_.clear();
    return absl::OkStatus();
  }

  // fp32 copy of a vector's bf16 values.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t len) {
    ASSIGN_OR_RETURN(TensorView v, Find(name, {len}));
    std::vector<bf16> tmp(static_cast<size_t>(len));
    ToBf16(v, 0, len, tmp.data());
    std::vector<float> out(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) out[i] = Bf16ToF32(tmp[i]);
    return out;
  }

 private:
  static constexpr int64_t kAlign = 64;

  struct Int8Source {
    TensorView weight;
    TensorView scale;  // int8 checkpoints only
    int64_t rows = 0;
  };
  struct Int8Pending {
    std::vector<Int8Source> sources;
    Int8Matrix* slot = nullptr;
    int64_t offset = 0;      // bytes into the matrix buffer
    int64_t row_offset = 0;  // into the scale and sum vectors
    int64_t n = 0, k = 0;
  };

  // A scale vector: [rows, 1] or [rows], BF16, F16 or F32.
  absl::StatusOr<TensorView> FindScale(const std::string& name, int64_t rows) {
    absl::StatusOr<TensorView> v = FindAnyType(name, {rows, 1});
    if (!v.ok() && absl::IsInvalidArgument(v.status())) v = FindAnyType(name, {rows});
    if (!v.ok()) return v.status();
    if (v->info->dtype != DType::kBF16 && v->info->dtype != DType::kF16 &&
        v->info->dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(where_[name]->path(), ": tensor '", name, "' has unsupported dtype ",
                       DTypeName(v->info->dtype), " (supported: BF16, F16, F32)"));
    }
    return v;
  }

  static float ScaleAt(const TensorView& v, int64_t i) {
    if (v.info->dtype == DType::kF32) {
      float f;
      std::memcpy(&f, v.data + 4 * i, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, v.data + 2 * i, 2);
    return v.info->dtype == DType::kBF16 ? Bf16ToF32(h) : HalfToF32(h);
  }

  // Quantizes (or copies) and packs one reserved int8 matrix, four rows at a time.
  void FillInt8(const Int8Pending& p) {
    int8_t* dst = reinterpret_cast<int8_t*>(w_->matrices_.data() + p.offset);
    float* scales = w_->int8_scales_.data() + p.row_offset;
    int32_t* sums = w_->int8_sums_.data() + p.row_offset;
    const int64_t k = p.k;
    std::vector<int8_t> q(static_cast<size_t>(4 * k));
    std::vector<bf16> row(static_cast<size_t>(k));
    std::vector<float> wide(static_cast<size_t>(k));
    size_t src = 0;
    int64_t local = 0;  // row within sources[src]
    for (int64_t r0 = 0; r0 < p.n; r0 += 4) {
      const int64_t count = std::min<int64_t>(4, p.n - r0);
      for (int64_t t = 0; t < count; ++t, ++local) {
        while (local == p.sources[src].rows) {
          ++src;
          local = 0;
        }
        const Int8Source& s = p.sources[src];
        int8_t* out = q.data() + t * k;
        if (int8_checkpoint_) {
          std::memcpy(out, s.weight.data + local * k, static_cast<size_t>(k));
          scales[r0 + t] = ScaleAt(s.scale, local);
        } else {
          ToBf16(s.weight, local * k, k, row.data());
          for (int64_t e = 0; e < k; ++e) wide[e] = Bf16ToF32(row[e]);
          scales[r0 + t] = QuantizeWeightRow(wide.data(), k, out);
        }
      }
      PackInt8Rows(q.data(), r0, count, p.n, k, dst, sums);
    }
    *p.slot = {dst, scales, sums, p.n, k};
    for (const Int8Source& s : p.sources) DropPages(s.weight);
  }

  struct Pending {
    TensorView view;
    const bf16** slot;
    int64_t offset;     // bytes into the matrix buffer of its group (fused matrix)
    int64_t first_row;  // of this member in its group
    bool group_start;
    WeightLayout layout;
    int64_t rows, k;
  };

  // A matrix in kRows or kGroups4: its rows start at row `first_row` of its group.
  void FillRowsOrGroups(const Pending& p) {
    bf16* dst = reinterpret_cast<bf16*>(w_->matrices_.data() + p.offset) + p.first_row * p.k;
    if (p.layout == WeightLayout::kRows) {
      ToBf16(p.view, 0, p.view.info->num_elements(), dst);
    } else {
      // A group of rows at a time: the packing needs its rows in bf16 first.
      std::vector<bf16> group(static_cast<size_t>(4 * p.k));
      for (int64_t r = 0; r < p.rows; r += 4) {
        ToBf16(p.view, r * p.k, 4 * p.k, group.data());
        PackWeights(group.data(), 4, p.k, p.layout, dst + r * p.k);
      }
    }
    *p.slot = dst;
    DropPages(p.view);
  }

  // The fused matrix pending_[begin, end) in kOnednn, one block of kOnednnBlockColumns rows at a
  // time (a block may span members).
  void FillOnednn(size_t begin, size_t end) {
    const Pending& first = pending_[begin];
    const int64_t k = first.k;
    const int64_t n = pending_[end - 1].first_row + pending_[end - 1].rows;
    bf16* dst = reinterpret_cast<bf16*>(w_->matrices_.data() + first.offset);
    std::vector<bf16> block(static_cast<size_t>(kOnednnBlockColumns * k));
    for (int64_t r = 0; r < n; r += kOnednnBlockColumns) {
      const int64_t cols = std::min(kOnednnBlockColumns, n - r);
      for (size_t i = begin; i < end; ++i) {
        const Pending& p = pending_[i];
        const int64_t lo = std::max(r, p.first_row);
        const int64_t hi = std::min(r + cols, p.first_row + p.rows);
        if (lo < hi) ToBf16(p.view, (lo - p.first_row) * k, (hi - lo) * k, &block[(lo - r) * k]);
      }
      PackWeights(block.data(), cols, k, WeightLayout::kOnednn,
                  dst + PackedWeightBytes(r, k, WeightLayout::kOnednn) / 2);
    }
    for (size_t i = begin; i < end; ++i) {
      *pending_[i].slot = i == begin ? dst : nullptr;
      DropPages(pending_[i].view);
    }
  }

  // Converts elements [begin, begin + n) of a tensor of a supported dtype to bf16 (exact copy
  // for bf16, RNE otherwise).
  static void ToBf16(const TensorView& v, int64_t begin, int64_t n, bf16* dst) {
    if (v.info->dtype == DType::kBF16) {
      std::memcpy(dst, v.data + 2 * begin, static_cast<size_t>(n) * 2);
    } else if (v.info->dtype == DType::kF16) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, v.data + 2 * (begin + i), 2);
        dst[i] = F32ToBf16(HalfToF32(h));
      }
    } else {
      constexpr int64_t kChunk = 4096;
      float tmp[kChunk];
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t len = std::min(kChunk, n - i);
        std::memcpy(tmp, v.data + 4 * (begin + i), static_cast<size_t>(len) * 4);
        ConvertF32ToBf16(tmp, dst + i, len);
      }
    }
  }

  // Unmaps the whole pages inside a copied tensor's bytes from this process (the page cache keeps
  // the file; a later read would fault them in again). Only a hint: failure changes nothing.
  static void DropPages(const TensorView& v) {
    const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(v.data);
    const uintptr_t first = (begin + page - 1) / page * page;
    const uintptr_t last = (begin + (v.info->end - v.info->begin)) / page * page;
    if (last > first) {
      (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
    }
  }

  Weights* w_;
  std::vector<std::unique_ptr<SafetensorsFile>>* files_;
  std::map<std::string, SafetensorsFile*> where_;
  std::vector<Pending> pending_;
  std::vector<Int8Pending> int8_pending_;
  bool int8_checkpoint_;
  int64_t next_ = 0;          // bytes reserved in the matrix buffer so far
  int64_t group_offset_ = 0;  // where the current group (fused matrix) starts, in bytes
  int64_t group_rows_ = 0;    // and its rows so far
  int64_t int8_rows_ = 0;     // rows of the int8 matrices reserved so far
};

absl::StatusOr<std::unique_ptr<Weights>> Weights::Load(const std::string& model_dir,
                                                       const ModelConfig& c, bool w8a8) {
  std::unique_ptr<Weights> w(new Weights());
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  Loader l(w.get(), &files, c.int8_checkpoint);
  w->int8_ = w8a8 || c.int8_checkpoint;
  RETURN_IF_ERROR(l.OpenFiles(model_dir));
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size;
  // The embedding is only looked up by rows unless it is also the lm_head.
  const bool tied = c.tie_word_embeddings;
  const WeightLayout lm_layout = PreferredWeightLayout(c.vocab_size, h);
  w->embed_layout = tied ? lm_layout : WeightLayout::kRows;
  w->lm_head_layout = lm_layout;
  const WeightLayout qkv_layout = FusedLayout({q, kv, kv}, h);
  const WeightLayout o_layout = PreferredWeightLayout(h, q);
  const WeightLayout gate_up_layout = FusedLayout({f, f}, h);
  const WeightLayout down_layout = PreferredWeightLayout(h, f);
  // Every tensor is found and shape-checked before the buffer is allocated and filled.
  RETURN_IF_ERROR(
      l.Matrix("model.embed_tokens.weight", {c.vocab_size, h}, &w->embed, w->embed_layout));
  ASSIGN_OR_RETURN(w->final_norm, l.Vector("model.norm.weight", h));
  if (tied && l.Has("lm_head.weight")) {
    // Some tied checkpoints also store lm_head; the tie wins as in HF, but check its shape.
    ASSIGN_OR_RETURN(TensorView unused, l.Find("lm_head.weight", {c.vocab_size, h}));
    (void)unused;
  }
  if (!tied) {
    RETURN_IF_ERROR(l.Matrix("lm_head.weight", {c.vocab_size, h}, &w->lm_head, lm_layout));
  }
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& L = w->layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    ASSIGN_OR_RETURN(L.attn_norm, l.Vector(p + "input_layernorm.weight", h));
    ASSIGN_OR_RETURN(L.mlp_norm, l.Vector(p + "post_attention_layernorm.weight", h));
    L.wqkv_layout = qkv_layout;
    L.wo_layout = o_layout;
    L.w_gate_up_layout = gate_up_layout;
    L.w_down_layout = down_layout;
    if (w->int8_) {
      RETURN_IF_ERROR(l.Int8Fused({{p + "self_attn.q_proj.weight", q},
                                   {p + "self_attn.k_proj.weight", kv},
                                   {p + "self_attn.v_proj.weight", kv}},
                                  h, &L.wqkv_i8));
      RETURN_IF_ERROR(l.Int8Fused({{p + "self_attn.o_proj.weight", h}}, q, &L.wo_i8));
      if (!c.IsMoeLayer(i)) {
        RETURN_IF_ERROR(l.Int8Fused(
            {{p + "mlp.gate_proj.weight", f}, {p + "mlp.up_proj.weight", f}}, h, &L.w_gate_up_i8));
        RETURN_IF_ERROR(l.Int8Fused({{p + "mlp.down_proj.weight", h}}, f, &L.w_down_i8));
      }
    } else {
      RETURN_IF_ERROR(l.Matrix(p + "self_attn.q_proj.weight", {q, h}, &L.wq, qkv_layout));
      RETURN_IF_ERROR(l.Matrix(p + "self_attn.k_proj.weight", {kv, h}, &L.wk, qkv_layout, false));
      RETURN_IF_ERROR(l.Matrix(p + "self_attn.v_proj.weight", {kv, h}, &L.wv, qkv_layout, false));
      RETURN_IF_ERROR(l.Matrix(p + "self_attn.o_proj.weight", {h, q}, &L.wo, o_layout));
    }
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(L.bq, l.Vector(p + "self_attn.q_proj.bias", q));
      ASSIGN_OR_RETURN(L.bk, l.Vector(p + "self_attn.k_proj.bias", kv));
      ASSIGN_OR_RETURN(L.bv, l.Vector(p + "self_attn.v_proj.bias", kv));
    }
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(L.q_norm, l.Vector(p + "self_attn.q_norm.weight", c.head_dim));
      ASSIGN_OR_RETURN(L.k_norm, l.Vector(p + "self_attn.k_norm.weight", c.head_dim));
    }
    if (c.IsMoeLayer(i)) {
      RETURN_IF_ERROR(l.MoeLayer(c, w->int8_, p, &L));
    } else if (!w->int8_) {
      RETURN_IF_ERROR(l.Matrix(p + "mlp.gate_proj.weight", {f, h}, &L.w_gate, gate_up_layout));
      RETURN_IF_ERROR(l.Matrix(p + "mlp.up_proj.weight", {f, h}, &L.w_up, gate_up_layout, false));
      RETURN_IF_ERROR(l.Matrix(p + "mlp.down_proj.weight", {h, f}, &L.w_down, down_layout));
    }
  }
  RETURN_IF_ERROR(l.Fill());
  files.clear();  // unmaps the files: everything needed is copied
  if (tied) w->lm_head = w->embed;
  for (LayerWeights& L : w->layers) {
    L.wqkv = L.wq;
    L.w_gate_up = L.w_gate;
  }
  // Bytes per layer part: attention, dense MLP, one expert, a router.
  const int64_t fm = c.moe.moe_intermediate_size, e = c.moe.num_experts;
  const int64_t attn = w->int8_ ? Int8PackedBytes(q + 2 * kv, h) + Int8PackedBytes(h, q)
                                : 2 * (h * q * 2 + h * kv * 2);
  const int64_t mlp = w->int8_ ? Int8PackedBytes(2 * f, h) + Int8PackedBytes(h, f) : 2 * 3 * h * f;
  const int64_t expert =
      w->int8_ ? Int8PackedBytes(2 * fm, h) + Int8PackedBytes(h, fm) : 2 * 3 * h * fm;
  int64_t all = 2 * c.vocab_size * h, active = all;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const bool moe = c.IsMoeLayer(i);
    all += attn + (moe ? 2 * e * h + e * expert : mlp);
    active += attn + (moe ? 2 * e * h + c.moe.num_experts_per_tok * expert : mlp);
  }
  w->matrix_bytes_per_step_ = all;
  w->active_matrix_bytes_per_token_ = active;
  return w;
}

}  // namespace tandem::engine

#include "engine/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
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

}  // namespace

// Resolves tensor names to files and turns them into bf16 views or converted copies.
class Weights::Loader {
 public:
  Loader(Weights* w, std::vector<std::unique_ptr<SafetensorsFile>>* files) : w_(w), files_(files) {}

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

  absl::StatusOr<TensorView> Find(const std::string& name, const std::vector<int64_t>& shape) {
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
    if (v.info->dtype != DType::kBF16 && v.info->dtype != DType::kF16 &&
        v.info->dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(it->second->path(), ": tensor '", name, "' has unsupported dtype ",
                       DTypeName(v.info->dtype), " (supported: BF16, F16, F32)"));
    }
    return v;
  }

  // Reserves room in the matrix buffer for `name` (which must have exactly `shape`, [rows, k]) and
  // records where *slot must point once the buffer is filled, the matrix stored in `layout`.
  // `group_start` aligns the reservation to a cache line; otherwise it directly follows the
  // previous one (members of a fused matrix).
  absl::Status Matrix(const std::string& name, const std::vector<int64_t>& shape, const bf16** slot,
                      WeightLayout layout, bool group_start = true) {
    ASSIGN_OR_RETURN(TensorView v, Find(name, shape));
    if (group_start) next_ = (next_ + kAlign - 1) / kAlign * kAlign;
    pending_.push_back({v, slot, next_, layout, shape[0], shape[1]});
    next_ += v.info->num_elements() * static_cast<int64_t>(sizeof(bf16));
    return absl::OkStatus();
  }

  // Allocates the buffer, converts every reserved matrix into it, sets the slots, and drops each
  // tensor's file pages from this process once it is copied.
  absl::Status Fill() {
    ASSIGN_OR_RETURN(w_->matrices_, HugePageBuffer::Allocate(static_cast<size_t>(next_)),
                     "weights: ");
    for (const Pending& p : pending_) {
      bf16* dst = reinterpret_cast<bf16*>(w_->matrices_.data() + p.offset);
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
    pending_.clear();
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

  struct Pending {
    TensorView view;
    const bf16** slot;
    int64_t offset;  // bytes into the matrix buffer
    WeightLayout layout;
    int64_t rows, k;
  };

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
  int64_t next_ = 0;  // bytes reserved in the matrix buffer so far
};

absl::StatusOr<std::unique_ptr<Weights>> Weights::Load(const std::string& model_dir,
                                                       const ModelConfig& c) {
  std::unique_ptr<Weights> w(new Weights());
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  Loader l(w.get(), &files);
  RETURN_IF_ERROR(l.OpenFiles(model_dir));
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size;
  // Layouts: a fused matrix takes groups of rows only when each member's rows are whole groups.
  // The embedding is only looked up by rows unless it is also the lm_head.
  const bool tied = c.tie_word_embeddings;
  const WeightLayout lm_layout = PreferredWeightLayout(c.vocab_size, h);
  w->embed_layout = tied ? lm_layout : WeightLayout::kRows;
  w->lm_head_layout = lm_layout;
  const WeightLayout qkv_layout =
      q % 4 == 0 && kv % 4 == 0 ? PreferredWeightLayout(q + 2 * kv, h) : WeightLayout::kRows;
  const WeightLayout o_layout = PreferredWeightLayout(h, q);
  const WeightLayout gate_up_layout =
      f % 4 == 0 ? PreferredWeightLayout(2 * f, h) : WeightLayout::kRows;
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
    RETURN_IF_ERROR(l.Matrix(p + "self_attn.q_proj.weight", {q, h}, &L.wq, qkv_layout));
    RETURN_IF_ERROR(l.Matrix(p + "self_attn.k_proj.weight", {kv, h}, &L.wk, qkv_layout, false));
    RETURN_IF_ERROR(l.Matrix(p + "self_attn.v_proj.weight", {kv, h}, &L.wv, qkv_layout, false));
    RETURN_IF_ERROR(l.Matrix(p + "self_attn.o_proj.weight", {h, q}, &L.wo, o_layout));
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(L.bq, l.Vector(p + "self_attn.q_proj.bias", q));
      ASSIGN_OR_RETURN(L.bk, l.Vector(p + "self_attn.k_proj.bias", kv));
      ASSIGN_OR_RETURN(L.bv, l.Vector(p + "self_attn.v_proj.bias", kv));
    }
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(L.q_norm, l.Vector(p + "self_attn.q_norm.weight", c.head_dim));
      ASSIGN_OR_RETURN(L.k_norm, l.Vector(p + "self_attn.k_norm.weight", c.head_dim));
    }
    RETURN_IF_ERROR(l.Matrix(p + "mlp.gate_proj.weight", {f, h}, &L.w_gate, gate_up_layout));
    RETURN_IF_ERROR(l.Matrix(p + "mlp.up_proj.weight", {f, h}, &L.w_up, gate_up_layout, false));
    RETURN_IF_ERROR(l.Matrix(p + "mlp.down_proj.weight", {h, f}, &L.w_down, down_layout));
  }
  RETURN_IF_ERROR(l.Fill());
  files.clear();  // unmaps the files: everything needed is copied
  if (tied) w->lm_head = w->embed;
  for (LayerWeights& L : w->layers) {
    L.wqkv = L.wq;
    L.w_gate_up = L.w_gate;
  }
  w->matrix_bytes_per_step_ =
      2 * (c.num_layers * (h * q * 2 + h * kv * 2 + 3 * h * f) + c.vocab_size * h);
  return w;
}

}  // namespace tandem::engine

#include "engine/weights.h"

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
  Loader(Weights* w) : w_(w) {}

  absl::Status OpenFiles(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string single = (fs::path(dir) / "model.safetensors").string();
    const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
    std::error_code ec;
    if (fs::exists(single, ec)) {
      ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single));
      for (const auto& [name, info] : f->header().tensors) where_[name] = f.get();
      w_->files_.push_back(std::move(f));
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
        w_->files_.push_back(std::move(f));
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
      for (const auto& f : w_->files_)
        absl::StrAppend(&files, files.empty() ? "" : ", ", f->path());
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

  // A bf16 view of `name`, which must have exactly `shape`.
  absl::StatusOr<const bf16*> Matrix(const std::string& name, const std::vector<int64_t>& shape) {
    ASSIGN_OR_RETURN(TensorView v, Find(name, shape));
    const int64_t n = v.info->num_elements();
    if (v.info->dtype == DType::kBF16 && reinterpret_cast<uintptr_t>(v.data) % 2 == 0) {
      return reinterpret_cast<const bf16*>(v.data);
    }
    auto buf = std::make_unique<bf16[]>(static_cast<size_t>(n));
    if (v.info->dtype == DType::kBF16) {  // misaligned in the file: copy
      std::memcpy(buf.get(), v.data, static_cast<size_t>(n) * 2);
    } else if (v.info->dtype == DType::kF16) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, v.data + 2 * i, 2);
        buf[i] = F32ToBf16(HalfToF32(h));
      }
    } else {
      constexpr int64_t kChunk = 4096;
      float tmp[kChunk];
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t len = std::min(kChunk, n - i);
        std::memcpy(tmp, v.data + 4 * i, static_cast<size_t>(len) * 4);
        ConvertF32ToBf16(tmp, buf.get() + i, len);
      }
    }
    const bf16* p = buf.get();
    w_->converted_.push_back(std::move(buf));
    return p;
  }

  // fp32 copy of a vector's bf16 values.
  absl::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t len) {
    ASSIGN_OR_RETURN(const bf16* p, Matrix(name, {len}));
    std::vector<float> out(static_cast<size_t>(len));
    for (int64_t i = 0; i < len; ++i) out[i] = Bf16ToF32(p[i]);
    return out;
  }

 private:
  Weights* w_;
  std::map<std::string, SafetensorsFile*> where_;
};

absl::StatusOr<std::unique_ptr<Weights>> Weights::Load(const std::string& model_dir,
                                                       const ModelConfig& c) {
  std::unique_ptr<Weights> w(new Weights());
  Loader l(w.get());
  RETURN_IF_ERROR(l.OpenFiles(model_dir));
  const int64_t h = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), f = c.intermediate_size;
  ASSIGN_OR_RETURN(w->embed, l.Matrix("model.embed_tokens.weight", {c.vocab_size, h}));
  ASSIGN_OR_RETURN(w->final_norm, l.Vector("model.norm.weight", h));
  if (c.tie_word_embeddings && !l.Has("lm_head.weight")) {
    w->lm_head = w->embed;
  } else if (c.tie_word_embeddings) {
    // Some tied checkpoints also store lm_head; the tie wins as in HF, but check its shape.
    ASSIGN_OR_RETURN(TensorView unused, l.Find("lm_head.weight", {c.vocab_size, h}));
    (void)unused;
    w->lm_head = w->embed;
  } else {
    ASSIGN_OR_RETURN(w->lm_head, l.Matrix("lm_head.weight", {c.vocab_size, h}));
  }
  w->layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights& L = w->layers[i];
    const std::string p = absl::StrCat("model.layers.", i, ".");
    ASSIGN_OR_RETURN(L.attn_norm, l.Vector(p + "input_layernorm.weight", h));
    ASSIGN_OR_RETURN(L.mlp_norm, l.Vector(p + "post_attention_layernorm.weight", h));
    ASSIGN_OR_RETURN(L.wq, l.Matrix(p + "self_attn.q_proj.weight", {q, h}));
    ASSIGN_OR_RETURN(L.wk, l.Matrix(p + "self_attn.k_proj.weight", {kv, h}));
    ASSIGN_OR_RETURN(L.wv, l.Matrix(p + "self_attn.v_proj.weight", {kv, h}));
    ASSIGN_OR_RETURN(L.wo, l.Matrix(p + "self_attn.o_proj.weight", {h, q}));
    if (c.attention_bias) {
      ASSIGN_OR_RETURN(L.bq, l.Vector(p + "self_attn.q_proj.bias", q));
      ASSIGN_OR_RETURN(L.bk, l.Vector(p + "self_attn.k_proj.bias", kv));
      ASSIGN_OR_RETURN(L.bv, l.Vector(p + "self_attn.v_proj.bias", kv));
    }
    if (c.qk_norm) {
      ASSIGN_OR_RETURN(L.q_norm, l.Vector(p + "self_attn.q_norm.weight", c.head_dim));
      ASSIGN_OR_RETURN(L.k_norm, l.Vector(p + "self_attn.k_norm.weight", c.head_dim));
    }
    ASSIGN_OR_RETURN(L.w_gate, l.Matrix(p + "mlp.gate_proj.weight", {f, h}));
    ASSIGN_OR_RETURN(L.w_up, l.Matrix(p + "mlp.up_proj.weight", {f, h}));
    ASSIGN_OR_RETURN(L.w_down, l.Matrix(p + "mlp.down_proj.weight", {h, f}));
  }
  w->matrix_bytes_per_step_ =
      2 * (c.num_layers * (h * q * 2 + h * kv * 2 + 3 * h * f) + c.vocab_size * h);
  return w;
}

}  // namespace tandem::engine

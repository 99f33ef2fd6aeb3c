"""PyTorch reference forward of the engine's models (Llama, Qwen2, Qwen3, Qwen3-MoE).

It implements the numerical contract of docs/numerics.md.

Written to Hugging Face's modeling conventions (modeling_llama / modeling_qwen2 / modeling_qwen3):
RMSNorm as (x * rsqrt(mean(x^2) + eps)) * w, rotate_half RoPE with inv_freq computed in fp32 and
rope_scaling (default, linear, llama3), GQA by repeat_kv (query head h reads KV head
h // (n_heads / n_kv_heads)), Qwen2 q/k/v bias, Qwen3 q/k RMSNorm before RoPE, tied or untied
lm_head, SiLU-gated MLP, Qwen3-MoE's sparse MLP (below). On top of HF's fp32 computation it
applies the engine's rounding points:
  - weights are bf16 (fp16/fp32 checkpoints rounded to bf16, nearest-even, at load);
  - every linear layer rounds its input to bf16 and accumulates in fp32; biases added in fp32;
  - K (after RoPE) and V are rounded to bf16, as the KV cache stores them;
  - everything else (residual, norms, RoPE, softmax, SiLU, logits) stays fp32.

Sums: by default every dot product (linear layers, q.k, probs.v, the RMSNorm mean) is accumulated in
float64 and rounded once to fp32, i.e. the reference gives the correctly rounded fp32 result of
each reduction. That makes the goldens independent of the BLAS, CPU and thread count they were made
on. Any fp32 accumulation order (the engine's) differs from it by reduction rounding, which a bf16
rounding point can amplify to ~1e-3..1e-2 in the logits; `Model(dir, exact=False)` uses plain fp32
torch ops instead, which make_goldens.py uses to measure that spread for the tolerance it records.

W8A8 int8 (docs/numerics.md "W8A8 int8"): with `w8a8=True`, or for a compressed-tensors int8
checkpoint (config.json `quantization_config`), the decoder's linear layers hold int8 weights with
per-output-channel fp32 scales (quantized here from the bf16 values, or read as stored) and
quantize their bf16-rounded input per token (scale max|x| / 127, round half to even); the integer
products are summed exactly (float64 holds them) and scaled as the engine does:
(float(acc) * sx) * sw. Embeddings and lm_head stay bf16.

Qwen3-MoE (docs/numerics.md "Mixture of experts"): in a sparse layer the router `mlp.gate` (bf16,
never int8) is a linear layer (bf16-rounded input, fp32 result); softmax over all experts (float64
rounded once here, like the attention softmax); the top num_experts_per_tok by probability, the
lower expert index first on ties; renormalised in fp32 when norm_topk_prob; each chosen expert is
a SiLU-gated MLP like the dense one (bf16 or int8); the outputs are combined in fp32 in rank order:
out = 0, then out = out + w_k * y_k for k = 0, 1, ... (what the engine does, bit for bit).

Usage as a library:
  model = load_model("models/tandem-tiny-english")
  logits = model.forward(ids)            # [len(ids), vocab] fp32, causal, positions 0..n-1
  ids, margins = model.greedy(prompt, 64)
"""

import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hf_safetensors import read_model_tensors, round_to_bf16, to_f32  # noqa: E402

SUPPORTED = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
             "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


class ModelError(ValueError):
    """A model directory the reference cannot run; the message names the file and field."""


def bf16(x):
    """fp32 tensor -> fp32 tensor of the nearest bf16 values (round to nearest even)."""
    return x.to(torch.bfloat16).to(torch.float32)


class Config:
    def __init__(self, model_dir):
        path = os.path.join(model_dir, "config.json")
        with open(path, encoding="utf-8") as f:
            c = json.load(f)
        self.model_type = c.get("model_type")
        if self.model_type not in SUPPORTED:
            raise ModelError(f"{path}: unsupported model_type {self.model_type!r}")
        if c.get("hidden_act", "silu") != "silu":
            raise ModelError(f"{path}: unsupported hidden_act {c['hidden_act']!r}")
        try:
            self.hidden = int(c["hidden_size"])
            self.layers = int(c["num_hidden_layers"])
            self.heads = int(c["num_attention_heads"])
            self.kv_heads = int(c.get("num_key_value_heads") or self.heads)
            self.intermediate = int(c["intermediate_size"])
            self.vocab = int(c["vocab_size"])
        except KeyError as e:
            raise ModelError(f"{path}: missing {e.args[0]}") from None
        self.head_dim = int(c.get("head_dim") or self.hidden // self.heads)
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.rope_theta = float(c.get("rope_theta", 10000.0))
        self.rope_scaling = c.get("rope_scaling")
        self.tie = bool(c.get("tie_word_embeddings", False))
        self.qkv_bias = self.model_type == "qwen2" or bool(c.get("attention_bias", False))
        if c.get("attention_bias") and self.model_type != "qwen2":
            raise ModelError(f"{path}: attention_bias (o_proj bias) is not in the engine contract")
        self.qk_norm = self.model_type in ("qwen3", "qwen3_moe")
        self.experts = 0
        if self.model_type == "qwen3_moe":
            self.experts = int(c["num_experts"])
            self.experts_per_tok = int(c["num_experts_per_tok"])
            self.moe_intermediate = int(c["moe_intermediate_size"])
            self.norm_topk_prob = bool(c.get("norm_topk_prob", False))
            self.sparse_step = int(c.get("decoder_sparse_step", 1))
            self.mlp_only_layers = [int(i) for i in c.get("mlp_only_layers") or []]
        if self.heads % self.kv_heads:
            raise ModelError(f"{path}: {self.heads} heads not a multiple of {self.kv_heads}")
        q = c.get("quantization_config")
        if q is not None and q.get("quant_method") != "compressed-tensors":
            raise ModelError(f"{path}: unsupported quantization_config {q.get('quant_method')!r}")
        self.int8_checkpoint = q is not None


def is_moe_layer(cfg, i):
    """HF Qwen3MoeDecoderLayer: sparse unless in mlp_only_layers, every decoder_sparse_step."""
    return (cfg.experts > 0 and i not in cfg.mlp_only_layers and
            (i + 1) % cfg.sparse_step == 0)


def rope_inv_freq(cfg):
    """inv_freq [head_dim / 2] in fp32 as HF's rope init functions compute it."""
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = cfg.rope_scaling
    if not rs:
        return inv_freq
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / rs["factor"]
    if kind == "llama3":
        factor = rs["factor"]
        low, high = rs["low_freq_factor"], rs["high_freq_factor"]
        old_ctx = rs["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    raise ModelError(f"rope_scaling type {kind!r} is not supported")


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def quantize_weight_int8(w):
    """Symmetric per-output-channel int8 of fp32 w [out, in] -> (q as fp32 values, scale [out])."""
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w / scale[:, None]).clamp(-127, 127)
    return q, scale


def linear_int8(x, q, scale):
    """W8A8: x [n, in] fp32 (rounded to bf16 here), q [out, in] int8 values, scale [out]."""
    xb = bf16(x)
    amax = xb.abs().amax(dim=-1, keepdim=True)
    nonzero = amax > 0
    safe = torch.where(nonzero, amax, torch.ones_like(amax))
    qx = torch.where(nonzero, torch.round(xb * (127.0 / safe)).clamp(-127, 127),
                     torch.zeros_like(xb))
    sx = torch.where(nonzero, amax / 127.0, torch.zeros_like(amax))
    acc = (qx.double() @ q.double().t()).float()  # exact integers, rounded once to fp32
    return (acc * sx) * scale


class Model:
    """Weights as fp32 tensors holding bf16 values; forward per docs/numerics.md."""

    def __init__(self, model_dir, exact=True, w8a8=False):
        self.dir = model_dir
        self.exact = exact
        self.cfg = cfg = Config(model_dir)
        self.int8 = w8a8 or cfg.int8_checkpoint
        tensors = read_model_tensors(model_dir)

        def get(name, shape):
            if name not in tensors:
                raise ModelError(f"{model_dir}: missing tensor {name}")
            dtype, bits = tensors[name]
            if tuple(bits.shape) != tuple(shape):
                raise ModelError(f"{model_dir}: tensor {name} has shape {list(bits.shape)}, "
                                 f"expected {list(shape)}")
            values = to_f32(dtype, bits)
            if dtype != "BF16":
                values = round_to_bf16(values)
            return torch.from_numpy(np.array(values, dtype=np.float32))

        def get_linear(name, shape):
            """A decoder linear layer's weight: fp32 (bf16 values), or (q, scale) in int8."""
            if not self.int8:
                return get(name, shape)
            if not cfg.int8_checkpoint:
                return quantize_weight_int8(get(name, shape))
            dtype, bits = tensors.get(name, (None, None))
            if dtype != "I8" or tuple(bits.shape) != tuple(shape):
                raise ModelError(f"{model_dir}: tensor {name} is not I8 {list(shape)}")
            sdtype, sbits = tensors[name + "_scale"]
            scale = np.array(to_f32(sdtype, sbits), dtype=np.float32).reshape(-1)
            return (torch.from_numpy(np.array(bits, dtype=np.float32)), torch.from_numpy(scale))

        h, hd, nh, nkv = cfg.hidden, cfg.head_dim, cfg.heads, cfg.kv_heads
        self.embed = get("model.embed_tokens.weight", (cfg.vocab, h))
        self.layers = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            layer = {
                "input_norm": get(p + "input_layernorm.weight", (h,)),
                "q": get_linear(p + "self_attn.q_proj.weight", (nh * hd, h)),
                "k": get_linear(p + "self_attn.k_proj.weight", (nkv * hd, h)),
                "v": get_linear(p + "self_attn.v_proj.weight", (nkv * hd, h)),
                "o": get_linear(p + "self_attn.o_proj.weight", (h, nh * hd)),
                "post_norm": get(p + "post_attention_layernorm.weight", (h,)),
            }
            if is_moe_layer(cfg, i):
                fm = cfg.moe_intermediate
                layer["router"] = get(p + "mlp.gate.weight", (cfg.experts, h))
                layer["experts"] = [{
                    "gate": get_linear(p + f"mlp.experts.{e}.gate_proj.weight", (fm, h)),
                    "up": get_linear(p + f"mlp.experts.{e}.up_proj.weight", (fm, h)),
                    "down": get_linear(p + f"mlp.experts.{e}.down_proj.weight", (h, fm)),
                } for e in range(cfg.experts)]
            else:
                layer.update({
                    "gate": get_linear(p + "mlp.gate_proj.weight", (cfg.intermediate, h)),
                    "up": get_linear(p + "mlp.up_proj.weight", (cfg.intermediate, h)),
                    "down": get_linear(p + "mlp.down_proj.weight", (h, cfg.intermediate)),
                })
            if cfg.qkv_bias:
                layer["q_bias"] = get(p + "self_attn.q_proj.bias", (nh * hd,))
                layer["k_bias"] = get(p + "self_attn.k_proj.bias", (nkv * hd,))
                layer["v_bias"] = get(p + "self_attn.v_proj.bias", (nkv * hd,))
            if cfg.qk_norm:
                layer["q_norm"] = get(p + "self_attn.q_norm.weight", (hd,))
                layer["k_norm"] = get(p + "self_attn.k_norm.weight", (hd,))
            self.layers.append(layer)
        self.norm = get("model.norm.weight", (h,))
        if cfg.tie:
            self.lm_head = self.embed
        else:
            self.lm_head = get("lm_head.weight", (cfg.vocab, h))
        self.inv_freq = rope_inv_freq(cfg)

    def matmul(self, a, b):
        """a @ b with fp32 inputs and an fp32 result (see "Sums" above)."""
        if self.exact:
            return (a.double() @ b.double()).float()
        return a @ b

    def rms_norm(self, x, w):
        if self.exact:
            variance = x.double().pow(2).mean(-1, keepdim=True).float()
        else:
            variance = x.pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(variance + self.cfg.eps)) * w

    def linear(self, x, w, b=None):
        y = linear_int8(x, *w) if isinstance(w, tuple) else self.matmul(bf16(x), w.t())
        return y if b is None else y + b

    def rope(self, x, positions):
        """x [n, heads, head_dim]; HF: x * cos + rotate_half(x) * sin, cos/sin in fp32."""
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]
        return x * cos + rotate_half(x) * sin

    def new_cache(self):
        """Per-layer K/V of the positions computed so far (bf16 values in fp32 tensors)."""
        return {"len": 0, "k": [None] * self.cfg.layers, "v": [None] * self.cfg.layers}

    @torch.no_grad()
    def forward(self, ids, cache=None):
        """ids: tokens at positions cache.len .. cache.len + n - 1 (0.. without a cache) ->
        logits [n, vocab] fp32. With a cache, appends these positions' K/V to it."""
        cfg = self.cfg
        ids = torch.as_tensor(list(ids), dtype=torch.int64)
        if ids.numel() == 0:
            raise ValueError("forward needs at least one token")
        if int(ids.min()) < 0 or int(ids.max()) >= cfg.vocab:
            raise ValueError(f"token id out of range [0, {cfg.vocab})")
        if cache is None:
            cache = self.new_cache()
        start = cache["len"]
        n, nh, nkv, hd = ids.numel(), cfg.heads, cfg.kv_heads, cfg.head_dim
        positions = torch.arange(start, start + n)
        mask = torch.full((n, start + n), float("-inf")).triu(start + 1)  # causal
        scale = hd ** -0.5
        rep = nh // nkv
        x = self.embed[ids]  # [n, hidden]
        for li, L in enumerate(self.layers):
            h = self.rms_norm(x, L["input_norm"])
            q = self.linear(h, L["q"], L.get("q_bias")).view(n, nh, hd)
            k = self.linear(h, L["k"], L.get("k_bias")).view(n, nkv, hd)
            v = self.linear(h, L["v"], L.get("v_bias")).view(n, nkv, hd)
            if cfg.qk_norm:
                q = self.rms_norm(q, L["q_norm"])
                k = self.rms_norm(k, L["k_norm"])
            q = self.rope(q, positions)
            k = bf16(self.rope(k, positions))  # the KV cache holds bf16
            v = bf16(v)
            if start:
                k = torch.cat((cache["k"][li], k))
                v = torch.cat((cache["v"][li], v))
            cache["k"][li], cache["v"][li] = k, v  # [start + n, nkv, hd]
            keys = k.repeat_interleave(rep, dim=1).transpose(0, 1)  # [nh, start + n, hd]
            values = v.repeat_interleave(rep, dim=1).transpose(0, 1)
            scores = self.matmul(q.transpose(0, 1), keys.transpose(1, 2)) * scale + mask
            probs = self.softmax(scores)  # [nh, n, start + n]
            attn = self.matmul(probs, values).transpose(0, 1).reshape(n, nh * hd)
            x = x + self.linear(attn, L["o"])
            h = self.rms_norm(x, L["post_norm"])
            x = x + (self.moe(h, L) if "router" in L else self.mlp(h, L))
        cache["len"] = start + n
        return self.linear(self.rms_norm(x, self.norm), self.lm_head)  # [n, vocab]

    def mlp(self, h, L):
        """SiLU-gated MLP: down(bf16(silu(gate(h)) * up(h)))."""
        g = torch.nn.functional.silu(self.linear(h, L["gate"]))
        return self.linear(g * self.linear(h, L["up"]), L["down"])

    def route(self, h, router):
        """(experts [n, k] int64, weights [n, k] fp32) of each token (module docstring)."""
        cfg = self.cfg
        probs = self.softmax(self.linear(h, router))  # [n, experts]
        # A stable descending sort keeps the lower index first among equal probabilities.
        weights, experts = torch.sort(probs, dim=-1, descending=True, stable=True)
        weights, experts = weights[:, :cfg.experts_per_tok], experts[:, :cfg.experts_per_tok]
        if cfg.norm_topk_prob:
            total = weights[:, 0].clone()
            for r in range(1, cfg.experts_per_tok):
                total = total + weights[:, r]
            weights = weights / total[:, None]
        return experts, weights

    def moe(self, h, L):
        """Qwen3-MoE sparse MLP: each expert over its tokens, combined in rank order."""
        experts, weights = self.route(h, L["router"])
        n, k = experts.shape
        ys = torch.zeros((n, k, h.shape[1]), dtype=torch.float32)
        for e, ex in enumerate(L["experts"]):
            rows, ranks = torch.nonzero(experts == e, as_tuple=True)
            if rows.numel():
                ys[rows, ranks] = self.mlp(h[rows], ex)
        out = torch.zeros_like(h)
        for r in range(k):
            out = out + weights[:, r:r + 1] * ys[:, r]
        return out

    def softmax(self, scores):
        """Softmax over the last axis with max-subtraction (exact: float64, rounded once)."""
        if self.exact:
            return torch.softmax(scores.double(), dim=-1).float()
        return torch.softmax(scores, dim=-1)

    def greedy(self, prompt_ids, steps):
        """Greedy continuation by argmax (lowest id on exact ties), one token per step through
        the KV cache. Returns (new ids, top1 - top2 margin at each step, prompt's last logits)."""
        cache = self.new_cache()
        logits = self.forward(prompt_ids, cache)[-1]
        prompt_logits = logits.clone()
        new, margins = [], []
        for step in range(steps):
            top = torch.topk(logits, 2)
            best = int(torch.nonzero(logits == top.values[0])[0])
            new.append(best)
            margins.append(float(top.values[0] - top.values[1]))
            if step + 1 < steps:
                logits = self.forward([best], cache)[-1]
        return new, margins, prompt_logits


def load_model(model_dir, exact=True, w8a8=False):
    return Model(model_dir, exact, w8a8)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="greedy continuation with the reference forward")
    ap.add_argument("model_dir")
    ap.add_argument("ids", nargs="+", type=int, help="prompt token ids")
    ap.add_argument("--steps", type=int, default=16)
    a = ap.parse_args()
    out, margins, _ = load_model(a.model_dir).greedy(a.ids, a.steps)
    print(json.dumps({"greedy_ids": out, "min_margin": min(margins)}))

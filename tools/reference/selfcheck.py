#!/usr/bin/python3
"""Self-check of the reference and of the safetensors tooling. Exits non-zero on any failure.

1. bf16 rounding (numpy) equals torch's float32 -> bfloat16 conversion, ties and specials included.
2. safetensors: files written by make_synthetic_model (bf16/fp16/fp32, 1 and 3 shards) read back
   with the expected names, shapes and values; truncated and corrupt files are rejected.
3. reference.py against `naive_forward` below: an independent numpy implementation written from the
   contract, not from reference.py: explicit per-head, per-query loops, RoPE as explicit rotation of
   pairs (i, i + d/2), float64 accumulation rounded to fp32 at each contract point. The two may
   accumulate every sum in float64 and round it once, so they may differ only by last-bit
   effects (softmax's own fp32 sum, exp/sin/cos ulps): logits must agree to 1e-5 relative.

Run: /usr/bin/python3 tools/reference/selfcheck.py
"""

import importlib.machinery
import importlib.util
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.dirname(HERE)
sys.path.insert(0, TOOLS)
sys.path.insert(0, HERE)
import hf_safetensors as st  # noqa: E402
import reference  # noqa: E402

FAILURES = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        FAILURES.append(what)


def load_make_synthetic_model():
    path = os.path.join(TOOLS, "make_synthetic_model")
    loader = importlib.machinery.SourceFileLoader("make_synthetic_model", path)
    spec = importlib.util.spec_from_loader("make_synthetic_model", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def check_bf16():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        rng.standard_normal(200000).astype(np.float32) * 10,
        (np.arange(4096, dtype=np.uint32) << 16 | 0x8000).view(np.float32),  # exact ties
        (np.arange(4096, dtype=np.uint32) << 16 | 0x7FFF).view(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, 3.4e38, -3.4e38, 1e-45, 1e-39], np.float32)])
    x = np.concatenate([x, -x])
    ours = st.to_bf16_bits(x)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    check(np.array_equal(ours, theirs), f"bf16 RNE equals torch on {x.size} values")
    nan = st.to_bf16_bits(np.array([np.nan], np.float32))
    check(bool(np.isnan(st.bf16_bits_to_f32(nan))[0]), "bf16 keeps NaN a NaN")


def check_safetensors(msm, tmp):
    for dtype, shards in (("bf16", 1), ("fp16", 1), ("fp32", 3)):
        out = os.path.join(tmp, f"m-{dtype}-{shards}")
        msm.main(["--out", out, "--preset", "qwen3-tiny", "--dtype", dtype, "--shards",
                  str(shards), "--seed", "5", "--no-tokenizer", "--vocab", "300"])
        cfg = msm.resolve_shape(msm.parse_args(["--out", "x", "--preset", "qwen3-tiny",
                                                "--vocab", "300"]))
        tensors = st.read_model_tensors(out)
        specs = msm.tensor_specs(cfg)
        ok = set(tensors) == {n for n, _, _ in specs}
        for name, shape, kind in specs:
            d, bits = tensors[name]
            want = msm.make_tensor(5, name, shape, kind)
            want = {"bf16": st.round_to_bf16, "fp16": lambda a: a.astype(np.float16)
                    .astype(np.float32), "fp32": lambda a: a}[dtype](want)
            ok = ok and tuple(bits.shape) == shape and np.array_equal(st.to_f32(d, bits), want)
        check(ok, f"safetensors round trip: {dtype}, {shards} shard(s), {len(specs)} tensors")
        with open(os.path.join(out, "config.json")) as f:
            c = json.load(f)
        check(c["head_dim"] == 32 and c["model_type"] == "qwen3" and
              c["torch_dtype"] == {"bf16": "bfloat16", "fp16": "float16",
                                   "fp32": "float32"}[dtype], f"config.json fields ({dtype})")
        first = os.path.join(out, sorted(f for f in os.listdir(out)
                                         if f.endswith(".safetensors"))[0])
        with open(first, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
        check((8 + n) % 8 == 0, f"data section 8-byte aligned ({dtype})")

    src = os.path.join(tmp, "m-bf16-1", "model.safetensors")
    blob = open(src, "rb").read()
    cases = {"truncated data": blob[:-10], "truncated header": blob[:20],
             "header length beyond file": struct.pack("<Q", 1 << 40) + blob[8:],
             "corrupt JSON": blob[:8] + b"x" + blob[9:]}
    for what, data in cases.items():
        bad = os.path.join(tmp, "bad.safetensors")
        with open(bad, "wb") as f:
            f.write(data)
        try:
            st.read_safetensors(bad)
            check(False, f"rejects {what}")
        except st.SafetensorsError as e:
            check("bad.safetensors" in str(e), f"rejects {what}: {e}"[:110])


# ----------------------------------------------------------------------------------------------
# Independent naive forward (numpy, float64 accumulation, explicit loops)


def f32(x):
    return np.float32(x) if np.isscalar(x) else np.asarray(x, dtype=np.float32)


def bf(x):
    return st.round_to_bf16(f32(x))


def naive_linear(x, w, b=None):
    """x [in] fp32, w [out, in] holding bf16 values: fp32 result of sum(bf16(x) * w)."""
    y = f32(w.astype(np.float64) @ bf(x).astype(np.float64))
    return y if b is None else f32(y + b)


def naive_rms(x, w, eps):
    ms = np.mean(x.astype(np.float64) ** 2)
    return f32(f32(x * f32(1.0 / math.sqrt(float(f32(ms)) + eps))) * w)


def naive_inv_freq(c):
    d = c["head_dim"]
    theta = c.get("rope_theta", 10000.0)
    out = []
    for i in range(d // 2):
        f = float(f32(1.0 / float(f32(theta ** float(f32(2 * i / d))))))
        rs = c.get("rope_scaling")
        if rs and rs.get("rope_type") == "linear":
            f /= rs["factor"]
        elif rs and rs.get("rope_type") == "llama3":
            wavelen = 2 * math.pi / f
            lo = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
            hi = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
            if wavelen > lo:
                f = f / rs["factor"]
            elif wavelen >= hi:
                s = ((rs["original_max_position_embeddings"] / wavelen - rs["low_freq_factor"]) /
                     (rs["high_freq_factor"] - rs["low_freq_factor"]))
                f = (1 - s) * f / rs["factor"] + s * f
        out.append(float(f32(f)))
    return out


def naive_rope(vec, pos, inv_freq):
    d = len(vec)
    out = np.empty(d, np.float32)
    for i in range(d // 2):
        angle = float(f32(pos * inv_freq[i]))
        c, s = math.cos(angle), math.sin(angle)
        a, b = float(vec[i]), float(vec[i + d // 2])
        out[i] = a * c - b * s
        out[i + d // 2] = b * c + a * s
    return out


def naive_mlp(h, W, p):
    g = naive_linear(h, W[p + "gate_proj.weight"]).astype(np.float64)
    u = naive_linear(h, W[p + "up_proj.weight"]).astype(np.float64)
    act = f32(g / (1.0 + np.exp(-g)) * u)
    return naive_linear(act, W[p + "down_proj.weight"])


def naive_moe(h, W, p, c):
    """Qwen3-MoE sparse MLP of one token, from docs/numerics.md "Mixture of experts"."""
    logits = naive_linear(h, W[p + "mlp.gate.weight"]).astype(np.float64)
    e = np.exp(logits - logits.max())
    probs = f32(e / e.sum())
    chosen = sorted(range(len(probs)), key=lambda i: (-float(probs[i]), i))
    chosen = chosen[:c["num_experts_per_tok"]]
    weights = [probs[i] for i in chosen]
    if c.get("norm_topk_prob"):
        total = np.float32(0)
        for w in weights:
            total = f32(total + w)
        weights = [f32(w / total) for w in weights]
    out = np.zeros(len(h), np.float32)
    for i, w in zip(chosen, weights):
        out = f32(out + f32(w * naive_mlp(h, W, p + f"mlp.experts.{i}.")))
    return out


def naive_forward(model_dir, ids):
    """Last-position logits for `ids`, written from docs/numerics.md, not from
    reference.py."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    c.setdefault("head_dim", c["hidden_size"] // c["num_attention_heads"])
    raw = st.read_model_tensors(model_dir)
    W = {n: st.round_to_bf16(st.to_f32(d, a)) for n, (d, a) in raw.items()}
    nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps, group = c["rms_norm_eps"], nh // nkv
    inv_freq = naive_inv_freq(c)
    xs = [W["model.embed_tokens.weight"][t].copy() for t in ids]
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        K, V = [], []  # per position: [nkv, hd] bf16 values
        qs = []
        for pos, x in enumerate(xs):
            h = naive_rms(x, W[p + "input_layernorm.weight"], eps)
            q, k, v = (naive_linear(h, W[p + f"self_attn.{m}_proj.weight"],
                                    W.get(p + f"self_attn.{m}_proj.bias")) for m in "qkv")
            qh, kh = [], []
            for head in range(nh):
                vec = q[head * hd:(head + 1) * hd]
                if c["model_type"] in ("qwen3", "qwen3_moe"):
                    vec = naive_rms(vec, W[p + "self_attn.q_norm.weight"], eps)
                qh.append(naive_rope(vec, pos, inv_freq))
            for head in range(nkv):
                vec = k[head * hd:(head + 1) * hd]
                if c["model_type"] in ("qwen3", "qwen3_moe"):
                    vec = naive_rms(vec, W[p + "self_attn.k_norm.weight"], eps)
                kh.append(bf(naive_rope(vec, pos, inv_freq)))
            qs.append(qh)
            K.append(kh)
            V.append([bf(v[head * hd:(head + 1) * hd]) for head in range(nkv)])
        new_xs = []
        for pos, x in enumerate(xs):
            out = np.zeros(nh * hd, np.float32)
            for head in range(nh):
                kv = head // group
                scores = [float(f32(np.dot(qs[pos][head].astype(np.float64),
                                           K[j][kv].astype(np.float64)) / math.sqrt(hd)))
                          for j in range(pos + 1)]
                m = max(scores)
                e = [math.exp(s - m) for s in scores]
                total = sum(e)
                acc = np.zeros(hd, np.float64)
                for j in range(pos + 1):
                    acc += (e[j] / total) * V[j][kv].astype(np.float64)
                out[head * hd:(head + 1) * hd] = f32(acc)
            x = f32(x + naive_linear(out, W[p + "self_attn.o_proj.weight"]))
            h = naive_rms(x, W[p + "post_attention_layernorm.weight"], eps)
            if p + "mlp.gate.weight" in W:
                new_xs.append(f32(x + naive_moe(h, W, p, c)))
            else:
                new_xs.append(f32(x + naive_mlp(h, W, p + "mlp.")))
        xs = new_xs
    head = W["model.embed_tokens.weight"] if c["tie_word_embeddings"] else W["lm_head.weight"]
    return naive_linear(naive_rms(xs[-1], W["model.norm.weight"], eps), head)


def check_reference(msm, tmp):
    presets = [("qwen3-tiny", ["--dtype", "bf16"]), ("llama-tiny", ["--dtype", "fp16"]),
               ("qwen2-tiny", ["--dtype", "fp32", "--shards", "2"]),
               ("qwen3-moe-tiny", ["--dtype", "bf16", "--mlp-only-layers", "1"])]
    for preset, extra in presets:
        out = os.path.join(tmp, "ref-" + preset)
        msm.main(["--out", out, "--preset", preset, "--vocab", "512", "--no-tokenizer",
                  "--seed", "3"] + extra)
        model = reference.load_model(out)
        rng = np.random.default_rng(11)
        for n in (1, 9, 40):
            ids = rng.integers(0, 512, n).tolist()
            ours = model.forward(ids)[-1].numpy()
            naive = naive_forward(out, ids)
            diff = float(np.max(np.abs(ours - naive)))
            scale = float(np.max(np.abs(naive)))
            check(diff <= 1e-5 * max(1.0, scale) and int(ours.argmax()) == int(naive.argmax()),
                  f"reference == naive: {preset} ({extra[1]}) n={n}: max |dlogit| {diff:.2e} "
                  f"(max |logit| {scale:.2f})")
            # Prefill in two chunks through the KV cache == one full forward.
            cache = model.new_cache()
            model.forward(ids[:n // 2 + 1], cache)
            if n > 1:
                chunked = model.forward(ids[n // 2 + 1:], cache)[-1].numpy()
                check(np.array_equal(chunked, ours), f"chunked prefill == full forward, n={n}")


def main():
    torch.set_num_threads(1)
    msm = load_make_synthetic_model()
    with tempfile.TemporaryDirectory() as tmp:
        check_bf16()
        check_safetensors(msm, tmp)
        check_reference(msm, tmp)
    print(f"{len(FAILURES)} failure(s)")
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Trains the model that ships with Tandem: a small Llama on English text from Debian packages.

Steps (all seeded, so a rerun on the same package versions and torch build gives the same model):
  1. corpus: fortunes, WordNet definitions with their example sentences, prose of the Python
     documentation and of the Debian Reference (tools/tiny_corpus.py, which names the packages to
     install); a share of the documents that answer a question is also rendered as a ChatML
     exchange so chat prompts get an answer;
  2. tokenizer: byte-level BPE trained here (tools/bpe_tokenizer.py), written as tokenizer.json;
  3. model: LlamaForCausalLM-shaped network trained with AdamW on 256-token windows, matmuls in
     bf16 under torch.autocast (fp32 master weights; --no-bf16 for fp32 throughout);
     checkpoints go to --work so an interrupted run resumes where it stopped;
  4. export: config.json, model.safetensors (bf16), generation_config.json, tokenizer files and
     README.md (corpus, licences, parameters, time, loss, greedy and sampled outputs) into --out.

Run (about 45 minutes on 2 idle cores with bf16 matmuls, 1.3 hours on 2 cores shared with builds):
  apt-get install -y fortunes wordnet-base python3.11-doc debian-reference-en
  nice -n 5 /usr/bin/python3 tools/train_tiny_model.py --out models/tandem-tiny-english
"""

import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np

# Under CPU contention, spinning OpenMP workers slow every thread down; sleep instead.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_tokenizer  # noqa: E402
from hf_safetensors import (read_model_tensors, to_bf16_bits, to_f32,  # noqa: E402
                            write_safetensors)

import tiny_corpus  # noqa: E402


def render_documents(corpus, rng, chat_share):
    """[(source, text)]: every document as plain text, and a `chat_share` of those that answer a
    question also as a ChatML exchange (source "chat"); shuffled."""
    docs = []
    for d in corpus:
        docs.append((d.source, d.text))
        if d.question is not None and rng.random() < chat_share:
            answer = d.text.split("\n\n")[0]
            docs.append(("chat", f"<|im_start|>user\n{d.question}<|im_end|>\n"
                                 f"<|im_start|>assistant\n{answer}<|im_end|>\n"))
    rng.shuffle(docs)
    return docs


# ----------------------------------------------------------------------------------------------
# Model: HF LlamaForCausalLM's computation (fp32 weights; bf16 matmuls under autocast)


class Llama(torch.nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, hd = cfg["hidden_size"], cfg["head_dim"]
        nh, nkv, inter = (cfg["num_attention_heads"], cfg["num_key_value_heads"],
                          cfg["intermediate_size"])
        self.embed = torch.nn.Embedding(cfg["vocab_size"], h)
        self.layers = torch.nn.ModuleList()
        for _ in range(cfg["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.input_norm = torch.nn.Parameter(torch.ones(h))
            layer.q = torch.nn.Linear(h, nh * hd, bias=False)
            layer.k = torch.nn.Linear(h, nkv * hd, bias=False)
            layer.v = torch.nn.Linear(h, nkv * hd, bias=False)
            layer.o = torch.nn.Linear(nh * hd, h, bias=False)
            layer.post_norm = torch.nn.Parameter(torch.ones(h))
            layer.gate = torch.nn.Linear(h, inter, bias=False)
            layer.up = torch.nn.Linear(h, inter, bias=False)
            layer.down = torch.nn.Linear(inter, h, bias=False)
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.lm_head = torch.nn.Linear(h, cfg["vocab_size"], bias=False)
        std = 0.02
        for name, p in self.named_parameters():
            if p.dim() == 2:
                # GPT-2 style: residual projections scaled down by depth.
                scale = (1.0 / math.sqrt(2 * cfg["num_hidden_layers"])
                         if name.endswith(("o.weight", "down.weight")) else 1.0)
                torch.nn.init.normal_(p, 0.0, std * scale)
        inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rms(self, x, w):
        eps = self.cfg["rms_norm_eps"]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def forward(self, ids):  # ids [b, t] -> logits [b, t, vocab]
        b, t = ids.shape
        cfg = self.cfg
        nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
        freqs = torch.arange(t, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos(), emb.sin()  # [t, hd]

        def rope(x):  # [b, heads, t, hd]
            x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin

        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed(ids)
        for layer in self.layers:
            hn = self.rms(x, layer.input_norm)
            q = rope(layer.q(hn).view(b, t, nh, hd).transpose(1, 2))
            k = rope(layer.k(hn).view(b, t, nkv, hd).transpose(1, 2))
            v = layer.v(hn).view(b, t, nkv, hd).transpose(1, 2)
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            att = (q @ k.transpose(-1, -2)) / math.sqrt(hd) + mask
            y = att.softmax(-1) @ v
            x = x + layer.o(y.transpose(1, 2).reshape(b, t, nh * hd))
            hn = self.rms(x, layer.post_norm)
            x = x + layer.down(F.silu(layer.gate(hn)) * layer.up(hn))
        return self.lm_head(self.rms(x, self.norm))

    def hf_state(self):
        """[(HF tensor name, fp32 numpy array)] in HF order."""
        out = [("model.embed_tokens.weight", self.embed.weight)]
        for i, layer in enumerate(self.layers):
            p = f"model.layers.{i}."
            out += [(p + "input_layernorm.weight", layer.input_norm),
                    (p + "self_attn.q_proj.weight", layer.q.weight),
                    (p + "self_attn.k_proj.weight", layer.k.weight),
                    (p + "self_attn.v_proj.weight", layer.v.weight),
                    (p + "self_attn.o_proj.weight", layer.o.weight),
                    (p + "post_attention_layernorm.weight", layer.post_norm),
                    (p + "mlp.gate_proj.weight", layer.gate.weight),
                    (p + "mlp.up_proj.weight", layer.up.weight),
                    (p + "mlp.down_proj.weight", layer.down.weight)]
        out += [("model.norm.weight", self.norm), ("lm_head.weight", self.lm_head.weight)]
        return [(n, t.detach().float().numpy()) for n, t in out]


# ----------------------------------------------------------------------------------------------
# Training


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def batches(tokens, batch, ctx, gen):
    starts = torch.randint(0, len(tokens) - ctx - 1, (batch,), generator=gen)
    x = torch.stack([tokens[s:s + ctx + 1] for s in starts.tolist()])
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def eval_loss(model, tokens, ctx, n=8):
    model.eval()
    losses = []
    for s in range(0, min(len(tokens) - ctx - 1, n * ctx), ctx):
        x = tokens[s:s + ctx + 1][None]
        logits = model(x[:, :-1])
        losses.append(F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()).item())
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def generate(model, ids, n, temperature, gen, stop_ids, ctx):
    model.eval()
    ids = list(ids)
    out = []
    for _ in range(n):
        logits = model(torch.tensor([ids[-ctx:]]))[0, -1]
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            probs = torch.softmax(logits / temperature, -1)
            nxt = int(torch.multinomial(probs, 1, generator=gen))
        if nxt in stop_ids:
            break
        ids.append(nxt)
        out.append(nxt)
    model.train()
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--work", default="/tmp/tandem-train", help="checkpoints and tokenized data")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--vocab", type=int, default=3072)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=768)
    p.add_argument("--ctx", type=int, default=256, help="training window (tokens)")
    p.add_argument("--max-position", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=2600, help="steps of the first cosine cycle")
    p.add_argument("--extra-steps", type=int, default=0,
                   help="steps of a second cosine cycle at half the peak lr (warm restart); "
                        "a finished run resumes from its checkpoint to add them")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--chat-share", type=float, default=0.15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-bf16", dest="bf16", action="store_false",
                   help="train in fp32 throughout (default: bf16 matmuls under autocast)")
    p.add_argument("--compare", metavar="MODEL_DIR",
                   help="also score another exported model on the held-out text (per character, "
                        "so models with different tokenizers compare) and report it")
    p.add_argument("--export-only", action="store_true",
                   help="export the checkpoint in --work as it is (after an interrupted run)")
    p.add_argument("--time-probe", type=int, default=0,
                   help="run N steps, print seconds per step, and exit")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    rng = random.Random(args.seed)
    corpus = tiny_corpus.load_corpus(rng)
    docs = render_documents(corpus, rng, args.chat_share)
    print(f"corpus: {len(corpus)} documents, {sum(len(d.text) for d in corpus)} chars, "
          f"{len(docs)} rendered", flush=True)

    tok_path = os.path.join(args.out, "tokenizer.json")
    if not os.path.exists(tok_path):
        t0 = time.time()
        vocab, merges, specials = bpe_tokenizer.train_bpe((d.text for d in corpus), args.vocab)
        with open(tok_path, "w", encoding="utf-8") as f:
            json.dump(bpe_tokenizer.tokenizer_json(vocab, merges, specials), f,
                      ensure_ascii=False, indent=1)
        with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
            json.dump(bpe_tokenizer.tokenizer_config_json(specials, args.max_position), f,
                      indent=2)
        print(f"tokenizer: {len(merges)} merges in {time.time() - t0:.1f} s", flush=True)
    tok = bpe_tokenizer.Tokenizer.from_file(tok_path)
    eot = tok.specials["<|endoftext|>"]

    data_path = os.path.join(args.work, f"tokens-{args.seed}-{tok.size}.npy")
    stats_path = os.path.join(args.work, f"sources-{args.seed}-{tok.size}.json")
    if os.path.exists(data_path) and os.path.exists(stats_path):
        ids = np.load(data_path)
        with open(stats_path) as f:
            sources = json.load(f)
    else:
        t0 = time.time()
        flat, sources = [], {}
        for source, text in docs:
            n = len(flat)
            flat += tok.encode(text)
            flat.append(eot)
            entry = sources.setdefault(source, {"documents": 0, "chars": 0, "tokens": 0})
            entry["documents"] += 1
            entry["chars"] += len(text)
            entry["tokens"] += len(flat) - n
        ids = np.array(flat, dtype=np.int64)
        np.save(data_path, ids)
        with open(stats_path, "w") as f:
            json.dump(sources, f, indent=1)
        print(f"tokenized in {time.time() - t0:.1f} s", flush=True)
    n_val = len(ids) // 50
    val, train = torch.from_numpy(ids[:n_val]), torch.from_numpy(ids[n_val:])
    print(f"tokens: {len(train)} train, {len(val)} held out; by source {json.dumps(sources)}",
          flush=True)

    cfg = {"vocab_size": tok.size, "hidden_size": args.hidden,
           "num_hidden_layers": args.layers, "num_attention_heads": args.heads,
           "num_key_value_heads": args.kv_heads, "head_dim": args.hidden // args.heads,
           "intermediate_size": args.intermediate, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "max_position_embeddings": args.max_position}
    model = Llama(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    step, elapsed, log = 0, 0.0, []
    ckpt = os.path.join(args.work, "checkpoint.pt")
    if os.path.exists(ckpt) and not args.time_probe:
        state = torch.load(ckpt)
        def training_args(d):  # the arguments that shape the training run
            return {k: v for k, v in d.items()
                    if k not in ("export_only", "out", "work", "extra_steps", "compare")}
        if training_args(state["args"]) == training_args(vars(args)):
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            gen.set_state(state["gen"])
            step, elapsed, log = state["step"], state["elapsed"], state["log"]
            print(f"resumed at step {step}", flush=True)
        else:
            print("checkpoint is from different arguments; starting over", flush=True)
    total = args.steps + args.extra_steps
    print(f"model: {n_params / 1e6:.2f}M params, {args.steps}+{args.extra_steps} steps of "
          f"{args.batch}x{args.ctx} tokens", flush=True)

    if args.export_only:
        if step == 0:
            raise SystemExit(f"--export-only: no checkpoint for these arguments in {args.work}")
        if "val_loss" not in log[-1]:
            log.append(dict(log[-1], val_loss=round(eval_loss(model, val, args.ctx), 4)))
        export(args, cfg, model, tok, log, n_params, sources, val, elapsed, step)
        return
    warmup = max(1, args.steps // 25)
    t_seg = time.time()
    while step < total:
        for g in opt.param_groups:
            g["lr"] = (lr_at(step, args.steps, args.lr, warmup) if step < args.steps else
                       lr_at(step - args.steps, args.extra_steps, args.lr / 2, warmup))
        x, y = batches(train, args.batch, args.ctx, gen)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if args.time_probe and step == args.time_probe:
            dt = (time.time() - t_seg) / step
            print(f"{dt:.3f} s/step, {args.batch * args.ctx / dt:.0f} tok/s", flush=True)
            return
        if step % 25 == 0 or step in (args.steps, total):
            elapsed += time.time() - t_seg
            t_seg = time.time()
            entry = {"step": step, "loss": round(loss.item(), 4), "minutes": round(elapsed / 60, 2)}
            if step % 100 == 0 or step in (args.steps, total):
                entry["val_loss"] = round(eval_loss(model, val, args.ctx), 4)
            log.append(entry)
            print(json.dumps(entry), flush=True)
            torch.save({"args": vars(args), "model": model.state_dict(), "opt": opt.state_dict(),
                        "gen": gen.get_state(), "step": step, "elapsed": elapsed, "log": log},
                       ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
            t_seg = time.time()

    export(args, cfg, model, tok, log, n_params, sources, val, elapsed, step)
    print(f"done in {(time.time() - t_start) / 60:.1f} min", flush=True)


# ----------------------------------------------------------------------------------------------
# Export


@torch.no_grad()
def nats_per_char(model, tok, text, ctx):
    """Mean next-token loss over all of `text` in ctx-token windows, per character of text."""
    ids = torch.tensor(tok.encode(text), dtype=torch.int64)
    model.eval()
    total, n = 0.0, 0
    for s in range(0, len(ids) - 1, ctx):
        x = ids[s:s + ctx + 1][None]
        logits = model(x[:, :-1])
        total += F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten(), reduction="sum").item()
        n += x.shape[1] - 1
    model.train()
    return total / n, total / len(text), len(ids)


def load_model_dir(model_dir):
    """A model directory written by export() as (Llama, Tokenizer)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    cfg = {k: c[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers",
                             "num_attention_heads", "num_key_value_heads", "head_dim",
                             "intermediate_size", "rms_norm_eps", "rope_theta",
                             "max_position_embeddings")}
    model = Llama(cfg)
    tensors = read_model_tensors(model_dir)
    with torch.no_grad():
        for (name, _), p in zip(model.hf_state(), hf_parameters(model)):
            dtype, bits = tensors[name]
            p.copy_(torch.from_numpy(to_f32(dtype, bits).copy()))
    return model, bpe_tokenizer.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))


def hf_parameters(model):
    """The parameters in the order of Llama.hf_state()."""
    out = [model.embed.weight]
    for layer in model.layers:
        out += [layer.input_norm, layer.q.weight, layer.k.weight, layer.v.weight, layer.o.weight,
                layer.post_norm, layer.gate.weight, layer.up.weight, layer.down.weight]
    return out + [model.norm, model.lm_head.weight]


CHAT_SAMPLES = ["What is the meaning of life?", "Tell me a fortune about computers.",
                "What is a computer?"]


def export(args, cfg, model, tok, log, n_params, sources, val, elapsed, steps_done):
    eot, im_start, im_end = (tok.specials[s] for s in bpe_tokenizer.SPECIAL_TOKENS)
    tensors = [(n, "BF16", to_bf16_bits(a)) for n, a in model.hf_state()]
    write_safetensors(os.path.join(args.out, "model.safetensors"), tensors)
    config = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": eot, "eos_token_id": eot, "head_dim": cfg["head_dim"],
        "hidden_act": "silu", "hidden_size": cfg["hidden_size"], "initializer_range": 0.02,
        "intermediate_size": cfg["intermediate_size"],
        "max_position_embeddings": cfg["max_position_embeddings"], "mlp_bias": False,
        "model_type": "llama", "num_attention_heads": cfg["num_attention_heads"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_key_value_heads": cfg["num_key_value_heads"], "pretraining_tp": 1,
        "rms_norm_eps": cfg["rms_norm_eps"], "rope_scaling": None,
        "rope_theta": cfg["rope_theta"], "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": True,
        "vocab_size": cfg["vocab_size"]}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    gen_cfg = {"bos_token_id": eot, "eos_token_id": [eot, im_end], "do_sample": True,
               "temperature": 0.8, "top_p": 0.95, "transformers_version": "4.51.0"}
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
        f.write("\n")

    # Held-out loss and samples from the exported (bf16-rounded) weights.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.from_numpy(
                (to_bf16_bits(p.numpy()).astype(np.uint32) << 16).view(np.float32)))
    held_out_text = tok.decode(val.tolist())
    held_out = nats_per_char(model, tok, held_out_text, args.ctx)
    baseline = None
    if args.compare:
        other, other_tok = load_model_dir(args.compare)
        baseline = (os.path.basename(os.path.normpath(args.compare)),
                    nats_per_char(other, other_tok, held_out_text, args.ctx))
    gen = torch.Generator().manual_seed(args.seed)
    stop = {eot, im_end}
    samples = []
    for prompt in ["The meaning of life is", "A programmer", "Love is", "Q: Why did the"]:
        greedy = tok.decode(generate(model, tok.encode(prompt), 60, 0.0, gen, stop, args.ctx))
        warm = tok.decode(generate(model, tok.encode(prompt), 60, 0.8, gen, stop, args.ctx))
        samples.append((prompt, greedy, warm))
    chats = []
    for question in CHAT_SAMPLES:
        chat = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
        greedy = tok.decode(generate(model, tok.encode(chat), 64, 0.0, gen, stop, args.ctx),
                            skip_special=True)
        warm = tok.decode(generate(model, tok.encode(chat), 64, 0.8, gen, stop, args.ctx),
                          skip_special=True)
        chats.append((question, greedy, warm))
    write_readme(args, cfg, log, n_params, sources, elapsed, samples, chats, tok, steps_done,
                 held_out, len(held_out_text), baseline)


def write_readme(args, cfg, log, n_params, sources, elapsed, samples, chats, tok, steps_done,
                 held_out, held_out_chars, baseline):
    last = log[-1]
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    name = os.path.basename(os.path.normpath(args.out))
    n_tokens = sum(s["tokens"] for s in sources.values())
    n_chars = sum(s["chars"] for s in sources.values())
    trained = steps_done * args.batch * args.ctx

    def block(text):
        return "\n".join("    " + line for line in text.split("\n"))
    lines = [
        f"# {name}", "",
        "The model that ships with Tandem so the quickstart runs with nothing downloaded: a small",
        "Llama-architecture decoder (`LlamaForCausalLM`, loadable by Hugging Face transformers)",
        "trained from scratch on freely licensed English text from Debian packages (fortune",
        "cookies, WordNet's definitions and example sentences, the Python documentation and the",
        "Debian Reference), with its own byte-level BPE tokenizer. It writes plain English",
        "sentences, often wrong and seldom on topic: it is a test fixture, not an assistant.", "",
        "## Corpus and licences", "",
        "Read by `tools/tiny_corpus.py` from the installed packages (`apt-get install -y "
        + " ".join(p for p, _ in tiny_corpus.PACKAGES.values()) + "`):", "",
        "| source | Debian package (version) | documents | characters | tokens | licence |",
        "|---|---|---|---|---|---|"]
    for source, desc in SOURCE_NOTES.items():
        s = sources[source]
        pkg = (f"`{tiny_corpus.PACKAGES[source][0]}` ({tiny_corpus.package_version(source)})"
               if source in tiny_corpus.PACKAGES else "")
        lines.append(f"| {desc[0]} | {pkg} | {s['documents']} | {s['chars']} | {s['tokens']} | "
                     f"{desc[1]} |")
    lines += [
        f"| total | | {sum(s['documents'] for s in sources.values())} | {n_chars} | {n_tokens} "
        "| |", "",
        f"Each document ends with `<|endoftext|>`; documents are shuffled (seed {args.seed}). "
        f"ChatML exchanges: {args.chat_share:.0%} of the documents that answer a question are "
        "repeated as `<|im_start|>user` question / `<|im_start|>assistant` answer, where the "
        "question is a FAQ heading, one of a few requests for a fortune, or for a WordNet entry "
        "\"What is a WORD?\", \"What does WORD mean?\", \"What is the meaning of WORD?\", "
        "\"Define WORD.\" or \"Explain WORD.\" (the answer is the entry's first paragraph).", "",
        "These weights are derived from all four sources; whoever redistributes them should "
        "keep the notices of each: fortunes, BSD licence of the Regents of the University of "
        "California (`/usr/share/doc/fortunes/copyright`; the quotations belong to their authors "
        "as credited in the text); WordNet 3.0, the WordNet 3.0 licence of Princeton University "
        "(`/usr/share/doc/wordnet-base/copyright`); the Python documentation, the PSF licence "
        "(`/usr/share/doc/python3.11/copyright`); the Debian Reference, GPL-2+ by Osamu Aoki "
        "(`/usr/share/doc/debian-reference-en/copyright`).", "",
        "## Model", "",
        f"- Llama: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
        f"{cfg['num_attention_heads']} heads / {cfg['num_key_value_heads']} KV heads (head_dim "
        f"{cfg['head_dim']}), SwiGLU {cfg['intermediate_size']}, RMSNorm eps "
        f"{cfg['rms_norm_eps']}, RoPE theta {cfg['rope_theta']:.0f}, untied lm_head, vocab "
        f"{cfg['vocab_size']}, max_position_embeddings {cfg['max_position_embeddings']} (trained "
        f"on {args.ctx}-token windows); {n_params / 1e6:.2f}M parameters, stored bf16 "
        f"({size / 1e6:.1f} MB directory).",
        f"- Tokenizer: byte-level BPE, {len(tok.ranks)} merges trained on the corpus, Qwen2 "
        "pre-tokenizer regex, NFC, special tokens `<|endoftext|>` (end of a document, also EOS), "
        "`<|im_start|>`, `<|im_end|>`; ChatML chat template.",
        f"- Trained {steps_done} steps"
        + (f" (of {args.steps + args.extra_steps} planned, stopped early)"
           if steps_done < args.steps + args.extra_steps else "")
        + f" of {args.batch} x {args.ctx} tokens ({trained / 1e6:.1f}M tokens, "
        f"{trained / n_tokens:.1f} passes over the training split), AdamW (lr {args.lr}, betas "
        f"0.9/0.95, weight decay 0.1, warmup then cosine to 10% over {args.steps} steps"
        + (f", then a warm restart at lr {args.lr / 2} with cosine over {args.extra_steps} steps"
           if args.extra_steps else "")
        + "), clip 1.0, "
        + ("bf16 matmuls under `torch.autocast` with fp32 weights" if args.bf16 else "fp32")
        + f", seed {args.seed}, {args.threads} threads under `nice -n {os.nice(0)}`: "
        f"{elapsed / 60:.1f} "
        "minutes of wall time on a 2-core machine shared with parallel C++ builds (the process "
        "got a fraction of the cores).",
        f"- Final training loss {last['loss']:.3f}. Held-out loss {held_out[0]:.3f} per token "
        f"(perplexity {math.exp(held_out[0]):.1f}), {held_out[1]:.3f} nats per character, over "
        f"all {held_out[2]} tokens ({held_out_chars} characters) of the held-out split (the "
        "first 2% of the shuffled token stream, never trained on; bf16 weights as exported).",
    ]
    if baseline:
        lines.append(
            f"- For comparison, `{baseline[0]}` scores {baseline[1][1]:.3f} nats per character "
            f"({baseline[1][0]:.3f} per token of its own tokenizer) on the same held-out text.")
    lines += [
        "- Reproduce: `nice -n 5 /usr/bin/python3 tools/train_tiny_model.py --out "
        f"models/{name}`.", "",
        "## Use", "",
        f"    build/bin/tandem-run --model-path models/{name} --prompt \"Love is\"",
        f"    build/bin/tandem-run --model-path models/{name} --chat \\",
        "        --prompt \"What is the meaning of life?\"", "",
        "Stop tokens: `<|endoftext|>` and `<|im_end|>` (generation_config.json).", "",
        "## Samples (bf16 weights, generated by the training script with PyTorch)", ""]
    for prompt, greedy, warm in samples:
        lines += [f"Prompt `{prompt}`, greedy:", "", block(prompt + greedy), "",
                  "temperature 0.8:", "", block(prompt + warm), ""]
    for question, greedy, warm in chats:
        lines += [f"Chat `{question}`, greedy:", "", block(greedy), "", "temperature 0.8:", "",
                  block(warm), ""]
    lines += ["## Training log", "",
              "Held-out loss during training: the first 8 windows (2048 tokens) of the split.", "",
              "| step | loss | held-out | minutes |", "|---|---|---|---|"]
    lines += [f"| {e['step']} | {e['loss']} | {e.get('val_loss', '')} | {e['minutes']} |"
              for e in log if "val_loss" in e]
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


SOURCE_NOTES = {  # source -> (description, licence)
    "fortunes": ("fortune cookies, all files but `art` and `ascii-art`, overstriking removed",
                 "BSD (UC Regents)"),
    "wordnet": ("WordNet definitions written as sentences, with their examples: senses with "
                "examples and the first sense of single words seen in text", "WordNet 3.0"),
    "python-docs": ("prose paragraphs of the Python tutorial, FAQ, HOWTOs and language "
                    "reference", "PSF"),
    "debian-reference": ("prose paragraphs of the Debian Reference", "GPL-2+"),
    "chat": ("ChatML exchanges made from the documents above", "as their source"),
}


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/python3
"""Writes tests/engine/goldens/<name>.json from the reference forward (reference.py).

For each golden model and each prompt length (1, 7, 33, 100, 180 tokens) it stores the prompt ids,
the fp32 logits of the last prompt position, the 64-token greedy continuation and the top1-top2
logit margin at each greedy step. Prompts are drawn from a seeded generator (random ids for the
synthetic models, English text for the shipped one); a candidate is kept only if every greedy
margin is at least --min-margin and a plain-fp32 run of the reference (different summation order)
gives the same 64 tokens, so the goldens do not hinge on last-bit differences. The JSON also
records the largest logit difference seen between the exact and the plain-fp32 reference, and the
logit tolerance derived from it.

Run from the repository root: /usr/bin/python3 tools/reference/make_goldens.py [--only NAME]
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import bpe_tokenizer  # noqa: E402
import reference  # noqa: E402

GOLDENS = [
    # (golden name, model dir relative to the repo, prompt source, int8: None, or (how the engine
    # runs it W8A8 ("w8a8": --quantization w8a8 on the model dir; "checkpoint": the model dir is a
    # compressed-tensors int8 checkpoint), the bf16 model it is compared with, the least greedy
    # margin: the per-token rounding of int8 inputs amplifies last-bit differences more than bf16
    # rounding does, and the tiny random models' logits move by up to ~0.08 in the engine))
    ("tandem-tiny-english", "models/tandem-tiny-english", "text", None),
    ("qwen3-tiny", "tests/engine/models/qwen3-tiny", "random", None),
    ("llama-tiny", "tests/engine/models/llama-tiny", "random", None),
    ("qwen2-tiny-fp32-sharded", "tests/engine/models/qwen2-tiny-fp32-sharded", "random", None),
    ("tandem-tiny-english-w8a8", "models/tandem-tiny-english", "text",
     ("w8a8", "models/tandem-tiny-english", 0.1)),
    ("qwen3-tiny-w8a8", "tests/engine/models/qwen3-tiny-w8a8", "random",
     ("checkpoint", "tests/engine/models/qwen3-tiny", 0.15)),
    # Qwen3-MoE: top-k routing is a further discontinuity (a last-bit difference in two near-equal
    # router probabilities would swap an expert); the plain-fp32 agreement check covers it.
    ("qwen3-moe-tiny", "tests/engine/models/qwen3-moe-tiny", "random", None),
    ("qwen3-moe-tiny-w8a8", "tests/engine/models/qwen3-moe-tiny-w8a8", "random",
     ("checkpoint", "tests/engine/models/qwen3-moe-tiny", 0.15)),
]
PROMPT_LENGTHS = [1, 7, 33, 100, 180]
GREEDY_STEPS = 64

TEXT = """\
The best way to predict the future is to invent it. A journey of a thousand miles begins with a
single step, but the first step is usually into a puddle. Never put off until tomorrow what you
can do the day after tomorrow. When in doubt, tell the truth; it will confound your enemies and
astound your friends. The computer is a moron, and the programmer who trusts it is another one.
There are two kinds of people in the world: those who finish what they start, and so on. You will
be successful in your work, and your friends will wonder why. Life is what happens to you while
you are busy making other plans. He who laughs last thinks slowest. A clean desk is a sign of a
cluttered desk drawer. Today is the first day of the rest of your life, so do not waste it on a
meeting. Love is an ideal thing, marriage a real thing. All the world's a stage, and most of us
are desperately unrehearsed. The early bird gets the worm, but the second mouse gets the cheese.
Experience is what you get when you did not get what you wanted. If at first you do not succeed,
destroy all evidence that you tried. Q: How many programmers does it take to change a light bulb?
A: None, that is a hardware problem. Your lucky number has been disconnected. Do not worry about
the world coming to an end today. It is already tomorrow in Australia. Everything should be made
as simple as possible, but not simpler. The trouble with the rat race is that even if you win,
you are still a rat. Nothing is impossible for the man who does not have to do it himself.
"""


def candidates(source, model_dir, vocab, length, rng):
    """Endless seeded stream of candidate prompts of `length` tokens."""
    if source == "random":
        while True:
            yield rng.integers(0, vocab, length).tolist()
    tok = bpe_tokenizer.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    ids = tok.encode(TEXT.replace("\n", " "))
    if len(ids) < length + 1:
        raise SystemExit(f"prompt text has only {len(ids)} tokens, need {length}")
    while True:
        start = int(rng.integers(0, len(ids) - length))
        yield ids[start:start + length]


def make_case(exact, plain, prompt, min_margin):
    """(greedy ids, margins, last logits, stable, spread). The plain-fp32 greedy run, which is
    the slow part, is only made for candidates whose margins already pass."""
    greedy, margins, logits = exact.greedy(prompt, GREEDY_STEPS)
    spread = float((logits - plain.forward(prompt)[-1]).abs().max())
    stable = False
    if min(margins) >= min_margin:
        stable = plain.greedy(prompt, GREEDY_STEPS)[0] == greedy
    return greedy, margins, logits, stable, spread


def int8_vs_bf16(bf16_model, cases):
    """How far the int8 goldens' logits are from the bf16 reference's on the same prompts, and
    the share of the int8 greedy tokens the bf16 reference also picks (teacher-forced: bf16's
    argmax after the prompt and the int8 tokens before each one)."""
    diffs, scales, agree, total = [], [], 0, 0
    for case in cases:
        prompt, greedy = case["prompt_ids"], case["greedy_ids"]
        logits = bf16_model.forward(prompt + greedy[:-1])
        last = torch.tensor(case["last_logits"], dtype=torch.float32)
        diffs.append(float((last - logits[len(prompt) - 1]).abs().max()))
        scales.append(float(logits[len(prompt) - 1].abs().max()))
        picks = logits[len(prompt) - 1:].argmax(dim=-1).tolist()
        agree += sum(int(a == b) for a, b in zip(picks, greedy))
        total += len(greedy)
    return {"max_abs_logit_diff": float(f"{max(diffs):.4g}"),
            "max_abs_logit": float(f"{max(scales):.4g}"),
            "greedy_agreement": float(f"{agree / total:.4g}"), "greedy_tokens": total}


def make_golden(name, rel_dir, source, int8, min_margin, attempts):
    model_dir = os.path.join(REPO, rel_dir)
    w8a8 = int8 is not None and int8[0] == "w8a8"
    if int8 is not None:
        min_margin = max(min_margin, int8[2])
    exact = reference.load_model(model_dir, exact=True, w8a8=w8a8)
    plain = reference.load_model(model_dir, exact=False, w8a8=w8a8)
    vocab = exact.cfg.vocab
    rng = np.random.default_rng(20240 + sum(map(ord, name)))
    cases, spreads, notes = [], [], []
    for length in PROMPT_LENGTHS:
        best = None
        for attempt, prompt in zip(range(attempts), candidates(source, model_dir, vocab, length,
                                                               rng)):
            greedy, margins, logits, stable, spread = make_case(exact, plain, prompt,
                                                                 min_margin)
            spreads.append(spread)
            score = min(margins) if stable or min(margins) < min_margin else -1.0
            if best is None or score > best[0]:
                best = (score, prompt, greedy, margins, logits, attempt)
            if score >= min_margin:
                break
        score, prompt, greedy, margins, logits, attempt = best
        if score < min_margin:
            notes.append(f"prompt length {length}: no candidate in {attempts} reached margin "
                         f"{min_margin}; kept the best (min margin {score:.2e})")
        print(f"  {name} len {length}: candidate {attempt}, min margin {min(margins):.4f}",
              flush=True)
        case = {"prompt_ids": prompt}
        if source == "text":
            tok = bpe_tokenizer.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
            case["prompt_text"] = tok.decode(prompt)
            case["greedy_text"] = tok.decode(greedy)
        cases.append(dict(case, **{
            "last_logits": [float(f"{v:.9g}") for v in logits.tolist()],
            "greedy_ids": greedy,
            "greedy_margins": [float(f"{m:.6g}") for m in margins],
        }))
    spread = max(spreads)
    atol = float(f"{max(1e-2, 4 * spread):.1g}")
    note = (
        "Reference = tools/reference/reference.py: the rounding points of docs/numerics.md "
        "(bf16 weights, bf16-rounded linear inputs and KV cache, fp32 elsewhere) "
        "with every sum accumulated in float64 and rounded once to fp32. An engine accumulating "
        "in fp32 in another order differs in the last bits of each sum; where such a difference "
        "crosses a bf16 rounding point (a linear input, a K/V element) it grows to one bf16 ulp "
        "(2^-8 relative) and spreads to the logits. Measured here: plain fp32 torch vs the "
        f"reference, max |dlogit| = {spread:.2e} over {len(spreads)} prompts. Compare "
        f"last_logits with an absolute tolerance of logit_atol = {atol} (4x that, at least "
        "1e-2) and demand identical greedy_ids: every case was chosen so that each of its "
        f"{GREEDY_STEPS} greedy steps has a top1-top2 margin >= {min_margin} (see "
        "greedy_margins) and the plain fp32 reference gives the same tokens. Greedy decoding "
        "does not stop at end-of-text tokens (ignore_eos)."
        + (" " + " ".join(notes) if notes else ""))
    doc = {"model_dir": rel_dir, "tolerance_note": note, "logit_atol": atol,
           "greedy_steps": GREEDY_STEPS, "generated_by": "tools/reference/make_goldens.py",
           "cases": cases}
    if int8 is not None:
        if w8a8:
            doc["quantization"] = "w8a8"
        bf16_model = reference.load_model(os.path.join(REPO, int8[1]), exact=True)
        doc["int8_vs_bf16"] = dict(int8_vs_bf16(bf16_model, cases), bf16_model_dir=int8[1])
        doc["tolerance_note"] += (
            " W8A8 int8 (docs/numerics.md): the linear layers quantize their inputs per token, "
            "a further rounding point, so the spread above is measured with the int8 "
            "arithmetic on both sides; int8_vs_bf16 gives the distance to the bf16 reference.")
        print(f"  int8 vs bf16: {doc['int8_vs_bf16']}", flush=True)
    out_dir = os.path.join(REPO, "tests", "engine", "goldens")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {os.path.relpath(path, REPO)}: {len(cases)} cases, spread {spread:.2e}, "
          f"atol {atol}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", help="golden name(s) to regenerate")
    ap.add_argument("--min-margin", type=float, default=2e-2)
    ap.add_argument("--attempts", type=int, default=150)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name, rel_dir, source, int8 in GOLDENS:
        if args.only and name not in args.only:
            continue
        if not os.path.isdir(os.path.join(REPO, rel_dir)):
            print(f"skip {name}: {rel_dir} does not exist", flush=True)
            continue
        t0 = time.time()
        make_golden(name, rel_dir, source, int8, args.min_margin, args.attempts)
        print(f"  {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()

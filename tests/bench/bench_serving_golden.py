#!/usr/bin/python3
"""Writes tests/bench/golden/bench_serving_datasets.json: what `python -m sglang.bench_serving`
draws for fixed seeds, computed with numpy (Debian's python3-numpy) and CPython's `random`, with
bench_serving's algorithm written out below (sglang itself is not needed). The version followed
is the one whose flags the seed reports print (datasets in sglang.benchmark.datasets):

  main:                random.seed(seed); np.random.seed(seed)
  compute_random_lens: [0] * n if full_len <= 0 else
                       np.random.randint(max(int(full_len * ratio), 1), full_len + 1, size=n)
  random-ids:          input lens, output lens, then offsets = np.random.randint(0, vocab, n);
                       prompt i = [(offsets[i] + i + j) % vocab for j in range(input_lens[i])]
  random (ShareGPT):   input lens, output lens, then random.shuffle(conversations)
  generated-shared-prefix: system lens, question lens, output lens; then
                       random.choices(vocabulary, k=len) per system prompt, then per question;
                       then random.shuffle(rows)
  arrivals:            np.random.exponential(1 / rate) after each request

Run from the repository root: tests/bench/bench_serving_golden.py (rewrites the file).
"""
import json
import os
import random

import numpy as np

TINY_VOCAB = 3069  # models/tandem-tiny-english: len(tokenizer.json model.vocab)
TINY_VOCABULARY = 3072  # every id, added tokens included (get_vocab())


def compute_random_lens(full_len, range_ratio, num):
    if full_len <= 0:
        return [0] * num
    return np.random.randint(
        max(int(full_len * range_ratio), 1), full_len + 1, size=num
    ).tolist()


def random_ids(seed, num_prompts, input_len, output_len, range_ratio, vocab, rate=None,
               with_ids=True):
    random.seed(seed)
    np.random.seed(seed)
    input_lens = compute_random_lens(input_len, range_ratio, num_prompts)
    output_lens = compute_random_lens(output_len, range_ratio, num_prompts)
    offsets = np.random.randint(0, vocab, size=num_prompts)
    prompts = [
        [int((offsets[i] + i + j) % vocab) for j in range(input_lens[i])] if with_ids else []
        for i in range(num_prompts)
    ]
    case = {
        "seed": seed,
        "num_prompts": num_prompts,
        "input_len": input_len,
        "output_len": output_len,
        "range_ratio": range_ratio,
        "vocab_size": vocab,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "prompt_ids": prompts,
    }
    if rate is not None:
        case["request_rate"] = rate
        case["intervals"] = [float(np.random.exponential(1.0 / rate)) for _ in range(num_prompts)]
    return case


def sharegpt_order(seed, num_prompts, input_len, output_len, range_ratio, conversations):
    random.seed(seed)
    np.random.seed(seed)
    input_lens = compute_random_lens(input_len, range_ratio, num_prompts)
    output_lens = compute_random_lens(output_len, range_ratio, num_prompts)
    order = list(range(conversations))
    random.shuffle(order)
    return {
        "seed": seed,
        "num_prompts": num_prompts,
        "input_len": input_len,
        "output_len": output_len,
        "range_ratio": range_ratio,
        "conversations": conversations,
        "input_lens": input_lens,
        "output_lens": output_lens,
        "shuffled_order": order,
    }


def shared_prefix(seed, groups, per_group, system_len, question_len, output_len, range_ratio):
    random.seed(seed)
    np.random.seed(seed)
    system_lens = compute_random_lens(system_len, range_ratio, groups)
    question_lens = compute_random_lens(question_len, range_ratio, groups * per_group)
    output_lens = compute_random_lens(output_len, range_ratio, groups * per_group)
    vocabulary = list(range(TINY_VOCABULARY))
    system_ids = [random.choices(vocabulary, k=n) for n in system_lens]
    question_ids = [random.choices(vocabulary, k=n) for n in question_lens]
    order = list(range(groups * per_group))  # row g * per_group + p
    random.shuffle(order)
    return {
        "seed": seed,
        "num_groups": groups,
        "prompts_per_group": per_group,
        "system_prompt_len": system_len,
        "question_len": question_len,
        "output_len": output_len,
        "range_ratio": range_ratio,
        "system_ids": system_ids,
        "question_ids": question_ids,
        "output_lens": output_lens,
        "row_order": order,
    }


def main():
    golden = {
        "numpy": np.__version__,
        "random_ids": [
            # The seed-004 shape (200 x 64 in / 16 out, seed 1), range ratio 0 (the default).
            random_ids(1, 200, 64, 16, 0.0, TINY_VOCAB, rate=10.0),
            random_ids(1, 200, 64, 16, 0.0, 151643),  # Qwen2.5's vocab_size
            random_ids(42, 50, 300, 40, 0.5, TINY_VOCAB, rate=2.5),
            random_ids(7, 20, 16, 0, 0.0, TINY_VOCAB),  # zero-token requests
            # The 64-bit range path of randint; lengths only (five billion ids per prompt).
            random_ids(3, 10, 5_000_000_000, 4, 0.999, TINY_VOCAB, with_ids=False),
        ],
        "sharegpt_random": [sharegpt_order(1, 5, 40, 8, 0.0, 7)],
        "generated_shared_prefix": [
            shared_prefix(1, 3, 4, 20, 6, 9, 1.0),
            shared_prefix(5, 2, 3, 30, 10, 12, 0.5),
        ],
    }
    golden["random_ids"][4].pop("prompt_ids")
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden",
                       "bench_serving_datasets.json")
    with open(out, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()

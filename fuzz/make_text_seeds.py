#!/usr/bin/env python3
"""Writes the seed corpora of the text-format fuzzers from the shipped model's real files.

    python3 fuzz/make_text_seeds.py            (from the repo root)

engine/fuzz/corpus/tokenizer/       prompts: ASCII, accents, CJK, emoji, special tokens, bad UTF-8
engine/fuzz/corpus/tokenizer_json/  small tokenizer.json files cut from the shipped one, plus
                                    near-valid variants (both merge formats, a missing field)
engine/fuzz/corpus/safetensors/     small safetensors images (F32/BF16/F16/I64, metadata), a
                                    truncated one and the shipped model's real header
The binary protocols' seeds come from the real encoders: build-fuzz/bin/make_seeds.
Deterministic: running it twice writes the same bytes.
"""
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "tandem-tiny-english")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    with open(path, "wb") as f:
        f.write(data)


def tokenizer_seeds():
    out = os.path.join(ROOT, "engine", "fuzz", "corpus", "tokenizer")
    texts = {
        "ascii": "Once upon a time, there was a fortune: 42 cookies.\n",
        "contractions": "I'll say it's what they've done, we're sure you'd've known.",
        "whitespace": "  leading\t\ttabs\r\n\r\n   trailing   \n",
        "accents": "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m",
        "decomposed": "Cafe\u0301 A\u030a",  # NFC composes these
        "cjk": "\u4eca\u65e5\u306f\u3001\u4e16\u754c\uff01 \ud55c\uad6d\uc5b4",
        "emoji": "\U0001F600\U0001F680 \u2764\ufe0f family: \U0001F468\u200d\U0001F469\u200d\U0001F467",
        "specials": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
        "digits": "3.14159 2026-11-22 0x7fff 1e-9",
    }
    for name, text in texts.items():
        write(os.path.join(out, name), text)
    write(os.path.join(out, "bad_utf8"), b"ok \xff\xfe \xc3 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 end")


def tokenizer_json_seeds():
    out = os.path.join(ROOT, "engine", "fuzz", "corpus", "tokenizer_json")
    with open(os.path.join(MODEL, "tokenizer.json"), encoding="utf-8") as f:
        full = json.load(f)
    vocab = full["model"]["vocab"]
    # The 256 byte tokens, the first merges whose parts and result stay in the small vocabulary.
    small_vocab = {t: i for t, i in vocab.items() if i < 256}
    merges = []
    for m in full["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in small_vocab and b in small_vocab and a + b in vocab and len(merges) < 40:
            merges.append(f"{a} {b}")
            small_vocab[a + b] = len(small_vocab)
    added = [dict(t, id=len(small_vocab) + k) for k, t in enumerate(full["added_tokens"])]
    small = dict(full, added_tokens=added)
    small["model"] = dict(full["model"], vocab=small_vocab, merges=merges)
    write(os.path.join(out, "small"), json.dumps(small, ensure_ascii=False))
    pairs = dict(small)
    pairs["model"] = dict(small["model"], merges=[m.split(" ") for m in merges])
    write(os.path.join(out, "merge_pairs"), json.dumps(pairs, ensure_ascii=False))
    no_normalizer = dict(small, normalizer=None)
    write(os.path.join(out, "no_normalizer"), json.dumps(no_normalizer, ensure_ascii=False))
    missing = dict(small)
    missing["model"] = {k: v for k, v in small["model"].items() if k != "merges"}
    write(os.path.join(out, "missing_merges"), json.dumps(missing, ensure_ascii=False))
    text = json.dumps(small, ensure_ascii=False)
    write(os.path.join(out, "truncated"), text[: len(text) // 2])


def safetensors_image(tensors, metadata=None, pad_header_to=8):
    header = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % pad_header_to)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    out = os.path.join(ROOT, "engine", "fuzz", "corpus", "safetensors")
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    bf16 = bytes(range(16))
    small = safetensors_image(
        {"model.embed_tokens.weight": ("BF16", [2, 4], bf16),
         "model.norm.weight": ("F32", [6], f32),
         "lm_head.bias": ("F16", [3], b"\x00\x3c" * 3),
         "scalar": ("F32", [], struct.pack("<f", 0.5)),
         "empty": ("F32", [0, 4], b""),
         "steps": ("I64", [1], struct.pack("<q", 7))},
        metadata={"format": "pt"})
    write(os.path.join(out, "small"), small)
    write(os.path.join(out, "truncated_data"), small[:-5])
    write(os.path.join(out, "one_tensor"), safetensors_image({"w": ("F32", [1, 1], f32[:4])}))
    with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = f.read(n)
    # The real header over no data: every tensor lies past the end (must be refused cleanly).
    write(os.path.join(out, "shipped_header_only"), struct.pack("<Q", n) + header)


if __name__ == "__main__":
    tokenizer_seeds()
    tokenizer_json_seeds()
    safetensors_seeds()

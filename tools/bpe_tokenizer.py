"""Byte-level BPE: training, encoding with HF `tokenizers` semantics, and tokenizer.json export.

The format written is what Qwen2/Qwen2.5 ship: NFC normalizer, pre-tokenizer
Sequence[Split(Qwen2 regex, Isolated), ByteLevel(add_prefix_space=false, use_regex=false)],
BPE model with a vocab and "a b" merges, ByteLevel decoder, special tokens as added tokens.
Encoding here follows the same rules (added tokens split first, then NFC, regex split, bytes mapped
to GPT-2's printable characters, merges applied lowest rank first), so ids computed by this module
equal those of the HF tokenizer loaded from the written file.
"""

import heapq
import json
import unicodedata
from collections import Counter

import regex

# Qwen2's pre-tokenizer pattern (single digits, case-insensitive contractions).
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_SPLIT_RE = regex.compile(SPLIT_PATTERN)


def bytes_to_unicode():
    """GPT-2's reversible map from the 256 byte values to printable unicode characters."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) +
          list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def pre_tokenize(text):
    """NFC + regex split + byte-level mapping: a list of words, each a string of byte chars."""
    text = unicodedata.normalize("NFC", text)
    return ["".join(BYTE_TO_CHAR[b] for b in piece.encode("utf-8"))
            for piece in _SPLIT_RE.findall(text)]


def train_bpe(texts, vocab_size, specials=SPECIAL_TOKENS):
    """Learns merges until len(bytes) + len(merges) + len(specials) == vocab_size.

    Deterministic: the most frequent pair wins, ties go to the smallest (first, second) ids.
    Returns (vocab {token string: id}, merges [(a, b)], specials {content: id}).
    """
    word_counts = Counter()
    for text in texts:
        word_counts.update(pre_tokenize(text))
    id_to_tok = [BYTE_TO_CHAR[b] for b in range(256)]
    tok_to_id = {t: i for i, t in enumerate(id_to_tok)}
    words = [[tok_to_id[c] for c in w] for w in word_counts]
    counts = list(word_counts.values())

    pair_counts = Counter()
    where = {}
    for wi, (w, c) in enumerate(zip(words, counts)):
        for p in zip(w, w[1:]):
            pair_counts[p] += c
            where.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)

    n_merges = vocab_size - 256 - len(specials)
    merges = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg or -neg <= 0:
            continue  # stale heap entry
        new_id = len(id_to_tok)
        id_to_tok.append(id_to_tok[pair[0]] + id_to_tok[pair[1]])
        merges.append(pair)
        changed = set()
        for wi in where.pop(pair, ()):
            w, c = words[wi], counts[wi]
            if len(w) < 2:
                continue
            for p in zip(w, w[1:]):
                pair_counts[p] -= c
                changed.add(p)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    out.append(new_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            words[wi] = out
            for p in zip(out, out[1:]):
                pair_counts[p] += c
                changed.add(p)
                where.setdefault(p, set()).add(wi)
        pair_counts.pop(pair, None)
        for p in changed:
            c = pair_counts.get(p, 0)
            if c > 0 and p != pair:
                heapq.heappush(heap, (-c, p))
    vocab = {t: i for i, t in enumerate(id_to_tok)}
    merge_strs = [(id_to_tok[a], id_to_tok[b]) for a, b in merges]
    special_ids = {s: len(id_to_tok) + i for i, s in enumerate(specials)}
    return vocab, merge_strs, special_ids


class Tokenizer:
    """Encoder/decoder over a trained (vocab, merges, specials) with HF BPE semantics."""

    def __init__(self, vocab, merges, specials):
        self.vocab = vocab
        self.ranks = {tuple(m): i for i, m in enumerate(merges)}
        self.specials = specials
        self.id_to_tok = {i: t for t, i in vocab.items()}
        self.id_to_special = {i: s for s, i in specials.items()}
        self._cache = {}
        self._special_re = regex.compile("|".join(regex.escape(s) for s in specials))

    @classmethod
    def from_file(cls, path):
        with open(path, encoding="utf-8") as f:
            tok = json.load(f)
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in tok["model"]["merges"]]
        specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
        return cls(tok["model"]["vocab"], merges, specials)

    @property
    def size(self):
        return max(max(self.vocab.values()), max(self.specials.values())) + 1

    def _bpe(self, word):
        if word in self._cache:
            return self._cache[word]
        parts = list(word)
        while len(parts) > 1:
            best, best_rank = None, None
            for p in zip(parts, parts[1:]):
                r = self.ranks.get(p)
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = p, r
            if best is None:
                break
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == best[0] and parts[i + 1] == best[1]:
                    out.append(parts[i] + parts[i + 1])
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        ids = [self.vocab[p] for p in parts]
        self._cache[word] = ids
        return ids

    def encode(self, text, allow_special=True):
        ids, pos = [], 0
        matches = self._special_re.finditer(text) if allow_special else ()
        for m in matches:
            for w in pre_tokenize(text[pos:m.start()]):
                ids += self._bpe(w)
            ids.append(self.specials[m.group(0)])
            pos = m.end()
        for w in pre_tokenize(text[pos:]):
            ids += self._bpe(w)
        return ids

    def decode(self, ids, skip_special=False):
        out, buf = [], []
        for i in ids:
            if i in self.id_to_special:
                if buf:
                    out.append(bytes(buf).decode("utf-8", errors="replace"))
                    buf = []
                if not skip_special:
                    out.append(self.id_to_special[i])
            else:
                buf += [CHAR_TO_BYTE[c] for c in self.id_to_tok[i]]
        if buf:
            out.append(bytes(buf).decode("utf-8", errors="replace"))
        return "".join(out)


def tokenizer_json(vocab, merges, specials):
    """The HF tokenizer.json document (dict) for a trained byte-level BPE."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for s, i in sorted(specials.items(), key=lambda kv: kv[1])],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_PATTERN}, "behavior": "Isolated",
             "invert": False},
            byte_level]},
        "post_processor": dict(byte_level),
        "decoder": dict(byte_level),
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def tokenizer_config_json(specials, model_max_length):
    """The HF tokenizer_config.json document (dict), Qwen2 style with a ChatML template."""
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                     "single_word": False, "special": True}
            for s, i in sorted(specials.items(), key=lambda kv: kv[1])},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHATML_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }

"""The English corpus of the shipped model, read from Debian packages installed on this machine.

Each source is a Debian package whose files are read in a fixed order, so the corpus (and with a
fixed seed the model) is reproducible on the same package versions:
  - fortunes:       fortune cookies (/usr/share/games/fortunes), BSD licence;
  - wordnet-base:   WordNet 3.0 definitions and their example sentences, WordNet 3.0 licence;
  - python3.11-doc: prose paragraphs of the Python tutorial, FAQ, HOWTOs and language reference,
                    PSF licence;
  - debian-reference-en: prose paragraphs of the Debian Reference, GPL-2+.
Code blocks, tables and markup are dropped; only paragraphs that read as sentences are kept.

load_corpus() returns [Document]. A Document holds its plain text and, for some, a question it
answers (a FAQ heading, a "what does WORD mean" for a dictionary entry), which the trainer renders
as a ChatML exchange so chat prompts get an answer. A missing package stops the run with the
`apt-get install` line that provides it.
"""

import collections
import glob
import html
import os
import re

Document = collections.namedtuple("Document", "source text question")

PACKAGES = {  # source name -> (Debian package, a path the package installs)
    "fortunes": ("fortunes", "/usr/share/games/fortunes/fortunes"),
    "wordnet": ("wordnet-base", "/usr/share/wordnet/data.noun"),
    "python-docs": ("python3.11-doc", "/usr/share/doc/python3.11/html/_sources/tutorial"),
    "debian-reference": ("debian-reference-en", "/usr/share/debian-reference/ch01.en.html"),
}

FORTUNE_DIR = "/usr/share/games/fortunes"
SKIPPED_FORTUNES = {"art", "ascii-art"}  # pictures made of characters, not English
FORTUNE_PROMPTS = ["Tell me a fortune.", "Give me a fortune about {topic}.", "Say something wise.",
                   "Tell me something about {topic}.", "I need a quote about {topic}.",
                   "Make me laugh."]
FORTUNE_TOPICS = {"men-women": "men and women", "songs-poems": "songs and poems",
                  "linuxcookie": "Linux", "knghtbrd": "life", "startrek": "Star Trek",
                  "paradoxum": "paradoxes", "goedel": "logic", "zippy": "Zippy the Pinhead",
                  "miscellaneous": "anything", "fortunes": "fortune", "cookie": "anything",
                  "tao": "the Tao"}
WORD_PROMPTS = ["What is {a}{word}?", "What does {word} mean?", "What is the meaning of {word}?",
                "Define {word}.", "Explain {word}.", "What is {word}?"]
PYTHON_DOC_DIRS = ["tutorial", "faq", "howto", "reference"]


def require(source):
    package, path = PACKAGES[source]
    if not os.path.exists(path):
        raise SystemExit(f"corpus source {source!r} needs Debian package {package} ({path} is "
                         f"missing): apt-get install -y {' '.join(p for p, _ in PACKAGES.values())}")


def package_version(source):
    """The installed version of the source's package, from dpkg's status file."""
    package = PACKAGES[source][0]
    with open("/var/lib/dpkg/status", encoding="utf-8") as f:
        for entry in f.read().split("\n\n"):
            if re.search(rf"^Package: {re.escape(package)}$", entry, re.M):
                return re.search(r"^Version: (.*)$", entry, re.M).group(1)
    return "unknown"


def mostly_letters(text, share=0.5):
    letters = sum(ch.isalpha() for ch in text)
    return letters >= share * len(text.replace(" ", ""))


# ----------------------------------------------------------------------------------------------
# fortunes


def clean_fortune(text):
    text = re.sub(r".\x08", "", text)  # overstriking: "_\bx" underlines x, "x\bx" bolds it
    text = "".join(ch for ch in text if ch in "\n\t" or ord(ch) >= 32)
    return text.strip("\n")


def load_fortunes(rng):
    out = []
    for path in sorted(glob.glob(os.path.join(FORTUNE_DIR, "*"))):
        name = os.path.basename(path)
        if "." in name or name in SKIPPED_FORTUNES or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            raw = f.read().decode("utf-8", errors="replace")
        for chunk in re.split(r"^%$", raw, flags=re.M):
            text = clean_fortune(chunk)
            if len(text) >= 8 and mostly_letters(text):
                topic = FORTUNE_TOPICS.get(name, name)
                out.append(Document("fortunes", text,
                                    rng.choice(FORTUNE_PROMPTS).format(topic=topic)))
    return out


# ----------------------------------------------------------------------------------------------
# WordNet: "Word is <definition>." plus the synset's example sentences


def sentence(text):
    text = text.strip().rstrip(";,")
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def first_senses(pos):
    """Offsets of the synsets that are the most frequent sense of a single-word lemma."""
    offsets = set()
    with open(f"/usr/share/wordnet/index.{pos}", encoding="latin-1") as f:
        for line in f:
            if line.startswith("  "):
                continue
            parts = line.split()
            if "_" not in parts[0] and int(parts[-2]) > 0:  # tagsense_cnt > 0: seen in text
                offsets.add(parts[-int(parts[2])])
    return offsets


NO_ARTICLE = ("a ", "an ", "the ", "any ", "one ", "some", "something", "anything", "everything",
              "what ", "that ", "how ", "having ", "someone", "anyone", "(")


def definition_sentence(pos, word, definition):
    if pos == "noun":
        article = ("" if word[0].isupper() or definition.startswith(NO_ARTICLE) or
                   (word.endswith("s") and not word.endswith("ss")) else
                   "an " if definition[0] in "aeiou" else "a ")
        return sentence(f"{word} is {article}{definition}")
    if pos == "verb":
        return sentence(f"to {word} is to {definition}")
    return sentence(f"{word} means {definition}")


def load_wordnet(rng):
    """Synsets with example sentences, and the first sense of common single words."""
    out = []
    for pos in ["noun", "verb", "adj", "adv"]:
        common = first_senses(pos)
        with open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or " | " not in line:
                    continue  # licence header
                fields, gloss = line.rstrip().split(" | ", 1)
                parts = fields.split()
                word = re.sub(r"\(.*\)$", "", parts[4]).replace("_", " ")
                examples = re.findall(r'"([^"]+)"', gloss)
                definition = re.sub(r'"[^"]*"', "", gloss).strip(" ;")
                if (not definition or not re.fullmatch(r"[A-Za-z][A-Za-z '-]*", word) or
                        not (examples or parts[0] in common)):
                    continue
                text = " ".join([definition_sentence(pos, word, definition)] +
                                [sentence(e) for e in examples])
                article = "" if pos != "noun" or word[0].isupper() else (
                    "an " if word[0] in "aeiou" else "a ")
                question = rng.choice(WORD_PROMPTS).format(word=word, a=article)
                out.append(Document("wordnet", text, question))
    return out


# ----------------------------------------------------------------------------------------------
# Python documentation (reStructuredText sources): prose paragraphs; FAQ headings are questions


def strip_rst_inline(text):
    text = re.sub(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", text)  # :role:`text <target>`
    text = re.sub(r"`([^`<]+?)\s*<[^>]*>`_+", r"\1", text)  # `text <url>`_
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`]+)`_*", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*", r"\1", text)
    text = re.sub(r"\[#\w*\]_", "", text)
    return re.sub(r"\s+", " ", text).strip()


def rst_sections(raw):
    """[(heading, [paragraph])]: prose paragraphs under each heading, markup stripped."""
    sections = [("", [])]
    blocks = re.split(r"\n\s*\n", raw)
    for block in blocks:
        lines = block.split("\n")
        if len(lines) >= 2 and re.fullmatch(r"([=\-~^*#+])\1{3,}", lines[-1].strip()):
            title = lines[-2].strip()
            sections.append((title, []))
            continue
        if (not lines[0] or lines[0][0].isspace() or lines[0].startswith(("..", ">>>", "|", "+"))
                or re.match(r"^([=\-~^*#+])\1{3,}", lines[0]) or re.match(r"^[-*] |^#\.|^\d+\.",
                                                                       lines[0])):
            continue  # code, directives, tables, lists
        text = strip_rst_inline(" ".join(lines))
        if text.endswith("::"):
            text = text[:-1]
        if len(text) >= 60 and mostly_letters(text, 0.7) and text[0].isupper():
            sections[-1][1].append(text)
    return sections


def load_python_docs(rng):
    out = []
    base = "/usr/share/doc/python3.11/html/_sources"
    for sub in PYTHON_DOC_DIRS:
        for path in sorted(glob.glob(os.path.join(base, sub, "*.rst.txt"))):
            with open(path, encoding="utf-8") as f:
                sections = rst_sections(f.read())
            for title, paragraphs in sections:
                if not paragraphs:
                    continue
                question = (title if sub == "faq" and title.endswith("?") else None)
                out.append(Document("python-docs", "\n\n".join(paragraphs), question))
    return out


# ----------------------------------------------------------------------------------------------
# Debian Reference (HTML): <p> paragraphs


def load_debian_reference(rng):
    out = []
    for path in sorted(glob.glob("/usr/share/debian-reference/*.en.html")):
        with open(path, encoding="utf-8") as f:
            raw = f.read()
        paragraphs = []
        for chunk in re.findall(r"<p>(.*?)(?=<p>|</p>|<div|<pre|<table)", raw, re.S):
            text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", chunk))).strip()
            if len(text) >= 60 and mostly_letters(text, 0.7) and text[0].isupper():
                paragraphs.append(text)
        for i in range(0, len(paragraphs), 4):  # a document is a run of up to 4 paragraphs
            out.append(Document("debian-reference", "\n\n".join(paragraphs[i:i + 4]), None))
    return out


LOADERS = {"fortunes": load_fortunes, "wordnet": load_wordnet, "python-docs": load_python_docs,
           "debian-reference": load_debian_reference}


def load_corpus(rng):
    """Every source's documents, in source order; stops with an install hint if one is missing."""
    for source in LOADERS:
        require(source)
    docs = []
    for source, loader in LOADERS.items():
        docs += loader(rng)
    return docs

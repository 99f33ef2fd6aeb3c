// Writes corpus.json: the strings whose token ids the tokenizer goldens pin down.
// Deterministic: a seeded PRNG mixes hand-written fragments, so re-running this script
// reproduces corpus.json byte for byte.  Usage: node gen_corpus.mjs
import { writeFileSync } from "node:fs";

const SEED = 20240611;
const RANDOM_COUNT = 1000;

// mulberry32: small, seedable, good enough to shuffle fragments.
function mulberry32(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = mulberry32(SEED);
const pick = (list) => list[Math.floor(rand() * list.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

// Hand-written cases, one behaviour each.
const fixed = [
  "", " ", "  ", "\n", "\t", "\r\n", "a", "Hello, world!", "hello world", " hello", "hello ",
  "Hello World HELLO world hElLo", "I'm sure it's fine, we'll see; they've gone, you're here, he'd go.",
  "I'M SURE IT'S FINE, WE'LL SEE; THEY'VE GONE, YOU'RE HERE, HE'D GO.", "don't can't won't shouldn't",
  "'s 't 're 've 'm 'll 'd", "rock 'n' roll", "O'Neil's", "''quoted''", "`backticks`",
  "The year 2024 had 366 days.", "1234567890", "3.14159265358979", "-42", "+1 (555) 123-4567",
  "1,000,000", "1e-9", "0x1F 0b1010 0o777", "12345678901234567890123456789", "v1.2.3-rc.4",
  "٣٤٥ ١٢", "１２３ full-width digits", "Ⅻ roman", "½ ¾ ² ³", "৪৫ Bengali digits",
  "a  b   c    d", "trailing spaces   ", "   leading spaces", "tab\tseparated\tvalues",
  "line1\nline2\n\nline4", "\n\n\n", "\r\r\r", " \n \n ", "mixed \t\n\r whitespace",
  "               sixteen spaces", "x\u00a0y non-breaking", "em\u2003space", "ideographic\u3000space",
  "<|im_start|>user\nhi<|im_end|>", "<|im_start|><|im_end|><|endoftext|>", "<|endoftext|>",
  "text<|im_end|>text", " <|im_start|> spaced ", "<|im_start", "|im_end|>", "<|im_start|im_end|>",
  "<think>\nreasoning\n</think>\n\nanswer", "<tool_call>{\"name\": \"f\"}</tool_call>",
  "<|begin_of_text|>Hello<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
  "<|reserved_special_token_5|>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
  "https://example.com/path/to/page?query=1&b=two#frag", "http://localhost:30000/v1/chat/completions",
  "mailto:someone@example.org", "ftp://files.example.net/pub/file-1.2.tar.gz",
  "C:\\Users\\name\\Documents\\file.txt", "/usr/local/lib/python3.11/site-packages",
  "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
  "#include <iostream>\nint main() { std::cout << \"hi\\n\"; }", "SELECT * FROM users WHERE id = 42;",
  "const add = (a, b) => a + b; // arrow", "fn main() { println!(\"{}\", 1 + 1); }",
  "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"go\") }",
  "<div class=\"x\"><p>para</p></div>", "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
  "echo $HOME && ls -la | grep '^d' > out.txt 2>&1", "x = [i**2 for i in range(10) if i % 2]",
  "    indented four\n        indented eight", "\tdef g():\n\t\tpass",
  "你好，世界！", "日本語のテキストです。カタカナとひらがな。", "한국어 문장입니다.", "中文English混合text",
  "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "Привет, мир!", "Γειά σου Κόσμε", "สวัสดีชาวโลก",
  "Tiếng Việt có dấu", "Ελληνικά και English", "ქართული", "Հայերեն", "தமிழ்", "ಕನ್ನಡ",
  "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "👩🏾‍💻 coding", "🇫🇷🇯🇵", "❤️", "emoji😀in😀text", "🤖🦀🐍",
  "e\u0301", "caf\u00e9 vs cafe\u0301", "A\u030a", "\u1100\u1161\u11a8", "o\u0308\u0304",
  "n\u0303 an\u0303o", "\u0065\u0301\u0302\u0303", "Zalgo: Z\u0351\u0345\u0336a\u0337l\u0330g\u0323o",
  "\u212b angstrom sign", "\u2126 ohm sign", "\ufb01 ligature", "\u00c5 \u212b A\u030a",
  "\ufffd replacement", "\u0000 nul", "\u0001\u0002\u0003", "\u007f del", "\u0080\u0081\u009f c1",
  "\ud800 lone high", "lone low \udc00", "\udbff\udfff max", "\ud83d", "\ude00 after", "a\ud800b",
  "\uffff\ufffe nonchar", "\u200b zero width", "\u200d joiner alone", "\u202e rtl override", "\u2028\u2029",
  "\\ud800 escaped text", "\\x00\\xff", "Ã©Ã¨ mojibake", "Â", "Ð¿Ñ€Ð¸Ð²ÐµÑ‚",
  "a".repeat(300), "ab".repeat(150), "abc ".repeat(80), "Supercalifragilisticexpialidocious",
  "Pneumonoultramicroscopicsilicovolcanoconiosis", "antidisestablishmentarianism".repeat(4),
  "x".repeat(1000), "\n".repeat(50), " ".repeat(100), "!".repeat(64), "😀".repeat(40), "中".repeat(100),
  "9".repeat(70), "_".repeat(40), "-=".repeat(40), "ﷺ ﷻ", "𝕳𝖊𝖑𝖑𝖔 math fraktur", "𝟘𝟙𝟚 double-struck",
  "ǅungla Ǆ ǆ", "İstanbul ıi", "ß ẞ straße", "ﬀ ﬃ", "K kelvin", "µ micro μ mu", "Ω ohm",
  // Characters on which regex engines disagree about \s or case folding.
  "a\u0085b", "a \u0085 b\u0085\u0085", "x\ufeffy", "a \ufeff b", "it'ſ IT'S It'S",
  "\u180e mongolian vowel separator", "\u000b\u000c vertical tab form feed", "\u001c\u001d\u001e\u001f",
  "tab\t \t space", "word\n   \n  next", "end with newline\n", "  \n\n  ", "x \u2029 y \u2028",
];

// Fragments for the random mixtures.
const words = [
  "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "tokenizer", "inference",
  "prefill", "decode", "cache", "throughput", "latency", "GPU", "CPU", "HTTP", "JSON", "Llama",
  "Qwen", "naïve", "coöperate", "résumé", "Zürich", "São", "Paulo", "München", "Łódź", "Ørsted",
  "don't", "it's", "we're", "I've", "they'll", "she'd", "I'm", "OK", "camelCase", "snake_case",
  "kebab-case", "SCREAMING", "iPhone", "e-mail", "co-op", "x86_64", "AVX512", "bf16", "fp32",
];
const foreign = [
  "数据", "模型", "推理", "東京", "ありがとう", "カタカナ", "서울", "사랑", "كتاب", "مدرسة", "हिन्दी",
  "भाषा", "Москва", "книга", "Αθήνα", "עברית", "ภาษาไทย", "Việt", "ελληνικά", "ไทย", "বাংলা", "తెలుగు",
];
const emoji = ["😀", "🎉", "🚀", "👍🏻", "👩‍🔬", "🧑🏿‍🤝‍🧑🏻", "🇺🇸", "✨", "🔥", "❤️‍🔥", "1️⃣", "🫠", "🐕‍🦺"];
const symbols = [".", ",", "!", "?", ";", ":", "...", "—", "–", "(", ")", "[", "]", "{", "}", "\"",
  "'", "`", "#", "@", "$", "%", "^", "&", "*", "+", "=", "<", ">", "/", "\\", "|", "~", "«", "»",
  "“", "”", "‘", "’", "€", "£", "¥", "©", "®", "™", "°", "±", "×", "÷", "→", "⇒", "∀", "∑", "√", "∞"];
const spaces = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "   ", " \n", "\u00a0", "\u3000"];
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
  "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<tool_call>"];
const combining = ["\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u030a", "\u0323", "\u20dd"];
const odd = ["\ufffd", "\u0000", "\u0007", "\u001b[31m", "\u007f", "\u00ad", "\u200b", "\u2060",
  "\ud800", "\udfff", "\uffff", "\u{10ffff}", "\u{e0041}", "\u{1f3fb}"];
const codeLines = [
  "int x = 0;", "return nullptr;", "if (a && b) {", "} else {", "x += 1", "print(f\"{x!r}\")",
  "import numpy as np", "let v: Vec<u8> = vec![];", "std::vector<int> v{1, 2, 3};",
  "console.log(`value: ${v}`);", "SELECT a, b FROM t;", "<a href=\"/x\">link</a>", "#define N 128",
  "async def run(): await x", "lambda x: x ** 2", "match x { Some(v) => v, None => 0 }",
  "$ cmake --build build -j 2", "git commit -m \"fix\"", "key: value", "- item: 1",
];

function number() {
  switch (int(0, 5)) {
    case 0: return String(int(0, 9));
    case 1: return String(int(10, 99999));
    case 2: return String(int(0, 999999)) + String(int(0, 999999)) + String(int(0, 999));
    case 3: return (rand() * 1000).toFixed(int(1, 6));
    case 4: return `${int(1, 12)}/${int(1, 28)}/${int(1990, 2030)}`;
    default: return String(int(0, 9)).repeat(int(2, 40));
  }
}

function fragment() {
  switch (int(0, 13)) {
    case 0: case 1: case 2: return pick(words);
    case 3: return pick(foreign);
    case 4: return pick(emoji);
    case 5: return pick(symbols);
    case 6: return number();
    case 7: return pick(specials);
    case 8: return pick(words) + pick(combining);
    case 9: return pick(odd);
    case 10: return pick(codeLines);
    case 11: return pick(words).toUpperCase();
    case 12: return pick(words).normalize("NFD");
    default: return pick(foreign).normalize("NFD");
  }
}

const generated = [];
for (let i = 0; i < RANDOM_COUNT; ++i) {
  const n = int(1, 24);
  let s = rand() < 0.2 ? pick(spaces) : "";
  for (let k = 0; k < n; ++k) {
    s += fragment();
    // Mostly single spaces, sometimes glued, sometimes odd whitespace.
    const r = rand();
    s += r < 0.6 ? " " : r < 0.8 ? "" : pick(spaces);
  }
  generated.push(s);
}

const corpus = [...fixed, ...generated];
writeFileSync(new URL("./corpus.json", import.meta.url), JSON.stringify(corpus, null, 1) + "\n");
console.log(`corpus.json: ${corpus.length} strings`);

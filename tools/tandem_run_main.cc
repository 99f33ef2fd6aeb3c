// tandem-run: generate text from a Hugging Face model directory on the CPU, streaming to stdout.
//
//   tandem-run --model-path models/tandem-tiny-fortunes --prompt "The meaning of life"
//   echo "Tell me a joke" | tandem-run --model-path DIR --chat --temperature 0.7
//
// Exit codes: 0 success, 2 bad flags or an unusable model directory, 1 a failure while running.
// Timing (prompt and decode tokens/s) goes to stderr so stdout carries only the text.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <set>
#include <string>

#include "common/flags.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem {
namespace {

using engine::BlockPool;
using engine::BlockTable;

struct Options {
  std::string model_path;
  std::string prompt;
  int max_new_tokens = 128;
  float temperature = 0.7f;
  float top_p = 0.95f;
  int top_k = -1;
  float min_p = 0.0f;
  uint64_t seed = 0;
  bool chat = false;
  int threads = 2;
  int prefill_chunk = 512;
};

int Fail(int code, const std::string& message) {
  std::cerr << "tandem-run: " << message << "\n";
  return code;
}

int Run(const Options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(o.model_path, ec)) {
    return Fail(2, "--model-path '" + o.model_path + "' is not a directory");
  }
  engine::SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_p = o.top_p;
  sp.top_k = o.top_k;
  sp.min_p = o.min_p;
  sp.seed = o.seed;
  if (o.max_new_tokens < 0) return Fail(2, "--max-new-tokens must be >= 0");

  auto tokenizer = engine::Tokenizer::FromModelDir(o.model_path);
  if (!tokenizer.ok()) return Fail(2, std::string(tokenizer.status().message()));
  auto model = engine::Model::Load(o.model_path, {o.threads});
  if (!model.ok()) return Fail(2, std::string(model.status().message()));
  const engine::ModelConfig& config = (*model)->config();

  std::string text = o.prompt;
  if (o.chat) {
    auto rendered = (*tokenizer)->ApplyChatTemplate({{"user", o.prompt}}, true);
    if (!rendered.ok()) return Fail(2, "--chat: " + std::string(rendered.status().message()));
    text = *rendered;
  }
  std::vector<int32_t> prompt = (*tokenizer)->Encode(text);
  if (prompt.empty()) return Fail(2, "the prompt is empty");
  for (int32_t id : prompt) {
    if (id >= config.vocab_size) {
      return Fail(2, "tokenizer produced id " + std::to_string(id) +
                         " beyond the model's vocabulary of " + std::to_string(config.vocab_size));
    }
  }
  const int64_t max_total = config.max_position_embeddings;
  if (static_cast<int64_t>(prompt.size()) >= max_total) {
    return Fail(2, "prompt of " + std::to_string(prompt.size()) +
                       " tokens does not fit the context of " + std::to_string(max_total));
  }
  const int64_t total =
      std::min<int64_t>(max_total, static_cast<int64_t>(prompt.size()) + o.max_new_tokens);

  std::set<int32_t> eos(config.eos_token_ids.begin(), config.eos_token_ids.end());
  for (int32_t id : (*tokenizer)->eos_token_ids()) eos.insert(id);
  sp.max_new_tokens = o.max_new_tokens;
  auto sampler = engine::Sampler::Create(sp, static_cast<int32_t>(config.vocab_size),
                                         std::vector<int32_t>(eos.begin(), eos.end()));
  if (!sampler.ok()) return Fail(2, std::string(sampler.status().message()));

  constexpr int kBlockSize = engine::kDefaultKvBlockSize;
  BlockPool pool(static_cast<int32_t>((total + kBlockSize - 1) / kBlockSize), kBlockSize);
  auto kv = (*model)->CreateKvCache(pool.num_blocks(), kBlockSize);
  if (!kv.ok()) return Fail(1, std::string(kv.status().message()));
  BlockTable table;
  auto plan = pool.PlanAppend({{&table, total}});
  if (!plan.ok() || !pool.Commit(*plan).ok()) return Fail(1, "cannot reserve KV blocks");

  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::span<const float> logits;
  for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(o.prefill_chunk)) {
    const size_t end = std::min(prompt.size(), begin + static_cast<size_t>(o.prefill_chunk));
    std::span<const int32_t> chunk(prompt.data() + begin, end - begin);
    auto r = (*model)->Forward(
        {{chunk, static_cast<int64_t>(begin), table.block_ids, end == prompt.size()}}, kv->get());
    if (!r.ok()) return Fail(1, std::string(r.status().message()));
    logits = *r;
  }
  const auto t1 = Clock::now();

  engine::IncrementalDetokenizer detok(**tokenizer, /*skip_special_tokens=*/true);
  int64_t pos = static_cast<int64_t>(prompt.size());
  int generated = 0;
  while (pos < total) {
    auto next = sampler->Sample(logits);
    if (!next.ok()) return Fail(1, std::string(next.status().message()));
    ++generated;
    if (eos.count(next->token)) break;
    std::cout << detok.Push(next->token) << std::flush;
    if (pos + 1 >= total) break;
    const int32_t tok = next->token;
    auto r = (*model)->Forward({{std::span<const int32_t>(&tok, 1), pos, table.block_ids, true}},
                               kv->get());
    if (!r.ok()) return Fail(1, std::string(r.status().message()));
    logits = *r;
    ++pos;
  }
  std::cout << detok.Finish() << std::endl;
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr,
               "[tandem-run] prompt %zu tokens in %.3f s (%.1f tok/s); generated %d tokens in "
               "%.3f s (%.1f tok/s); %d threads\n",
               prompt.size(), prefill_s, prompt.size() / std::max(prefill_s, 1e-9), generated,
               decode_s, generated / std::max(decode_s, 1e-9), o.threads);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o;
  tandem::Flags flags("tandem-run", "Generate text from a Hugging Face model directory on the CPU");
  flags.Add("--model-path", &o.model_path, "Hugging Face model directory")->required();
  flags.Add("--prompt", &o.prompt, "prompt text (read from stdin when absent)");
  flags.Add("--max-new-tokens", &o.max_new_tokens, "tokens to generate at most");
  flags.Add("--temperature", &o.temperature, "sampling temperature; 0 = greedy");
  flags.Add("--top-p", &o.top_p, "nucleus sampling mass in (0, 1]");
  flags.Add("--top-k", &o.top_k, "keep the k most likely tokens (-1 = all)");
  flags.Add("--min-p", &o.min_p, "drop tokens below min_p x the top probability");
  flags.Add("--seed", &o.seed, "random seed of the sampler");
  flags.Add("--chat", &o.chat, "wrap the prompt in the model's chat template");
  flags.Add("--threads", &o.threads, "compute threads")->check(CLI::Range(1, 256));
  flags.Add("--prefill-chunk", &o.prefill_chunk, "prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 20));
  if (auto code = flags.Parse(argc, argv)) return *code;
  if (o.prompt.empty()) {  // not given on the command line or in --config
    o.prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
    while (!o.prompt.empty() && (o.prompt.back() == '\n' || o.prompt.back() == '\r')) {
      o.prompt.pop_back();
    }
  }
  return tandem::Run(o);
}

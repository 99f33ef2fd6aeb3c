// tandem-run: generate text from a Hugging Face model directory on the CPU, streaming to stdout.
//
//   tandem-run --model-path models/tandem-tiny-english --prompt "The meaning of life"
//   echo "Tell me a joke" | tandem-run --model-path DIR --chat --temperature 0.7
//   tandem-run --model-path DIR --batch-file prompts.txt     # one prompt per line, concurrently
//   tandem-run --model-path DIR --batch-file ids.txt --input-ids --jsonl   # token ids in and out
//
// Everything runs through the serving engine's scheduler (continuous batching, chunked prefill,
// radix cache), so a prompt gives here exactly the tokens a worker would give it.
// Exit codes: 0 success, 2 bad flags, input or model directory, 1 a failure while running.
// Timing (prompt and decode tokens/s) goes to stderr so stdout carries only the text.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "common/flags.h"
#include "engine/finish_reason.h"
#include "engine/model.h"
#include "engine/scheduler.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

struct Options {
  std::string model_path;
  std::string prompt;
  std::string batch_file;
  int max_new_tokens = 128;
  float temperature = 0.7f;
  float top_p = 0.95f;
  int top_k = -1;
  float min_p = 0.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  uint64_t seed = 0;
  bool chat = false;
  int threads = 2;
  std::string quantization;  // "" or w8a8 (engine::ParseQuantization)
  int prefill_chunk = 512;
  int max_running_requests = 64;
  bool disable_radix_cache = false;
  bool input_ids = false;  // prompts are whitespace-separated token ids, not text
  bool jsonl = false;      // one JSON object per prompt on stdout instead of the text
};

int Fail(int code, const std::string& message) {
  std::cerr << "tandem-run: " << message << "\n";
  return code;
}

std::vector<std::string> ReadPrompts(const Options& o, std::string* error) {
  std::vector<std::string> prompts;
  if (o.batch_file.empty()) {
    prompts.push_back(o.prompt);
    return prompts;
  }
  std::ifstream in(o.batch_file);
  if (!in) {
    *error = "--batch-file: cannot read '" + o.batch_file + "'";
    return {};
  }
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) *error = "--batch-file: '" + o.batch_file + "' has no prompt";
  return prompts;
}

// Parses a prompt given as token ids ("151644 872 198"); each must be in [0, vocab_size).
bool ParseIds(const std::string& line, int32_t vocab_size, std::vector<int32_t>* ids,
              std::string* error) {
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    int64_t id = -1;
    size_t used = 0;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= vocab_size) {
      *error = "'" + word + "' is not a token id in [0, " + std::to_string(vocab_size) + ")";
      return false;
    }
    ids->push_back(static_cast<int32_t>(id));
  }
  return true;
}

int Run(const Options& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(o.model_path, ec)) {
    return Fail(2, "--model-path '" + o.model_path + "' is not a directory");
  }
  std::string error;
  std::vector<std::string> texts = ReadPrompts(o, &error);
  if (!error.empty()) return Fail(2, error);

  auto tokenizer = engine::Tokenizer::FromModelDir(o.model_path);
  if (!tokenizer.ok()) return Fail(2, std::string(tokenizer.status().message()));
  auto quantization = engine::ParseQuantization(o.quantization);
  if (!quantization.ok()) {
    return Fail(2, "--quantization: " + std::string(quantization.status().message()));
  }
  auto model = engine::Model::Load(o.model_path, {o.threads, false, *quantization});
  if (!model.ok()) return Fail(2, std::string(model.status().message()));
  const engine::ModelConfig& config = (*model)->config();

  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = texts.size() == 1 ? "the prompt" : "prompt " + std::to_string(i + 1);
    if (o.input_ids) {
      std::vector<int32_t> ids;
      if (!ParseIds(texts[i], (*tokenizer)->vocab_size(), &ids, &error)) {
        return Fail(2, "--input-ids: " + where + ": " + error);
      }
      if (ids.empty()) return Fail(2, "--input-ids: " + where + " has no token id");
      prompts.push_back(std::move(ids));
      continue;
    }
    std::string text = texts[i];
    bool add_special = true;
    if (o.chat) {
      auto rendered = (*tokenizer)->ApplyChatTemplate({{"user", text}}, true);
      if (!rendered.ok()) return Fail(2, "--chat: " + std::string(rendered.status().message()));
      text = *rendered;
      add_special = false;  // the template already carries the special tokens it wants
    }
    prompts.push_back((*tokenizer)->Encode(text, add_special));
    if (prompts.back().empty()) {
      return Fail(2, texts.size() == 1 ? "the prompt is empty"
                                       : "prompt " + std::to_string(i + 1) + " is empty");
    }
  }

  // KV for every prompt at full length at once, so nothing is preempted.
  constexpr int kBlockSize = engine::kDefaultKvBlockSize;
  int64_t blocks = 0;
  for (const auto& p : prompts) {
    const int64_t total = std::min<int64_t>(config.max_position_embeddings,
                                            static_cast<int64_t>(p.size()) + o.max_new_tokens);
    blocks += (total + kBlockSize - 1) / kBlockSize;
  }
  engine::SchedulerConfig sc;
  sc.num_blocks = std::max<int64_t>(blocks, 1);
  sc.block_size = kBlockSize;
  sc.chunked_prefill_size = o.prefill_chunk;
  sc.max_prefill_tokens = std::max(o.prefill_chunk, 2048);
  sc.max_running_requests = o.max_running_requests;
  sc.max_queued_requests = static_cast<int>(prompts.size());
  sc.enable_radix_cache = !o.disable_radix_cache;
  auto scheduler = engine::Scheduler::Create(sc, model->get(), tokenizer->get());
  if (!scheduler.ok()) return Fail(1, std::string(scheduler.status().message()));

  const bool single = prompts.size() == 1;
  std::map<size_t, std::string> texts_out;
  std::map<size_t, std::vector<int32_t>> ids_out;
  std::map<size_t, nlohmann::json> finish_out;
  int64_t generated = 0;
  std::vector<std::string> failures;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Clock::time_point first_token;
  for (size_t i = 0; i < prompts.size(); ++i) {
    engine::Request r;
    r.rid = std::to_string(i + 1);
    r.input_ids = prompts[i];
    r.sampling.temperature = o.temperature;
    r.sampling.top_p = o.top_p;
    r.sampling.top_k = o.top_k;
    r.sampling.min_p = o.min_p;
    r.sampling.frequency_penalty = o.frequency_penalty;
    r.sampling.presence_penalty = o.presence_penalty;
    r.sampling.repetition_penalty = o.repetition_penalty;
    r.sampling.stop = o.stop;
    r.sampling.ignore_eos = o.ignore_eos;
    r.sampling.max_new_tokens = o.max_new_tokens;
    r.sampling.seed = o.seed + i;
    r.callbacks.on_output = [&, i](const engine::RequestOutput& out) {
      if (generated == 0 && !out.token_ids.empty()) first_token = Clock::now();
      generated += static_cast<int64_t>(out.token_ids.size());
      ids_out[i].insert(ids_out[i].end(), out.token_ids.begin(), out.token_ids.end());
      if (out.last && out.finish) finish_out[i] = out.finish->ToJson();
      if (single && !o.jsonl) {
        std::cout << out.text << std::flush;
      } else {
        texts_out[i] += out.text;
      }
      if (out.last && out.finish && out.finish->kind == engine::FinishReason::Kind::kAbort) {
        failures.push_back("prompt " + out.rid + ": " + out.finish->message);
      }
    };
    if (absl::Status s = (*scheduler)->Submit(std::move(r)); !s.ok()) {
      return Fail(2, (single ? std::string() : "prompt " + std::to_string(i + 1) + ": ") +
                         std::string(s.message()));
    }
  }
  while ((*scheduler)->HasWork()) {
    auto st = (*scheduler)->Step();
    if (!st.ok()) return Fail(1, std::string(st.status().message()));
  }
  const auto t2 = Clock::now();
  if (o.jsonl) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      nlohmann::json line = {{"index", i},
                             {"output_ids", ids_out[i]},
                             {"text", texts_out[i]},
                             {"finish_reason", finish_out[i]}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    std::cout << std::flush;
  } else if (single) {
    std::cout << std::endl;
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::cout << "=== " << (i + 1) << ": " << texts[i] << "\n" << texts_out[i] << "\n\n";
    }
    std::cout << std::flush;
  }
  for (const std::string& f : failures) std::cerr << "tandem-run: " << f << "\n";
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  if (first_token == Clock::time_point()) first_token = t2;
  const double prefill_s = std::chrono::duration<double>(first_token - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - first_token).count();
  std::fprintf(stderr,
               "[tandem-run] %zu prompt(s), %lld prompt tokens, first token after %.3f s; "
               "generated %lld tokens in %.3f s (%.1f tok/s); %d threads\n",
               prompts.size(), static_cast<long long>(prompt_tokens), prefill_s,
               static_cast<long long>(generated), decode_s,
               static_cast<double>(generated) / std::max(decode_s + prefill_s, 1e-9), o.threads);
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Options o;
  tandem::Flags flags("tandem-run", "Generate text from a Hugging Face model directory on the CPU");
  flags.Add("--model-path", &o.model_path, "Hugging Face model directory")->required();
  flags.Add("--prompt", &o.prompt, "prompt text (read from stdin when absent)");
  flags.Add("--batch-file", &o.batch_file,
            "file with one prompt per line, all run concurrently; results in input order");
  flags.Add("--max-new-tokens", &o.max_new_tokens, "tokens to generate at most")
      ->check(CLI::Range(0, 1 << 24));
  flags.Add("--temperature", &o.temperature, "sampling temperature; 0 = greedy");
  flags.Add("--top-p", &o.top_p, "nucleus sampling mass in (0, 1]");
  flags.Add("--top-k", &o.top_k, "keep the k most likely tokens (-1 = all)");
  flags.Add("--min-p", &o.min_p, "drop tokens below min_p x the top probability");
  flags.Add("--frequency-penalty", &o.frequency_penalty, "in [-2, 2]");
  flags.Add("--presence-penalty", &o.presence_penalty, "in [-2, 2]");
  flags.Add("--repetition-penalty", &o.repetition_penalty, "in (0, 2]; 1 = off");
  flags.Add("--stop", &o.stop, "stop string (repeatable); not included in the output");
  flags.Add("--ignore-eos", &o.ignore_eos, "keep generating after the end-of-sequence token");
  flags.Add("--seed", &o.seed, "random seed of the sampler (prompt i of a batch uses seed + i)");
  flags.Add("--chat", &o.chat, "wrap the prompt in the model's chat template");
  flags.Add("--quantization", &o.quantization,
            "w8a8 (or w8a8_int8): int8 weights per channel and int8 activations per token");
  flags.Add("--threads", &o.threads, "compute threads")->check(CLI::Range(1, 256));
  flags.Add("--prefill-chunk", &o.prefill_chunk, "prompt tokens per forward pass")
      ->check(CLI::Range(1, 1 << 20));
  flags.Add("--max-running-requests", &o.max_running_requests, "prompts decoding at once")
      ->check(CLI::Range(1, 1 << 16));
  flags.Add("--disable-radix-cache", &o.disable_radix_cache, "do not share prompt prefixes");
  flags.Add("--input-ids", &o.input_ids,
            "prompts are whitespace-separated token ids (no tokenizer, no chat template)");
  flags.Add("--jsonl", &o.jsonl,
            "print one JSON object per prompt: index, output_ids, text, finish_reason");
  if (auto code = flags.Parse(argc, argv)) return *code;
  if (o.prompt.empty() && o.batch_file.empty()) {  // not given on the command line or in --config
    o.prompt.assign(std::istreambuf_iterator<char>(std::cin), {});
    while (!o.prompt.empty() && (o.prompt.back() == '\n' || o.prompt.back() == '\r')) {
      o.prompt.pop_back();
    }
  }
  if (!o.prompt.empty() && !o.batch_file.empty()) {
    std::cerr << "tandem-run: give --prompt or --batch-file, not both\n";
    return 2;
  }
  return tandem::Run(o);
}

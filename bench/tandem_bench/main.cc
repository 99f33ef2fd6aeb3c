// tandem-bench: the serving benchmark client. Same flags, same datasets for the same --seed and
// same "Serving Benchmark Result" table as `python -m sglang.bench_serving`, against
// tandem-router or any SGLang-compatible server. Example (the seed-004 shape):
//   tandem-bench --backend sglang --port 30000 --model models/tandem-tiny-english
//       --dataset-name random --num-prompts 200 --random-input-len 64 --random-output-len 16
// Two additions of its own: the `mixed` dataset (mixed_dataset.h) and goodput under SLOs
// (--goodput-ttft-ms, --goodput-itl-p99-ms; metrics.h "Goodput"), printed after the table and
// written to the --output-file record.
// Exit status: 0 when a request succeeded, 1 on a run-time failure, 2 on a usage error.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/metrics.h"
#include "bench/tandem_bench/mixed_dataset.h"
#include "bench/tandem_bench/plot.h"
#include "bench/tandem_bench/report.h"
#include "bench/tandem_bench/request.h"
#include "bench/tandem_bench/runner.h"
#include "bench/tandem_bench/upstream_random.h"
#include "common/http_client.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// bench_serving flags that change nothing here, with the reason printed when one is given.
struct IgnoredFlag {
  const char* name;
  bool takes_value;
  const char* why;
};
constexpr IgnoredFlag kIgnoredFlags[] = {
    {"--profile", false, "Tandem has no torch profiler (/start_profile)"},
    {"--profile-activities", true, "Tandem has no torch profiler"},
    {"--profile-num-steps", true, "Tandem has no torch profiler"},
    {"--profile-by-stage", false, "Tandem has no torch profiler"},
    {"--profile-stages", true, "Tandem has no torch profiler"},
    {"--profile-output-dir", true, "Tandem has no torch profiler"},
    {"--profile-prefix", true, "Tandem has no torch profiler"},
    {"--profile-prefill-url", true, "Tandem has no torch profiler"},
    {"--profile-decode-url", true, "Tandem has no torch profiler"},
    {"--pd-separated", false, "it only steers --profile, which does nothing here"},
    {"--plot-throughput", false, "use --plot FILE.png for a throughput plot"},
    {"--print-requests", false, "requests are not printed one by one"},
    {"--return-routed-experts", false, "Tandem serves no mixture-of-experts model"},
    {"--lora-request-distribution", true, "Tandem serves no LoRA adapters"},
    {"--lora-zipf-alpha", true, "Tandem serves no LoRA adapters"},
    {"--image-count", true, "only the image dataset uses it, which tandem-bench has not"},
    {"--image-resolution", true, "only the image dataset uses it, which tandem-bench has not"},
    {"--random-image-count", false, "only the image dataset uses it, which tandem-bench has not"},
    {"--image-format", true, "only the image dataset uses it, which tandem-bench has not"},
    {"--image-content", true, "only the image dataset uses it, which tandem-bench has not"},
    {"--use-trace-timestamps", false, "only the mooncake dataset uses it"},
    {"--mooncake-slowdown-factor", true, "only the mooncake dataset uses it"},
    {"--mooncake-num-rounds", true, "only the mooncake dataset uses it"},
    {"--mooncake-workload", true, "only the mooncake dataset uses it"},
    {"--gsp-send-routing-key", false, "tandem-router routes on the prompt itself"},
};

struct Args {
  std::string backend = "sglang";
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 0;  // 0: the backend's default, as bench_serving picks it
  std::string dataset_name = "sharegpt";
  std::string dataset_path;
  std::string model;
  std::string served_model_name;
  std::string tokenizer;
  int num_prompts = 1000;
  int sharegpt_output_len = 0;
  int sharegpt_context_len = 0;
  int random_input_len = 1024;
  int random_output_len = 1024;
  double random_range_ratio = 0.0;
  std::string request_rate = "inf";
  int max_concurrency = 0;
  std::string output_file;
  bool output_details = false;
  bool disable_tqdm = false;
  bool disable_stream = false;
  bool return_logprob = false;
  bool disable_ignore_eos = false;
  uint32_t seed = 1;
  std::string extra_request_body;
  bool flush_cache = false;
  std::string admin_key_file;
  int warmup_requests = 1;
  bool tokenize_prompt = false;
  bool time_tokens_without_text = false;
  std::vector<std::string> lora_names;
  std::string tag;
  std::vector<std::string> headers;
  std::string prompt_suffix;
  bool apply_chat_template = false;
  SharedPrefixOptions gsp;
  int gsp_num_turns = 1;
  MixedDatasetOptions mixed;
  GoodputSlo slo;
  std::string plot;
  std::map<std::string, std::vector<std::string>> ignored;  // flag -> values given
};

int Fail(const absl::Status& status) {
  std::cerr << "tandem-bench: " << status.message() << std::endl;
  // Bad options found after parsing (the dataset generators name the flag) are usage errors.
  const bool usage = status.code() == absl::StatusCode::kInvalidArgument &&
                     absl::StartsWith(status.message(), "--");
  return usage ? kExitUsage : kExitFailure;
}

int Usage(const std::string& message) {
  std::cerr << "tandem-bench: " << message << std::endl;
  return kExitUsage;
}

// The model name to put in OpenAI requests: --model when the server lists it (or cannot be
// asked), else the first model the server serves.
std::string ServedModelName(const HttpClient& client, const HttpHeaders& headers,
                            const std::string& wanted) {
  auto response = client.Request("GET", "/v1/models", "", headers,
                                 HttpClient::Clock::now() + std::chrono::seconds(10));
  if (!response.ok() || response->status != 200) return wanted;
  auto json = nlohmann::json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array()) return wanted;
  std::string first;
  for (const auto& entry : json["data"]) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_string()) continue;
    std::string id = entry["id"].get<std::string>();
    if (id == wanted) return wanted;
    if (first.empty()) first = id;
  }
  return first.empty() ? wanted : first;
}

// bench_serving's get_auth_headers: OPENAI_API_KEY as a bearer token, else API_KEY as is.
HttpHeaders AuthHeaders() {
  HttpHeaders headers;
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
    headers.emplace_back("Authorization", absl::StrCat("Bearer ", key));
  } else if (const char* raw = std::getenv("API_KEY"); raw != nullptr && *raw != '\0') {
    headers.emplace_back("Authorization", raw);
  }
  return headers;
}

// --flush-cache: POST /flush_cache after the warm-up, as upstream, with the admin key when
// --admin-key-file names one (tandem-router's admin routes want it), else the client's key.
void FlushCache(const HttpClient& client, const Args& args) {
  HttpHeaders headers = AuthHeaders();
  if (!args.admin_key_file.empty()) {
    std::ifstream file(args.admin_key_file);
    std::string key;
    std::getline(file, key);
    headers.clear();
    headers.emplace_back("Authorization", absl::StrCat("Bearer ", absl::StripAsciiWhitespace(key)));
  }
  auto response = client.Request("POST", "/flush_cache", "", headers,
                                 HttpClient::Clock::now() + std::chrono::seconds(30));
  if (!response.ok()) {
    std::cerr << "tandem-bench: note: --flush-cache: " << response.status().message() << "\n";
  } else if (response->status != 200) {
    std::cerr << "tandem-bench: note: --flush-cache: /flush_cache answered " << response->status
              << (response->status == 401 || response->status == 403
                      ? " (give tandem-router's admin key with --admin-key-file)"
                      : "")
              << "\n";
  }
}

int Run(const Args& args) {
  if (args.dataset_name != "sharegpt") {
    for (auto [given, flag] : {std::pair{!args.prompt_suffix.empty(), "--prompt-suffix"},
                               std::pair{args.apply_chat_template, "--apply-chat-template"}}) {
      if (given) {
        std::cerr << "tandem-bench: note: " << flag
                  << " does nothing here: only the sharegpt dataset uses it (as in "
                     "bench_serving)\n";
      }
    }
  }
  for (const auto& [flag, values] : args.ignored) {
    std::cerr << "tandem-bench: note: " << flag << " does nothing here: ";
    for (const auto& ignored : kIgnoredFlags) {
      if (flag == ignored.name) std::cerr << ignored.why;
    }
    std::cerr << "\n";
  }
  auto backend = ParseBackend(args.backend);
  if (!backend.ok()) return Usage(std::string(backend.status().message()));
  double request_rate = 0;
  if (!absl::SimpleAtod(args.request_rate, &request_rate) || std::isnan(request_rate) ||
      request_rate <= 0) {
    return Usage(
        absl::StrCat("--request-rate must be a number > 0 or inf, got '", args.request_rate, "'"));
  }
  if (!args.lora_names.empty()) {
    return Usage("--lora-name: Tandem serves no LoRA adapters (every request would be refused)");
  }
  if (args.time_tokens_without_text && *backend != Backend::kSglang) {
    return Usage("--time-tokens-without-text only works with --backend sglang");
  }
  if (args.tokenize_prompt && *backend != Backend::kSglang) {
    return Usage("--tokenize-prompt only works with --backend sglang (as in bench_serving)");
  }
  if (args.gsp_num_turns != 1) {
    return Usage("--gsp-num-turns: only 1 is supported (multi-turn conversations are not)");
  }
  if (args.tokenize_prompt && args.dataset_name != "random" && args.dataset_name != "random-ids" &&
      args.dataset_name != "mixed") {
    return Usage("--tokenize-prompt only works with the random, random-ids and mixed datasets");
  }
  RequestSettings settings;
  if (!args.extra_request_body.empty()) {
    settings.extra_body = nlohmann::json::parse(args.extra_request_body, nullptr, false);
    if (!settings.extra_body.is_object()) {
      return Usage("--extra-request-body must be a JSON object, e.g. '{\"top_p\": 0.9}'");
    }
  }
  settings.headers = AuthHeaders();
  for (const auto& header : args.headers) {
    const size_t eq = header.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Usage(absl::StrCat("--header takes Key=Value, got '", header, "'"));
    }
    settings.headers.emplace_back(header.substr(0, eq), header.substr(eq + 1));
  }

  int port = args.port;
  if (port == 0) {
    port = absl::StartsWith(args.backend, "vllm")       ? 8000
           : absl::StartsWith(args.backend, "lmdeploy") ? 23333
                                                        : 30000;
  }
  const std::string base_url =
      args.base_url.empty() ? absl::StrCat("http://", args.host, ":", port) : args.base_url;
  auto client = HttpClient::FromUrl(base_url);
  if (!client.ok()) return Fail(client.status());

  const std::string tokenizer_dir = args.tokenizer.empty() ? args.model : args.tokenizer;
  if (tokenizer_dir.empty()) {
    return Usage(
        "--model or --tokenizer must name the model directory (prompt lengths are counted "
        "with its tokenizer.json)");
  }
  auto tokenizer = engine::Tokenizer::FromModelDir(tokenizer_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  const engine::Tokenizer& tok = **tokenizer;
  const TokenCounter count_tokens = [&tok](const std::string& text) {
    return static_cast<int>(tok.Encode(text, /*add_special_tokens=*/false).size());
  };

  BenchRandom rng(args.seed);  // random.seed(seed); np.random.seed(seed)
  absl::StatusOr<std::vector<DatasetRow>> rows;
  if (args.dataset_name == "random" || args.dataset_name == "random-ids") {
    RandomDatasetOptions options;
    options.num_prompts = args.num_prompts;
    options.input_len = args.random_input_len;
    options.output_len = args.random_output_len;
    options.range_ratio = args.random_range_ratio;
    options.ids = args.dataset_name == "random-ids";
    options.sharegpt_path = args.dataset_path;
    options.tokenize_prompt = args.tokenize_prompt;
    auto vocab = HfVocabSize(tokenizer_dir);
    if (!vocab.ok()) return Fail(vocab.status());
    options.vocab_size = *vocab;
    if (!options.ids && options.sharegpt_path.empty()) {
      std::cerr << "tandem-bench: note: --dataset-name random without --dataset-path: "
                   "bench_serving would download ShareGPT for the prompt tokens; nothing is "
                   "downloaded here, the tokens are drawn as random-ids draws them (the lengths "
                   "are bench_serving's)\n";
    }
    rows = GenerateRandomDataset(tok, options, rng);
  } else if (args.dataset_name == "sharegpt") {
    ShareGptOptions options{args.dataset_path,        args.num_prompts,
                            args.sharegpt_output_len, args.sharegpt_context_len,
                            args.prompt_suffix,       args.apply_chat_template};
    rows = LoadShareGptDataset(tok, options, rng);
  } else if (args.dataset_name == "mixed") {
    MixedDatasetOptions options = args.mixed;
    options.num_prompts = args.num_prompts;
    options.tokenize_prompt = args.tokenize_prompt;
    auto vocab = HfVocabSize(tokenizer_dir);
    if (!vocab.ok()) return Fail(vocab.status());
    options.vocab_size = *vocab;
    rows = GenerateMixedDataset(tok, options, rng);
  } else {
    rows = GenerateSharedPrefixDataset(tok, args.gsp, rng);
  }
  if (!rows.ok()) return Fail(rows.status());
  long long input_tokens = 0, output_tokens = 0;
  for (const auto& row : *rows) {
    input_tokens += row.prompt_len;
    output_tokens += row.output_len;
  }
  std::cout << "#Input tokens: " << input_tokens << "\n#Output tokens: " << output_tokens
            << std::endl;

  settings.backend = *backend;
  settings.stream = !args.disable_stream;
  settings.ignore_eos = !args.disable_ignore_eos;
  settings.return_logprob = args.return_logprob;
  settings.send_ids = args.tokenize_prompt;
  settings.time_tokens_without_text = args.time_tokens_without_text;
  if (*backend == Backend::kSglang) {
    settings.model = args.served_model_name.empty() ? args.model : args.served_model_name;
  } else if (!args.served_model_name.empty()) {
    settings.model = args.served_model_name;
  } else {
    settings.model =
        ServedModelName(*client, settings.headers, args.model.empty() ? tokenizer_dir : args.model);
  }

  RunOptions options;
  options.request_rate = request_rate;
  options.max_concurrency = args.max_concurrency;
  options.warmup_requests = args.warmup_requests;
  options.show_progress = !args.disable_tqdm && isatty(STDERR_FILENO);
  options.progress = &std::cerr;
  options.log = &std::cout;
  std::function<void()> after_warmup;
  if (args.flush_cache) after_warmup = [&] { FlushCache(*client, args); };
  auto result = RunBenchmark(*client, settings, *rows, options, after_warmup, rng.numpy);
  if (!result.ok()) return Fail(result.status());

  const BenchmarkMetrics metrics =
      ComputeMetrics(result->outputs, result->duration_s, count_tokens);
  RunDescription run;
  run.backend = args.backend;
  run.request_rate = request_rate;
  run.max_concurrency = args.max_concurrency;
  run.dataset_name = args.dataset_name;
  run.num_prompts = static_cast<int>(rows->size());
  run.random_input_len = args.random_input_len;
  run.random_output_len = args.random_output_len;
  run.random_range_ratio = args.random_range_ratio;
  std::cout << FormatResultTable(run, metrics) << std::flush;
  const bool slo_given = args.slo.ttft_ms > 0 || args.slo.itl_p99_ms > 0;
  const Goodput goodput = ComputeGoodput(result->outputs, result->duration_s, args.slo);
  if (slo_given) {
    std::cout << "Goodput (req/s) under TTFT <= " << args.slo.ttft_ms
              << " ms, per-request ITL p99 <= " << args.slo.itl_p99_ms
              << " ms (0: not checked): " << goodput.request_throughput << " (" << goodput.good
              << " of " << result->outputs.size() << " requests good)" << std::endl;
  }

  if (metrics.failed > 0) {
    std::map<std::string, int> errors;
    for (const auto& out : result->outputs) {
      if (!out.success) ++errors[out.error];
    }
    std::cerr << "tandem-bench: " << metrics.failed << " of " << result->outputs.size()
              << " requests failed:\n";
    for (const auto& [error, count] : errors) std::cerr << "  " << count << " x " << error << "\n";
  }
  if (!args.output_file.empty()) {
    nlohmann::json record = ResultRecord(run, metrics);
    record["tag"] = args.tag.empty() ? nlohmann::json(nullptr) : nlohmann::json(args.tag);
    if (slo_given) {
      record["slo_ttft_ms"] = args.slo.ttft_ms;
      record["slo_itl_p99_ms"] = args.slo.itl_p99_ms;
      record["goodput_requests"] = goodput.good;
      record["goodput_request_throughput"] = goodput.request_throughput;
      record["goodput_fraction"] = goodput.fraction;
    }
    if (args.dataset_name == "mixed") {
      record["mixed_long_fraction"] = args.mixed.long_fraction;
      record["mixed_long_input_len"] = args.mixed.long_input_len;
      record["mixed_long_output_len"] = args.mixed.long_output_len;
      record["mixed_short_input_min"] = args.mixed.short_input_min;
      record["mixed_short_input_max"] = args.mixed.short_input_max;
      record["mixed_short_output_len"] = args.mixed.short_output_len;
    }
    if (args.output_details) {
      nlohmann::json input_lens = nlohmann::json::array(), output_lens = nlohmann::json::array(),
                     ttfts = nlohmann::json::array(), itls = nlohmann::json::array(),
                     texts = nlohmann::json::array(), errors = nlohmann::json::array();
      for (const auto& out : result->outputs) {
        input_lens.push_back(out.prompt_len);
        output_lens.push_back(out.success ? out.output_len : 0);
        ttfts.push_back(out.ttft_s);
        itls.push_back(out.itl_s);
        texts.push_back(out.generated_text);
        errors.push_back(out.error);
      }
      record["input_lens"] = input_lens;
      record["output_lens"] = output_lens;
      record["ttfts"] = ttfts;
      record["itls"] = itls;
      record["generated_texts"] = texts;
      record["errors"] = errors;
    }
    std::ofstream file(args.output_file, std::ios::app);
    file << record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    if (!file) {
      return Fail(absl::InternalError(absl::StrCat("cannot append to ", args.output_file)));
    }
  }
  if (!args.plot.empty()) {
    absl::Status plotted = WriteThroughputPlot(
        ComputeTimeline(result->outputs), args.plot,
        absl::StrCat("tandem-bench ", args.backend, ", ", args.dataset_name, ", ", rows->size(),
                     " prompts, rate ", PythonFloat(request_rate)));
    if (!plotted.ok()) return Fail(plotted);
  }
  return metrics.completed > 0 ? 0 : kExitFailure;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Args args;
  CLI::App app{
      "tandem-bench: serving benchmark client (flags, datasets and result table of "
      "python -m sglang.bench_serving)"};
  app.add_option("--backend", args.backend,
                 "sglang | sglang-oai | sglang-oai-chat (vllm, lmdeploy and their -chat: the "
                 "same OpenAI requests)")
      ->capture_default_str();
  app.add_option("--base-url", args.base_url, "server base URL (overrides --host/--port)");
  app.add_option("--host", args.host)->capture_default_str();
  app.add_option("--port", args.port, "default: 30000 (vllm: 8000, lmdeploy: 23333)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--dataset-name", args.dataset_name)
      ->check(
          CLI::IsMember({"sharegpt", "random", "random-ids", "generated-shared-prefix", "mixed"}))
      ->capture_default_str();
  app.add_option("--dataset-path", args.dataset_path, "ShareGPT JSON file");
  app.add_option("--model", args.model, "model directory (its tokenizer counts tokens)");
  app.add_option("--served-model-name", args.served_model_name,
                 "the \"model\" of requests (default: --model, or what /v1/models lists)");
  app.add_option("--tokenizer", args.tokenizer, "tokenizer directory (default: --model)");
  app.add_option("--num-prompts", args.num_prompts)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sharegpt-output-len", args.sharegpt_output_len);
  app.add_option("--sharegpt-context-len", args.sharegpt_context_len);
  app.add_option("--prompt-suffix", args.prompt_suffix,
                 "sharegpt: put before the prompt's trailing \"Assistant:\"");
  app.add_flag("--apply-chat-template", args.apply_chat_template,
               "sharegpt: send each prompt rendered as a user turn");
  app.add_option("--random-input-len", args.random_input_len)->capture_default_str();
  app.add_option("--random-output-len", args.random_output_len)->capture_default_str();
  app.add_option("--random-range-ratio", args.random_range_ratio)
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--request-rate", args.request_rate,
                 "requests/s (Poisson arrivals); inf sends all at once")
      ->capture_default_str();
  app.add_option("--max-concurrency", args.max_concurrency, "requests in flight at most")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--output-file", args.output_file, "append one JSON record per run");
  app.add_flag("--output-details", args.output_details,
               "the record also lists every request's lengths, times, text and error");
  app.add_flag("--disable-tqdm", args.disable_tqdm, "no progress bar");
  app.add_flag("--disable-stream", args.disable_stream);
  app.add_flag("--return-logprob", args.return_logprob, "ask for logprobs (sglang backend)");
  app.add_flag("--disable-ignore-eos", args.disable_ignore_eos);
  app.add_option("--seed", args.seed, "seeds Python's random and numpy's np.random, as upstream")
      ->check(CLI::Range(uint32_t{0}, uint32_t{0xFFFFFFFF}))
      ->capture_default_str();
  app.add_option("--extra-request-body", args.extra_request_body,
                 "a JSON object merged into every request body");
  app.add_flag("--flush-cache", args.flush_cache, "POST /flush_cache after the warm-up");
  app.add_option("--admin-key-file", args.admin_key_file,
                 "tandem-router's admin key for --flush-cache (first line of the file)");
  app.add_option("--warmup-requests", args.warmup_requests)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--tokenize-prompt", args.tokenize_prompt,
               "send the drawn token ids as input_ids (sglang backend, random datasets)");
  app.add_flag("--time-tokens-without-text", args.time_tokens_without_text,
               "sglang backend: time every event whose completion_tokens grew, text or not (for "
               "models whose tokens decode to nothing)");
  app.add_option("--lora-name", args.lora_names)->expected(0, -1);
  app.add_option("--tag", args.tag, "copied into the --output-file record");
  app.add_option("--header", args.headers, "extra request headers, Key=Value")->expected(1, -1);
  app.add_option("--gsp-num-groups", args.gsp.num_groups)->capture_default_str();
  app.add_option("--gsp-prompts-per-group", args.gsp.prompts_per_group)->capture_default_str();
  app.add_option("--gsp-system-prompt-len", args.gsp.system_prompt_len)->capture_default_str();
  app.add_option("--gsp-question-len", args.gsp.question_len)->capture_default_str();
  app.add_option("--gsp-output-len", args.gsp.output_len)->capture_default_str();
  app.add_option("--gsp-range-ratio", args.gsp.range_ratio)
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--gsp-fast-prepare", args.gsp.fast_prepare, "prompt_len 1 (no encoding)");
  app.add_flag("--gsp-ordered", args.gsp.ordered, "do not shuffle the prompts");
  app.add_option("--gsp-num-turns", args.gsp_num_turns)->capture_default_str();
  app.add_option("--mixed-long-fraction", args.mixed.long_fraction,
                 "mixed: the share of long prompts (exactly round(n * fraction) of them)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--mixed-long-input-len", args.mixed.long_input_len)->capture_default_str();
  app.add_option("--mixed-long-output-len", args.mixed.long_output_len)->capture_default_str();
  app.add_option("--mixed-short-input-min", args.mixed.short_input_min)->capture_default_str();
  app.add_option("--mixed-short-input-max", args.mixed.short_input_max)->capture_default_str();
  app.add_option("--mixed-short-output-len", args.mixed.short_output_len)->capture_default_str();
  app.add_option("--goodput-ttft-ms", args.slo.ttft_ms,
                 "SLO: a good request's TTFT is at most this (0: not checked)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--goodput-itl-p99-ms", args.slo.itl_p99_ms,
                 "SLO: a good request's own ITL p99 is at most this (0: not checked)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plot", args.plot, "PNG of output throughput and running requests (gnuplot)");
  for (const auto& ignored : tandem::bench::kIgnoredFlags) {
    const std::string name = ignored.name;
    const char* help = "accepted for bench_serving compatibility; does nothing here";
    if (ignored.takes_value) {
      app.add_option_function<std::vector<std::string>>(
             name,
             [&args, name](const std::vector<std::string>& values) { args.ignored[name] = values; },
             help)
          ->expected(0, -1);
    } else {
      app.add_flag_callback(
          name, [&args, name] { args.ignored[name] = {}; }, help);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : tandem::bench::kExitUsage;
  }
  return tandem::bench::Run(args);
}

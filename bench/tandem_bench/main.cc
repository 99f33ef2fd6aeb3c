// tandem-bench: the serving benchmark client. Same flags and same "Serving Benchmark Result"
// table as `python -m sglang.bench_serving`, against tandem-router or any SGLang-compatible
// server. Example (the seed-004 shape):
//   tandem-bench --backend sglang --port 30000 --model models/tandem-tiny-fortunes
//       --dataset-name random --num-prompts 200 --random-input-len 64 --random-output-len 16
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/metrics.h"
#include "bench/tandem_bench/plot.h"
#include "bench/tandem_bench/report.h"
#include "bench/tandem_bench/request.h"
#include "bench/tandem_bench/runner.h"
#include "common/http_client.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

struct Args {
  std::string backend = "sglang";
  std::string base_url;
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string dataset_name = "sharegpt";
  std::string dataset_path;
  std::string model;
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
  bool disable_tqdm = false;
  bool disable_stream = false;
  bool disable_ignore_eos = false;
  uint64_t seed = 1;
  int warmup_requests = 1;
  SharedPrefixOptions gsp;
  std::string plot;
};

int Fail(const absl::Status& status) {
  std::cerr << "tandem-bench: " << status.message() << std::endl;
  return 1;
}

// The model name to put in OpenAI requests: --model when the server lists it (or cannot be
// asked), else the first model the server serves.
std::string ServedModelName(const HttpClient& client, const std::string& wanted) {
  auto response = client.Get("/v1/models", HttpClient::Clock::now() + std::chrono::seconds(10));
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

int Run(const Args& args) {
  auto backend = ParseBackend(args.backend);
  if (!backend.ok()) return Fail(backend.status());
  double request_rate = 0;
  if (!absl::SimpleAtod(args.request_rate, &request_rate) || std::isnan(request_rate) ||
      request_rate <= 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--request-rate must be a number > 0 or inf, got '", args.request_rate, "'")));
  }
  const std::string base_url =
      args.base_url.empty() ? absl::StrCat("http://", args.host, ":", args.port) : args.base_url;
  auto client = HttpClient::FromUrl(base_url);
  if (!client.ok()) return Fail(client.status());

  const std::string tokenizer_dir = args.tokenizer.empty() ? args.model : args.tokenizer;
  if (tokenizer_dir.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--model or --tokenizer must name the model directory (prompt lengths are counted "
        "with its tokenizer.json)"));
  }
  auto tokenizer = engine::Tokenizer::FromModelDir(tokenizer_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status());
  const engine::Tokenizer& tok = **tokenizer;
  const TokenCounter count_tokens = [&tok](const std::string& text) {
    return static_cast<int>(tok.Encode(text, /*add_special_tokens=*/false).size());
  };

  std::mt19937_64 rng(args.seed);
  absl::StatusOr<std::vector<DatasetRow>> rows;
  if (args.dataset_name == "random" || args.dataset_name == "random-ids") {
    RandomDatasetOptions options;
    options.num_prompts = args.num_prompts;
    options.input_len = args.random_input_len;
    options.output_len = args.random_output_len;
    options.range_ratio = args.random_range_ratio;
    options.ids = args.dataset_name == "random-ids";
    options.sharegpt_path = args.dataset_path;
    rows = GenerateRandomDataset(tok, options, rng);
  } else if (args.dataset_name == "sharegpt") {
    ShareGptOptions options{args.dataset_path, args.num_prompts, args.sharegpt_output_len,
                            args.sharegpt_context_len};
    rows = LoadShareGptDataset(tok, options, rng);
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

  RequestSettings settings;
  settings.backend = *backend;
  settings.stream = !args.disable_stream;
  settings.ignore_eos = !args.disable_ignore_eos;
  if (const char* key = std::getenv("OPENAI_API_KEY")) settings.api_key = key;
  settings.model = *backend == Backend::kSglang
                       ? args.model
                       : ServedModelName(*client, args.model.empty() ? tokenizer_dir : args.model);

  RunOptions options;
  options.request_rate = request_rate;
  options.max_concurrency = args.max_concurrency;
  options.warmup_requests = args.warmup_requests;
  options.show_progress = !args.disable_tqdm && isatty(STDERR_FILENO);
  options.progress = &std::cerr;
  options.log = &std::cout;
  auto result = RunBenchmark(*client, settings, *rows, options, count_tokens, rng);
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
    std::ofstream file(args.output_file, std::ios::app);
    file << ResultRecord(run, metrics).dump() << "\n";
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
  return metrics.completed > 0 ? 0 : 1;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Args args;
  CLI::App app{
      "tandem-bench: serving benchmark client (flags and result table of "
      "python -m sglang.bench_serving)"};
  app.add_option("--backend", args.backend, "sglang | sglang-oai | sglang-oai-chat")
      ->capture_default_str();
  app.add_option("--base-url", args.base_url, "server base URL (overrides --host/--port)");
  app.add_option("--host", args.host)->capture_default_str();
  app.add_option("--port", args.port)->check(CLI::Range(1, 65535))->capture_default_str();
  app.add_option("--dataset-name", args.dataset_name)
      ->check(CLI::IsMember({"sharegpt", "random", "random-ids", "generated-shared-prefix"}))
      ->capture_default_str();
  app.add_option("--dataset-path", args.dataset_path, "ShareGPT JSON file");
  app.add_option("--model", args.model, "model directory (its tokenizer counts tokens)");
  app.add_option("--tokenizer", args.tokenizer, "tokenizer directory (default: --model)");
  app.add_option("--num-prompts", args.num_prompts)
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sharegpt-output-len", args.sharegpt_output_len);
  app.add_option("--sharegpt-context-len", args.sharegpt_context_len);
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
  app.add_flag("--disable-tqdm", args.disable_tqdm, "no progress bar");
  app.add_flag("--disable-stream", args.disable_stream);
  app.add_flag("--disable-ignore-eos", args.disable_ignore_eos);
  app.add_option("--seed", args.seed)->capture_default_str();
  app.add_option("--warmup-requests", args.warmup_requests)
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--gsp-num-groups", args.gsp.num_groups)->capture_default_str();
  app.add_option("--gsp-prompts-per-group", args.gsp.prompts_per_group)->capture_default_str();
  app.add_option("--gsp-system-prompt-len", args.gsp.system_prompt_len)->capture_default_str();
  app.add_option("--gsp-question-len", args.gsp.question_len)->capture_default_str();
  app.add_option("--gsp-output-len", args.gsp.output_len)->capture_default_str();
  app.add_option("--plot", args.plot, "PNG of output throughput and running requests (gnuplot)");
  CLI11_PARSE(app, argc, argv);
  return tandem::bench::Run(args);
}

#include "engine/serving_options.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/status.h"
#include "engine/model.h"

namespace tandem::engine {

void RegisterServingFlags(Flags& flags, ServingOptions* o) {
  flags.Add("--model-path", &o->model_path,
            "Hugging Face model directory (config.json, *.safetensors, tokenizer.json); required");
  flags.Add("--served-model-name", &o->served_model_name,
            "Model name reported to clients (default: the model directory's name)");
  flags
      .Add("--context-length", &o->context_length,
           "Maximum tokens per request, prompt plus output (0: max_position_embeddings)")
      ->check(CLI::NonNegativeNumber);
  flags.Add("--max-running-requests", &o->max_running_requests, "Requests decoding at once")
      ->check(CLI::Range(1, 1 << 20));
  flags
      .Add("--max-queued-requests", &o->max_queued_requests,
           "Requests waiting for KV memory before new ones are refused")
      ->check(CLI::Range(0, 1 << 24));
  flags
      .Add("--chunked-prefill-size", &o->chunked_prefill_size,
           "Prompt tokens computed per prefill chunk")
      ->check(CLI::Range(1, 1 << 24));
  flags.Add("--max-prefill-tokens", &o->max_prefill_tokens, "Prompt tokens per prefill batch")
      ->check(CLI::Range(1, 1 << 24));
  flags.Add("--disable-radix-cache", &o->disable_radix_cache,
            "Do not reuse cached prompt prefixes");
  flags
      .Add("--kv-events-buffer", &o->kv_events_buffer,
           "KV events (radix cache stores and evictions) kept for the router to read; 0: none")
      ->check(CLI::Range(0, 1 << 24));
  flags.Add("--kv-cache-memory", &o->kv_cache_memory,
            "Memory for the KV cache: bytes, a unit (4GiB, 512MB) or a fraction of RAM (0.25)");
  flags.Add("--page-size", &o->page_size, "Tokens per KV block")->check(CLI::Range(1, 4096));
  flags.Add("--threads", &o->threads, "Compute threads (0: every core)")
      ->check(CLI::Range(0, 4096));
  flags.Add("--quantization", &o->quantization,
            "w8a8 (or w8a8_int8): int8 weights per output channel, quantized at load, and int8 "
            "activations per token (an int8 checkpoint needs no flag)");
}

absl::Status ValidateServingOptions(const ServingOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (o.model_path.empty()) {
    return absl::InvalidArgumentError("--model-path is required (a Hugging Face model directory)");
  }
  if (!fs::is_directory(o.model_path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-path: '", o.model_path, "' is not a directory"));
  }
  if (!fs::is_regular_file(fs::path(o.model_path) / "config.json", ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-path: '", o.model_path,
                     "' has no config.json (expected a Hugging Face model directory)"));
  }
  if (o.chunked_prefill_size > o.max_prefill_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("--chunked-prefill-size (", o.chunked_prefill_size,
                     ") exceeds --max-prefill-tokens (", o.max_prefill_tokens, ")"));
  }
  RETURN_IF_ERROR(ParseQuantization(o.quantization).status(), "--quantization: ");
  auto kv = ParseByteSize(o.kv_cache_memory, TotalRamBytes());
  RETURN_IF_ERROR(kv.status(), "--kv-cache-memory: ");
  return absl::OkStatus();
}

std::string ServedModelName(const ServingOptions& o) {
  if (!o.served_model_name.empty()) return o.served_model_name;
  std::filesystem::path p(o.model_path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace tandem::engine

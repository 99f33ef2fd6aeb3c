#include "engine/serving_options.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/status.h"
#include "engine/model.h"
#include "engine/sglang_server_flags.h"

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
  CLI::Option* kv_cache_memory =
      flags.Add("--kv-cache-memory", &o->kv_cache_memory,
                "Memory for the KV cache: bytes, a unit (4GiB, 512MB) or a fraction of RAM (0.25)");
  flags.Add("--page-size", &o->page_size, "Tokens per KV block")->check(CLI::Range(1, 4096));
  flags.Add("--threads", &o->threads, "Compute threads (0: every core)")
      ->check(CLI::Range(0, 4096));
  flags.Add("--quantization", &o->quantization,
            "w8a8 (or w8a8_int8): int8 weights per output channel, quantized at load, and int8 "
            "activations per token; compressed-tensors: the checkpoint must be compressed-tensors "
            "W8A8 int8 (such a checkpoint needs no flag)");
  flags
      .Add("--mem-fraction-static", &o->mem_fraction_static,
           "SGLang's budget for weights plus KV cache as a fraction of RAM: the KV cache gets "
           "this fraction of RAM minus the loaded weights (0: --kv-cache-memory decides)")
      ->check(CLI::Range(0.0, 1.0))
      ->excludes(kv_cache_memory);
  flags
      .Add("--max-total-tokens", &o->max_total_tokens,
           "Caps the KV cache at this many tokens, rounded up to whole pages; the memory budget "
           "still bounds it (0: no cap)")
      ->check(CLI::NonNegativeNumber);
  flags
      .Add("--random-seed", &o->random_seed,
           "Seeds the seeds of requests that carry no `seed`: a worker restarted with the same "
           "value and given the same requests in the same order samples the same (default: "
           "random)")
      ->type_name("INT");
  RegisterSglangServerFlags(flags);
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
  RETURN_IF_ERROR(ServingQuantization(o).status());
  auto kv = ParseByteSize(o.kv_cache_memory, TotalRamBytes());
  RETURN_IF_ERROR(kv.status(), "--kv-cache-memory: ");
  return absl::OkStatus();
}

absl::StatusOr<Quantization> ServingQuantization(const ServingOptions& o) {
  if (o.quantization == "compressed-tensors") return Quantization::kNone;
  absl::StatusOr<Quantization> q = ParseQuantization(o.quantization);
  if (!q.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--quantization: unsupported quantization '", o.quantization,
                     "' (supported: w8a8, w8a8_int8, compressed-tensors for a compressed-tensors "
                     "W8A8 int8 checkpoint, none)"));
  }
  return q;
}

absl::StatusOr<int64_t> KvCacheBytes(const ServingOptions& o, int64_t total_ram_bytes,
                                     int64_t weight_bytes) {
  if (o.mem_fraction_static <= 0) {
    ASSIGN_OR_RETURN(int64_t bytes, ParseByteSize(o.kv_cache_memory, total_ram_bytes),
                     "--kv-cache-memory: ");
    return bytes;
  }
  const int64_t budget = static_cast<int64_t>(o.mem_fraction_static * total_ram_bytes);
  if (budget <= weight_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--mem-fraction-static ", o.mem_fraction_static, ": ", FormatBytes(budget), " of ",
        FormatBytes(total_ram_bytes), " RAM leaves nothing for the KV cache after the weights (",
        FormatBytes(weight_bytes), ")"));
  }
  return budget - weight_bytes;
}

std::string ServedModelName(const ServingOptions& o) {
  if (!o.served_model_name.empty()) return o.served_model_name;
  std::filesystem::path p(o.model_path);
  if (!p.has_filename()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace tandem::engine

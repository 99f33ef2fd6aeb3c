// The serving engine's operator-facing options, shared by tandem-prefill and tandem-decode.
// Flag names are SGLang's where the concept is the same (see DESIGN.md); the rest of an SGLang
// launch_server line is accepted or refused by engine/sglang_server_flags.h.
#ifndef TANDEM_ENGINE_SERVING_OPTIONS_H_
#define TANDEM_ENGINE_SERVING_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"
#include "engine/model.h"

namespace tandem::engine {

struct ServingOptions {
  std::string model_path;         // Hugging Face model directory
  std::string served_model_name;  // "" = the model directory's name
  int context_length = 0;         // 0 = max_position_embeddings from config.json
  int max_running_requests = 128;
  int chunked_prefill_size = 512;  // prompt tokens per prefill chunk
  int max_prefill_tokens = 2048;   // prompt tokens per prefill batch
  bool disable_radix_cache = false;
  int kv_events_buffer = 65536;          // KV events retained for the router; 0: none
  std::string kv_cache_memory = "2GiB";  // bytes, a unit, or a fraction of RAM (common/byte_size.h)
  // SGLang's --mem-fraction-static: weights plus KV cache take this fraction of RAM, so the KV
  // cache gets it minus the loaded weights; replaces kv_cache_memory when > 0.
  double mem_fraction_static = 0;
  int64_t max_total_tokens = 0;  // caps the KV cache's tokens (whole pages); 0: no cap
  int page_size = 16;            // tokens per KV block
  int threads = 0;               // 0 = every core of the machine
  // "" | "w8a8" | "w8a8_int8" (ParseQuantization, model.h) | "compressed-tensors" (the checkpoint
  // must be compressed-tensors W8A8 int8, which loads as such without the flag too)
  std::string quantization;
  int max_queued_requests = 1024;  // beyond this, new requests are refused (RESOURCE_EXHAUSTED)
  // SGLang's --random-seed: seeds the sequence that gives a request without `seed` its seed
  // (request_seeds.h); none: a random sequence.
  std::optional<int64_t> random_seed;
};

// Registers the options above on `flags`; `options` must outlive flags.Parse().
void RegisterServingFlags(Flags& flags, ServingOptions* options);

// Checks what flags alone cannot: the model directory exists and holds config.json, sizes are
// coherent (chunk <= max prefill tokens...), the KV memory string parses, --quantization is known.
// Errors name the flag.
absl::Status ValidateServingOptions(const ServingOptions& options);

// The load-time quantization --quantization asks for; "compressed-tensors" asks for none (the
// checkpoint's own int8 is used). Errors list the supported names.
absl::StatusOr<Quantization> ServingQuantization(const ServingOptions& options);

// The KV cache's size in bytes: --mem-fraction-static of `total_ram_bytes` minus
// `weight_bytes` when set, else --kv-cache-memory. Errors name the flag.
absl::StatusOr<int64_t> KvCacheBytes(const ServingOptions& options, int64_t total_ram_bytes,
                                     int64_t weight_bytes);

// The served model name: the option if set, else the model directory's last path component.
std::string ServedModelName(const ServingOptions& options);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SERVING_OPTIONS_H_

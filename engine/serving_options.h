// The serving engine's operator-facing options, shared by tandem-prefill and tandem-decode.
// Flag names are SGLang's where the concept is the same (see DESIGN.md).
#ifndef TANDEM_ENGINE_SERVING_OPTIONS_H_
#define TANDEM_ENGINE_SERVING_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/flags.h"

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
  int page_size = 16;                    // tokens per KV block
  int threads = 0;                       // 0 = every core of the machine
  std::string quantization;              // "" | "w8a8" | "w8a8_int8" (ParseQuantization, model.h)
  int max_queued_requests = 1024;  // beyond this, new requests are refused (RESOURCE_EXHAUSTED)
};

// Registers the options above on `flags`; `options` must outlive flags.Parse().
void RegisterServingFlags(Flags& flags, ServingOptions* options);

// Checks what flags alone cannot: the model directory exists and holds config.json, sizes are
// coherent (chunk <= max prefill tokens...), the KV memory string parses. Errors name the flag.
absl::Status ValidateServingOptions(const ServingOptions& options);

// The served model name: the option if set, else the model directory's last path component.
std::string ServedModelName(const ServingOptions& options);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SERVING_OPTIONS_H_

// libFuzzer entry point for the safetensors header parser.
//
// Build (clang):
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -I. \
//     engine/fuzz/safetensors_fuzz.cc engine/safetensors.cc -labsl_status -labsl_strings \
//     -labsl_str_format_internal -labsl_int128 -o safetensors_fuzz
//   ./safetensors_fuzz -max_len=4096
// The input is a whole file image (8-byte length, JSON header, data). The parser must return a
// Status for anything malformed, never crash, and anything it accepts must be self-consistent.
// The same property runs in the unit tests (SafetensorsTest.SurvivesRandomAndMutatedHeaders).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto header = tandem::engine::ParseSafetensorsHeader(data, size, "fuzz.safetensors");
  if (!header.ok()) return 0;
  const uint64_t data_size = size - header->data_offset;
  for (const auto& [name, info] : header->tensors) {
    const uint64_t bytes =
        static_cast<uint64_t>(info.num_elements()) * tandem::engine::DTypeSize(info.dtype);
    if (info.end > data_size || info.end - info.begin != bytes) std::abort();
    // Touch every accepted byte so ASan sees any out-of-bounds span.
    uint8_t acc = 0;
    for (uint64_t i = info.begin; i < info.end; ++i) acc ^= data[header->data_offset + i];
    volatile uint8_t sink = acc;
    (void)sink;
  }
  return 0;
}

// libFuzzer entry point for the safetensors header parser.
//
// Build and run: scripts/fuzz.sh safetensors_fuzz (fuzz/CMakeLists.txt compiles this file and
// engine/safetensors.cc with clang -fsanitize=fuzzer,address,undefined); seeds in
// engine/fuzz/corpus/safetensors/ (fuzz/make_text_seeds.py).
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

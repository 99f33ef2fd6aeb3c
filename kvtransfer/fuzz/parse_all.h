// Feeds one input to every network-facing parser; shared by the libFuzzer entry point and the
// seeded unit test. Header-only so that fuzz/ stays out of the kvtransfer library.
#ifndef TANDEM_KVTRANSFER_FUZZ_PARSE_ALL_H_
#define TANDEM_KVTRANSFER_FUZZ_PARSE_ALL_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvtransfer/descriptor.h"
#include "kvtransfer/frame.h"

namespace tandem::kv {

// Returns how many parsers accepted the input (for tests to see that some inputs pass).
inline int ParseAllForFuzzing(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  int accepted = 0;
  accepted += ParseHeader(data, size).ok();
  if (size >= kFrameHeaderSize) {
    auto h = ParseHeader(data, kFrameHeaderSize);
    accepted += h.ok();
    const std::string body = bytes.substr(kFrameHeaderSize);
    accepted += DecodeHello(body).ok();
    accepted += DecodeChallenge(body).ok();
    auto packed = ParsePackedWrites(body.data(), body.size());
    if (packed.ok()) {
      ++accepted;
      for (const PackedWrite& w : *packed) {
        // Every payload lies inside the body.
        if (w.data < reinterpret_cast<const uint8_t*>(body.data()) ||
            w.data + w.length > reinterpret_cast<const uint8_t*>(body.data()) + body.size()) {
          __builtin_trap();
        }
      }
    }
  }
  accepted += ParsePackedWrites(data, size).ok();
  accepted += DecodeHello(bytes).ok();
  accepted += DecodeChallenge(bytes).ok();
  accepted += DecodeCompat(bytes).ok();
  auto d = DecodeDescriptor(bytes);
  if (d.ok()) {
    ++accepted;
    // What decodes must re-encode to the same bytes (the encoding is canonical).
    if (EncodeDescriptor(*d) != bytes) __builtin_trap();
  }
  return accepted;
}

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_FUZZ_PARSE_ALL_H_

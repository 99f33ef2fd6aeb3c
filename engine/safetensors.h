// safetensors reading: a strict header parser and a read-only memory-mapped file.
//
// File layout (https://github.com/huggingface/safetensors): 8-byte little-endian header length N,
// N bytes of JSON header `{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...,
// "__metadata__": {..}}`, then the data section; offsets are relative to the data section start.
//
// ParseSafetensorsHeader validates everything a hostile or truncated file can get wrong before any
// tensor byte is touched: the header length fits the file and a sane bound, the JSON parses and has
// the expected types, every dtype is known, shape × dtype size == e - b (no overflow), every span
// lies within the data section, and spans do not overlap. Every failure is a Status naming the
// file and, where one is involved, the tensor. It never throws and never reads out of bounds; a
// libFuzzer target (engine/fuzz/safetensors_fuzz.cc) exercises it.
//
// Thread-safety: SafetensorsFile is immutable after Open and safe to read from many threads.
// Ownership: a SafetensorsFile owns its mapping; TensorView pointers into it stay valid as long as
// the SafetensorsFile lives.
#ifndef TANDEM_ENGINE_SAFETENSORS_H_
#define TANDEM_ENGINE_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::engine {

// Upper bound on the JSON header (the format's reference implementation uses 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

enum class DType {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2
};

// "BF16" etc. as written in headers.
const char* DTypeName(DType dtype);
size_t DTypeSize(DType dtype);

struct TensorInfo {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section, [begin, end)
  uint64_t end = 0;
  int64_t num_elements() const;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // file offset of the data section (8 + header length)
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // string entries of "__metadata__"
};

// Parses and validates the header of a complete safetensors file held in [data, data + size).
// `source` names the file in messages.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                         const std::string& source);

// A read-only view of one tensor's bytes inside a mapped file.
struct TensorView {
  std::string name;
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;  // info->end - info->begin bytes
};

// A memory-mapped (PROT_READ, MAP_PRIVATE) safetensors file with a validated header.
class SafetensorsFile {
 public:
  // Errors: cannot open/stat/map (NotFound / Internal), any header problem (InvalidArgument /
  // DataLoss for truncation), all naming `path`.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  bool Has(const std::string& name) const { return header_.tensors.count(name) > 0; }
  // NotFound naming the file and tensor when absent.
  absl::StatusOr<TensorView> Get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  SafetensorsHeader header_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_SAFETENSORS_H_

// Little-endian encoding helpers for the transfer engine's descriptors and frames.
//
// WireWriter appends fixed-width integers and length-prefixed byte strings to a std::string.
// WireReader reads them back from untrusted bytes: every read is bounds-checked and a short or
// oversized field turns into an InvalidArgument status naming the field, never a crash.
// Neither class is thread-safe; a WireReader does not own the bytes it reads.
#ifndef TANDEM_KVTRANSFER_WIRE_H_
#define TANDEM_KVTRANSFER_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::kv {

class WireWriter {
 public:
  explicit WireWriter(std::string* out) : out_(out) {}
  void U8(uint8_t v) { out_->push_back(static_cast<char>(v)); }
  void U16(uint16_t v) { Fixed(v, 2); }
  void U32(uint32_t v) { Fixed(v, 4); }
  void U64(uint64_t v) { Fixed(v, 8); }
  void Raw(const void* data, size_t n) { out_->append(static_cast<const char*>(data), n); }
  // u32 length + bytes.
  void Bytes(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_->append(s);
  }

 private:
  void Fixed(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string* out_;
};

class WireReader {
 public:
  WireReader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), left_(size) {}

  absl::StatusOr<uint8_t> U8(const char* field) { return Fixed<uint8_t>(1, field); }
  absl::StatusOr<uint16_t> U16(const char* field) { return Fixed<uint16_t>(2, field); }
  absl::StatusOr<uint32_t> U32(const char* field) { return Fixed<uint32_t>(4, field); }
  absl::StatusOr<uint64_t> U64(const char* field) { return Fixed<uint64_t>(8, field); }
  // A u32-length-prefixed byte string of at most `max_len` bytes.
  absl::StatusOr<std::string> Bytes(const char* field, size_t max_len);
  // Exactly `n` raw bytes.
  absl::Status Raw(void* dst, size_t n, const char* field);

  size_t remaining() const { return left_; }
  // OK when every byte was consumed; trailing garbage is an error.
  absl::Status ExpectEnd(const char* what) const;

 private:
  template <typename T>
  absl::StatusOr<T> Fixed(size_t n, const char* field) {
    if (left_ < n) return Truncated(field, n);
    uint64_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += n;
    left_ -= n;
    return static_cast<T>(v);
  }
  absl::Status Truncated(const char* field, size_t need) const;

  const uint8_t* p_;
  size_t left_;
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_WIRE_H_

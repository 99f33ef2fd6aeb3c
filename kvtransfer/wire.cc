#include "kvtransfer/wire.h"

#include "absl/strings/str_cat.h"

namespace tandem::kv {

absl::Status WireReader::Truncated(const char* field, size_t need) const {
  return absl::InvalidArgumentError(
      absl::StrCat("truncated at field '", field, "': need ", need, " bytes, ", left_, " left"));
}

absl::StatusOr<std::string> WireReader::Bytes(const char* field, size_t max_len) {
  auto len = U32(field);
  if (!len.ok()) return len.status();
  if (*len > max_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", field, "' is ", *len, " bytes, limit ", max_len));
  }
  if (left_ < *len) return Truncated(field, *len);
  std::string out(reinterpret_cast<const char*>(p_), *len);
  p_ += *len;
  left_ -= *len;
  return out;
}

absl::Status WireReader::Raw(void* dst, size_t n, const char* field) {
  if (left_ < n) return Truncated(field, n);
  std::memcpy(dst, p_, n);
  p_ += n;
  left_ -= n;
  return absl::OkStatus();
}

absl::Status WireReader::ExpectEnd(const char* what) const {
  if (left_ == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", left_, " unexpected trailing bytes"));
}

}  // namespace tandem::kv

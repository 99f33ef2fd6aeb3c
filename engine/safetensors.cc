#include "engine/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {
namespace {

using nlohmann::json;

struct DTypeEntry {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {"BOOL", DType::kBool, 1}, {"U8", DType::kU8, 1},          {"I8", DType::kI8, 1},
    {"I16", DType::kI16, 2},   {"U16", DType::kU16, 2},        {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2}, {"I32", DType::kI32, 4},        {"U32", DType::kU32, 4},
    {"F32", DType::kF32, 4},   {"F64", DType::kF64, 8},        {"I64", DType::kI64, 8},
    {"U64", DType::kU64, 8},   {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E5M2", DType::kF8E5M2, 1},
};

absl::Status Bad(const std::string& source, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": corrupt safetensors header: ", what));
}

// Reads a non-negative integer that fits in int64 (JSON numbers may be negative or fractional).
bool ReadU64(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

absl::Status ParseTensor(const std::string& source, const std::string& name, const json& v,
                         uint64_t data_size, TensorInfo* out) {
  const std::string where = absl::StrCat("tensor '", name, "': ");
  if (!v.is_object()) return Bad(source, where + "entry is not an object");
  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) return Bad(source, where + "missing string 'dtype'");
  const std::string dname = dt->get<std::string>();
  const DTypeEntry* entry = nullptr;
  for (const DTypeEntry& e : kDTypes) {
    if (dname == e.name) entry = &e;
  }
  if (entry == nullptr) return Bad(source, absl::StrCat(where, "unknown dtype '", dname, "'"));
  out->dtype = entry->dtype;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) return Bad(source, where + "missing array 'shape'");
  if (sh->size() > 16) return Bad(source, where + "shape has more than 16 dimensions");
  // Element count with overflow checks: the product must stay below 2^62 bytes.
  unsigned __int128 bytes = entry->size;
  for (const json& d : *sh) {
    uint64_t dim;
    if (!ReadU64(d, &dim) || dim > (uint64_t{1} << 62)) {
      return Bad(source, absl::StrCat(where, "bad dimension ",
                                      d.dump(-1, ' ', false, json::error_handler_t::replace)));
    }
    out->shape.push_back(static_cast<int64_t>(dim));
    bytes *= dim;
    if (bytes > (static_cast<unsigned __int128>(1) << 62)) {
      return Bad(source, where + "shape too large");
    }
  }
  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2 || !ReadU64((*off)[0], &out->begin) ||
      !ReadU64((*off)[1], &out->end)) {
    return Bad(source, where + "'data_offsets' must be [begin, end] non-negative integers");
  }
  if (out->begin > out->end) return Bad(source, where + "data_offsets begin > end");
  if (out->end > data_size) {
    return absl::DataLossError(absl::StrCat(source, ": ", where, "data_offsets end ", out->end,
                                            " beyond the data section (", data_size,
                                            " bytes): file truncated or corrupt"));
  }
  if (static_cast<unsigned __int128>(out->end - out->begin) != bytes) {
    return Bad(source, absl::StrCat(where, "shape x dtype size is ", static_cast<uint64_t>(bytes),
                                    " bytes but data_offsets span ", out->end - out->begin));
  }
  return absl::OkStatus();
}

}  // namespace

const char* DTypeName(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

size_t DTypeSize(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e.size;
  }
  return 0;
}

int64_t TensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* data, size_t size,
                                                         const std::string& source) {
  if (size < 8) {
    return absl::DataLossError(
        absl::StrCat(source, ": file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Bad(source, absl::StrCat("header length ", header_len, " exceeds the ",
                                    kMaxSafetensorsHeaderBytes, "-byte limit"));
  }
  if (header_len > size - 8) {
    return absl::DataLossError(absl::StrCat(source, ": header length ", header_len,
                                            " exceeds the file size ", size,
                                            ": file truncated or not safetensors"));
  }
  const char* text = reinterpret_cast<const char*>(data + 8);
  json j = json::parse(text, text + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad(source, "header is not valid JSON");
  if (!j.is_object()) return Bad(source, "header is not a JSON object");

  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  const uint64_t data_size = size - header.data_offset;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Bad(source, "'__metadata__' is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (m->is_string()) header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    absl::Status s = ParseTensor(source, it.key(), *it, data_size, &info);
    if (!s.ok()) return s;
    header.tensors.emplace(it.key(), std::move(info));
  }
  // Spans must not overlap (empty tensors occupy nothing).
  std::vector<std::pair<const std::string*, const TensorInfo*>> spans;
  for (const auto& [name, info] : header.tensors) {
    if (info.end > info.begin) spans.emplace_back(&name, &info);
  }
  std::sort(spans.begin(), spans.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].second->begin < spans[i - 1].second->end) {
      return Bad(source, absl::StrCat("tensors '", *spans[i - 1].first, "' and '", *spans[i].first,
                                      "' overlap"));
    }
  }
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_size_ = static_cast<size_t>(st.st_size);
  if (file->map_size_ > 0) {
    void* p = ::mmap(nullptr, file->map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    file->map_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  auto header = ParseSafetensorsHeader(file->map_, file->map_size_, path);
  if (!header.ok()) return header.status();
  file->header_ = std::move(*header);
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

absl::StatusOr<TensorView> SafetensorsFile::Get(const std::string& name) const {
  auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": missing tensor '", name, "'"));
  }
  TensorView v;
  v.name = name;
  v.info = &it->second;
  v.data = map_ + header_.data_offset + it->second.begin;
  return v;
}

}  // namespace tandem::engine

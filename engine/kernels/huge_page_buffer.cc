#include "engine/kernels/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::engine {

absl::StatusOr<HugePageBuffer> HugePageBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return HugePageBuffer();
  if (bytes > (SIZE_MAX >> 2)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot map ", bytes, " bytes"));
  }
  const size_t size = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Over-map by one huge page and trim, so that the region starts on a 2 MiB boundary (only
  // aligned 2 MiB ranges can be backed by huge pages).
  const size_t span = size + kHugePageBytes;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", size, " bytes of anonymous memory: ", std::strerror(err)));
  }
  const uintptr_t raw = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (raw + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > raw) ::munmap(p, aligned - raw);
  const uintptr_t tail = raw + span - (aligned + size);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  // Only a request: without THP support the memory stays usable with ordinary pages.
  (void)::madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return HugePageBuffer(reinterpret_cast<uint8_t*>(aligned), size);
}

HugePageBuffer::~HugePageBuffer() { Release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugePageBuffer::Release() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

int64_t HugePageBuffer::huge_page_bytes() const {
  if (data_ == nullptr) return 0;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t end = begin + size_;
  char line[512];
  bool inside = false;
  int64_t result = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    uintptr_t lo = 0, hi = 0;
    // A mapping header: "lo-hi perms offset dev inode path".
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2 &&
        std::strchr(line, '-') < std::strchr(line, ' ')) {
      inside = lo < end && begin < hi;
      continue;
    }
    long long kib = 0;
    if (inside && std::sscanf(line, "AnonHugePages: %lld kB", &kib) == 1) result += kib * 1024;
  }
  std::fclose(f);
  return result < static_cast<int64_t>(size_) ? result : static_cast<int64_t>(size_);
}

}  // namespace tandem::engine

// HugePageBuffer: a zero-filled, read-write region of anonymous memory, 2 MiB aligned and offered
// to the kernel for transparent huge pages (madvise(MADV_HUGEPAGE)).
//
// For data that kernels stream end to end on every step (the weights during decode). With 4 KiB
// pages a 1 GB stream crosses 250,000 pages per step: a TLB miss and page walk each (two-level
// under a hypervisor), and the hardware prefetchers stop at every page boundary. With 2 MiB pages
// the same stream crosses 500. Huge pages are a request: when the kernel has none to give (THP
// disabled, memory fragmented) the buffer is backed by ordinary pages and only speed changes;
// huge_page_bytes() says what was obtained.
//
// Thread-safety: the object is not synchronised; the memory may be read by many threads once
// written. Ownership: owns the mapping and unmaps it on destruction; movable, not copyable.
#ifndef TANDEM_ENGINE_KERNELS_HUGE_PAGE_BUFFER_H_
#define TANDEM_ENGINE_KERNELS_HUGE_PAGE_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"

namespace tandem::engine {

class HugePageBuffer {
 public:
  static constexpr size_t kHugePageBytes = size_t{2} << 20;

  HugePageBuffer() = default;
  // Maps at least `bytes` (rounded up to whole 2 MiB pages). ResourceExhausted when the mapping
  // fails (message names the size and errno).
  static absl::StatusOr<HugePageBuffer> Allocate(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // bytes mapped (a multiple of kHugePageBytes)

  // Bytes of this buffer currently backed by transparent huge pages, from /proc/self/smaps
  // (AnonHugePages of the mapping); 0 when that cannot be read.
  int64_t huge_page_bytes() const;

 private:
  HugePageBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  void Release();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KERNELS_HUGE_PAGE_BUFFER_H_

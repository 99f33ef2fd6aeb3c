// The registered memory regions of one engine and the write windows opened on them.
//
// Every backend checks every incoming write here before touching memory: the region must
// exist, [offset, offset+length) must lie inside it (overflow-safe), and for a restricted region
// the range must lie inside one window opened for the writing peer. Local reads (the source side
// of a batch) are checked the same way without windows.
// Thread-safe: regions are fixed after Freeze(); windows change under a mutex. Does not own the
// memory it describes.
#ifndef TANDEM_KVTRANSFER_REGION_TABLE_H_
#define TANDEM_KVTRANSFER_REGION_TABLE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/descriptor.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

// True if [offset, offset+length) lies within [0, size), without overflow.
inline bool RangeInside(uint64_t offset, uint64_t length, uint64_t size) {
  return offset <= size && length <= size - offset;
}

class RegionTable {
 public:
  RegionTable() = default;
  RegionTable(const RegionTable&) = delete;
  RegionTable& operator=(const RegionTable&) = delete;

  // Before Freeze() only. Rejects a null base, zero size, duplicate id and overlap.
  absl::Status Add(const LocalRegion& region);
  void Freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }
  const std::vector<LocalRegion>& regions() const { return regions_; }
  const LocalRegion* Find(RegionId id) const;

  // Source side: the address of a local range, or InvalidArgument.
  absl::StatusOr<uint8_t*> LocalRange(RegionId id, uint64_t offset, uint64_t length) const;
  // Destination side: the address `peer` may write, or an error (InvalidArgument for a bad
  // region/range, PermissionDenied for a range outside the peer's windows).
  absl::StatusOr<uint8_t*> CheckIncomingWrite(const std::string& peer, RegionId id, uint64_t offset,
                                              uint64_t length) const;

  absl::StatusOr<WindowId> OpenWindow(const std::string& peer, RegionId id, uint64_t offset,
                                      uint64_t length);
  absl::Status CloseWindow(WindowId window);
  size_t open_windows() const;

 private:
  struct Window {
    std::string peer;
    RegionId region;
    uint64_t offset;
    uint64_t length;
  };

  bool frozen_ = false;
  std::vector<LocalRegion> regions_;  // immutable once frozen_
  mutable absl::Mutex mu_;
  WindowId next_window_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<WindowId, Window> windows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_REGION_TABLE_H_

#include "kvtransfer/region_table.h"

#include "absl/strings/str_cat.h"

namespace tandem::kv {

absl::Status RegionTable::Add(const LocalRegion& region) {
  if (frozen_) {
    return absl::FailedPreconditionError("regions are registered before Start(), not after");
  }
  if (region.base == nullptr || region.size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("region ", region.id, ": null base or zero size"));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(region.base);
  if (begin + region.size < begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("region ", region.id, ": wraps the address space"));
  }
  for (const LocalRegion& r : regions_) {
    if (r.id == region.id) {
      return absl::AlreadyExistsError(absl::StrCat("region id ", region.id, " already registered"));
    }
    const uintptr_t b = reinterpret_cast<uintptr_t>(r.base);
    if (begin < b + r.size && b < begin + region.size) {
      return absl::InvalidArgumentError(
          absl::StrCat("region ", region.id, " overlaps region ", r.id));
    }
  }
  regions_.push_back(region);
  return absl::OkStatus();
}

const LocalRegion* RegionTable::Find(RegionId id) const {
  for (const LocalRegion& r : regions_) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

absl::StatusOr<uint8_t*> RegionTable::LocalRange(RegionId id, uint64_t offset,
                                                 uint64_t length) const {
  const LocalRegion* r = Find(id);
  if (r == nullptr) return absl::InvalidArgumentError(absl::StrCat("no local region ", id));
  if (!RangeInside(offset, length, r->size)) {
    return absl::InvalidArgumentError(absl::StrCat("local range [", offset, ", +", length,
                                                   ") outside region ", id, " of ", r->size,
                                                   " bytes"));
  }
  return static_cast<uint8_t*>(r->base) + offset;
}

absl::StatusOr<uint8_t*> RegionTable::CheckIncomingWrite(const std::string& peer, RegionId id,
                                                         uint64_t offset, uint64_t length) const {
  const LocalRegion* r = Find(id);
  if (r == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("write into unknown region ", id));
  }
  if (!RangeInside(offset, length, r->size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "write [", offset, ", +", length, ") outside region ", id, " of ", r->size, " bytes"));
  }
  if (r->restricted) {
    absl::MutexLock lock(&mu_);
    bool allowed = false;
    for (const auto& [wid, w] : windows_) {
      if (w.peer == peer && w.region == id && offset >= w.offset &&
          RangeInside(offset - w.offset, length, w.length)) {
        allowed = true;
        break;
      }
    }
    if (!allowed) {
      return absl::PermissionDeniedError(
          absl::StrCat("write [", offset, ", +", length, ") into region ", id,
                       " is outside every window open for peer '", peer, "'"));
    }
  }
  return static_cast<uint8_t*>(r->base) + offset;
}

absl::StatusOr<WindowId> RegionTable::OpenWindow(const std::string& peer, RegionId id,
                                                 uint64_t offset, uint64_t length) {
  const LocalRegion* r = Find(id);
  if (r == nullptr) return absl::InvalidArgumentError(absl::StrCat("no local region ", id));
  if (!r->restricted) {
    return absl::FailedPreconditionError(
        absl::StrCat("region ", id, " is not restricted; windows apply to restricted regions"));
  }
  if (length == 0 || !RangeInside(offset, length, r->size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("window [", offset, ", +", length, ") outside region ", id));
  }
  absl::MutexLock lock(&mu_);
  WindowId wid = next_window_++;
  windows_[wid] = Window{peer, id, offset, length};
  return wid;
}

absl::Status RegionTable::CloseWindow(WindowId window) {
  absl::MutexLock lock(&mu_);
  if (windows_.erase(window) == 0) {
    return absl::NotFoundError(absl::StrCat("no open window ", window));
  }
  return absl::OkStatus();
}

size_t RegionTable::open_windows() const {
  absl::MutexLock lock(&mu_);
  return windows_.size();
}

}  // namespace tandem::kv

#include "common/http_body_budget.h"

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {

struct BodyBudget::Lease::Shared {
  explicit Shared(size_t limit) : limit(limit) {}

  // Adds `bytes` to the count unless that would pass the limit.
  bool Take(size_t bytes) {
    size_t held_now = held.load(std::memory_order_relaxed);
    do {
      if (bytes > limit - held_now) return false;
    } while (!held.compare_exchange_weak(held_now, held_now + bytes, std::memory_order_relaxed));
    return true;
  }

  const size_t limit;
  std::atomic<size_t> held{0};
};

BodyBudget::Lease::Lease(Lease&& other) noexcept
    : shared_(std::move(other.shared_)), bytes_(std::exchange(other.bytes_, 0)) {}

BodyBudget::Lease& BodyBudget::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    shared_ = std::move(other.shared_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

bool BodyBudget::Lease::Grow(size_t bytes) {
  if (shared_ == nullptr || !shared_->Take(bytes)) return false;
  bytes_ += bytes;
  return true;
}

void BodyBudget::Lease::Release() {
  if (shared_ != nullptr && bytes_ > 0) {
    shared_->held.fetch_sub(bytes_, std::memory_order_relaxed);
  }
  shared_.reset();
  bytes_ = 0;
}

BodyBudget::BodyBudget(size_t limit, std::function<void()> on_refused)
    : shared_(std::make_shared<Lease::Shared>(limit)), on_refused_(std::move(on_refused)) {}

std::optional<BodyBudget::Lease> BodyBudget::TryReserve(size_t bytes) {
  if (!shared_->Take(bytes)) return std::nullopt;
  return Lease(shared_, bytes);
}

HttpResponse BodyBudget::Refusal() {
  if (on_refused_) on_refused_();
  int64_t unlogged = 0;
  if (refusal_logs_.Allow(&unlogged)) {
    spdlog::warn(
        "http: request bodies held over all connections are at their limit of {} bytes; "
        "answering 503 ({} more refused since the last such line)",
        limit(), unlogged);
  }
  HttpResponse response =
      HttpResponse::Error(503, absl::StrCat("the server holds its limit of request bodies (",
                                            limit(), " bytes over all connections); retry later"));
  response.headers.emplace_back("Retry-After", "1");
  return response;
}

size_t BodyBudget::limit() const { return shared_->limit; }

size_t BodyBudget::held() const { return shared_->held.load(std::memory_order_relaxed); }

}  // namespace tandem::http_internal

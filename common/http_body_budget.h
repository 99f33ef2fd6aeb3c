// BodyBudget: the bytes of request bodies one HttpServer holds at once, over all its connections.
//
// A body counts from the moment its head is accepted until the handler has answered (a whole
// response sent, or a stream finished) or the request's exchange is gone (the handler, and
// whatever it handed the request to, let go of it without answering: e.g. a queued job whose
// client left). Per connection a
// body is bounded by max_body_bytes; without this bound a flood of connections, each sending a
// body just under that limit, would make the server hold connections x max_body_bytes (10,000 x
// 32 MiB on the router's defaults) and run the host out of memory. A request whose body does not
// fit in what is left is answered 503 (Retry-After) before any body byte is read.
//
// A body of known length (Content-Length) reserves it whole from its head; a chunked body
// reserves each chunk as its header arrives, so it is refused at the chunk that would overrun.
//
// Thread-safety: every method may be called from any thread. Leases may outlive the budget's
// owner (an exchange kept by a caller after HttpServer::Stop): they share the count.
#ifndef TANDEM_COMMON_HTTP_BODY_BUDGET_H_
#define TANDEM_COMMON_HTTP_BODY_BUDGET_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>

#include "absl/time/time.h"
#include "common/http_types.h"
#include "common/log_every.h"

namespace tandem::http_internal {

class BodyBudget {
 public:
  // The bytes a lease holds; released when it is destroyed (or assigned over).
  class Lease {
   public:
    Lease() = default;
    ~Lease() { Release(); }
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    // Adds `bytes` to this lease; false, holding what it held, when they do not fit. A default
    // constructed lease cannot grow.
    bool Grow(size_t bytes);
    size_t bytes() const { return bytes_; }

   private:
    friend class BodyBudget;
    struct Shared;
    Lease(std::shared_ptr<Shared> shared, size_t bytes)
        : shared_(std::move(shared)), bytes_(bytes) {}
    void Release();

    std::shared_ptr<Shared> shared_;
    size_t bytes_ = 0;
  };

  // `on_refused`, when set, runs on each Refusal() (on an I/O thread: cheap, non-blocking).
  explicit BodyBudget(size_t limit, std::function<void()> on_refused = nullptr);

  // A lease of `bytes` (0 always fits), or nullopt, with nothing taken, when they do not fit in
  // what is left.
  std::optional<Lease> TryReserve(size_t bytes);

  // The answer to a request whose body does not fit: 503 with Retry-After. Logs a warning, at
  // most one every 10 s (with how many refusals it did not log), and runs `on_refused`.
  HttpResponse Refusal();

  size_t limit() const;
  size_t held() const;  // bytes leased now

 private:
  std::shared_ptr<Lease::Shared> shared_;
  std::function<void()> on_refused_;
  LogEvery refusal_logs_{absl::Seconds(10)};
};

}  // namespace tandem::http_internal

#endif  // TANDEM_COMMON_HTTP_BODY_BUDGET_H_

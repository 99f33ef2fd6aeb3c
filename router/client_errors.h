// What a client may learn when a worker fails its request: which role failed and why, never
// where the worker is. The router logs the full text (worker URL included); the client's 5xx or
// SSE error event carries the text made here. Pure functions; thread-safe.
#ifndef TANDEM_ROUTER_CLIENT_ERRORS_H_
#define TANDEM_ROUTER_CLIENT_ERRORS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "router/api/request.h"

namespace tandem::router {

// The largest leg request a worker accepts (its gRPC and session-socket message limit is
// 64 MiB); the rest of the 64 MiB is headroom for the message's framing.
inline constexpr size_t kMaxLegBytes = (size_t{64} << 20) - (size_t{64} << 10);

// `text` with every network address replaced by "<address>": URLs ("http://host:port/...",
// "ipv4:1.2.3.4:5"), IPv4 addresses with or without a port, bracketed IPv6 ("[::1]:80") and
// "localhost:port". Worker and gRPC messages name peers this way ("failed to connect to all
// addresses; last error: ... ipv4:127.0.0.1:32006: ...").
std::string RedactAddresses(absl::string_view text);

// The client-facing status for a leg that failed with `code` / `message` on the worker of role
// `leg` ("prefill", "decode"): the same code, the message "the <leg> worker failed: <message
// without addresses>".
absl::Status ClientLegError(absl::StatusCode code, absl::string_view leg,
                            absl::string_view message);

// An upper bound on the serialized size of the prefill or decode leg of `request`: its ids as
// varints and its sampling parameters, plus an allowance for the rid, room and bootstrap fields.
size_t LegBytesUpperBound(const RoutedRequest& request);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_CLIENT_ERRORS_H_

// What the router reads from a client request's headers: the API key (Authorization: Bearer) and
// the client's request id. Pure functions over HttpRequest; thread-safe.
#ifndef TANDEM_ROUTER_REQUEST_HEADERS_H_
#define TANDEM_ROUTER_REQUEST_HEADERS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/http_types.h"

namespace tandem::router {

// OK when `key` is empty (no key configured) or the request carries "Authorization: Bearer
// <key>" (scheme case-insensitive). Otherwise Unauthenticated (HTTP 401, OpenAI's shape) with a
// message saying what was missing or wrong; `what` names the key ("API key", "admin key").
absl::Status CheckBearer(const HttpRequest& request, const std::string& key,
                         const std::string& what);

// The request-id headers checked when --request-id-headers is not given, in order.
const std::vector<std::string>& DefaultRequestIdHeaders();

// The first non-empty value among `names` (case-insensitive), trimmed; nullopt when none. The
// value is echoed (x-request-id, logs, the table of live rids), so one longer than kMaxRidBytes
// (256) or with anything but printable ASCII is InvalidArgument (400) naming the header and the
// limit, not silently replaced.
absl::StatusOr<std::optional<std::string>> ClientRequestId(const HttpRequest& request,
                                                           const std::vector<std::string>& names);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_REQUEST_HEADERS_H_

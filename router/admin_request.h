// Parsing of the admin API's requests that add or remove workers: the JSON body of
// POST/DELETE /workers and the query forms of SGLang's router (/add_worker?url=...). Pure
// functions; thread-safe.
#ifndef TANDEM_ROUTER_ADMIN_REQUEST_H_
#define TANDEM_ROUTER_ADMIN_REQUEST_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/http_types.h"

namespace tandem::router {

// Longest worker url accepted (a url is echoed in answers, logs and metrics labels).
inline constexpr size_t kMaxWorkerUrlBytes = 1024;

// One worker as the admin API names it.
struct AdminWorkerSpec {
  std::string url;
  std::string worker_type;            // "prefill" | "decode" | "regular"
  std::optional<int> bootstrap_port;  // prefill workers in PD mode
};

// {"url": "...", "worker_type": "prefill|decode|regular", "bootstrap_port": N}. url: 1 to
// kMaxWorkerUrlBytes bytes of printable ASCII; client strings quoted in errors are cut to 64
// bytes (api_internal::Excerpt). worker_type
// defaults to `default_type` when absent; bootstrap_port may be absent or null. Errors are
// InvalidArgument naming the field and what is wrong with it (a body nesting deeper than 64
// levels is refused before it is parsed); never throws.
absl::StatusOr<AdminWorkerSpec> ParseAdminWorkerBody(std::string_view body,
                                                     const std::string& default_type);

// The same from a query string: ?url=...[&worker_type=...][&bootstrap_port=N].
absl::StatusOr<AdminWorkerSpec> ParseAdminWorkerQuery(const HttpRequest& request,
                                                      const std::string& default_type);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ADMIN_REQUEST_H_

// Parsing of SGLang's POST /abort_request body ({"rid": "...", "abort_all": false}; other keys of
// SGLang's AbortReq are ignored). A pure function; thread-safe.
#ifndef TANDEM_ROUTER_ABORT_REQUEST_H_
#define TANDEM_ROUTER_ABORT_REQUEST_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem::router {

struct AbortSpec {
  std::string rid;         // the request to abort (empty with abort_all)
  bool abort_all = false;  // every request in progress
};

// An empty body is an empty object. Errors are InvalidArgument naming the field: a body that is
// not one JSON object (or nests deeper than 64 levels, refused before it is parsed), a rid that is
// not a string (or longer than 256 bytes: no request can have it), an abort_all that is not a
// boolean, or neither a rid nor abort_all true. Null fields count as absent. Never throws.
absl::StatusOr<AbortSpec> ParseAbortRequest(std::string_view body);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ABORT_REQUEST_H_

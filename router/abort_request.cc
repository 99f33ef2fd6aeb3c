#include "router/abort_request.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "router/api/json_fields.h"
#include "router/api/request.h"

namespace tandem::router {

absl::StatusOr<AbortSpec> ParseAbortRequest(std::string_view body) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) body = "{}";
  // Before the parser, which builds a node per level: a 32 MiB body of brackets costs it
  // hundreds of megabytes.
  RETURN_IF_ERROR(
      api_internal::CheckJsonBeforeParsing(body, api_internal::kMaxControlParsedBytes, "the body"));
  const nlohmann::json j =
      nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "the body must be a JSON object: {\"rid\": \"...\"} or {\"abort_all\": true}");
  }
  AbortSpec spec;
  if (auto it = j.find("abort_all"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) return absl::InvalidArgumentError("abort_all must be a boolean");
    spec.abort_all = it->get<bool>();
  }
  if (auto it = j.find("rid"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) return absl::InvalidArgumentError("rid must be a string");
    spec.rid = it->get<std::string>();
    if (spec.rid.size() > kMaxRidBytes) {
      return absl::InvalidArgumentError(absl::StrCat("rid must be at most ", kMaxRidBytes,
                                                     " bytes, got ", spec.rid.size(), " bytes"));
    }
  }
  if (!spec.abort_all && spec.rid.empty()) {
    return absl::InvalidArgumentError(
        "rid is required: the rid of the request to abort (or abort_all: true)");
  }
  return spec;
}

}  // namespace tandem::router

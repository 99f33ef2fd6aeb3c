#include "router/admin_request.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "router/api/json_fields.h"

namespace tandem::router {
namespace {

absl::Status CheckSpec(const AdminWorkerSpec& spec) {
  if (spec.url.empty()) return absl::InvalidArgumentError("url must be a non-empty string");
  // The url is echoed (answers, logs, metrics labels): bounded, printable ASCII.
  RETURN_IF_ERROR(api_internal::CheckEchoedId(spec.url, "url", kMaxWorkerUrlBytes));
  if (spec.worker_type != "prefill" && spec.worker_type != "decode" &&
      spec.worker_type != "regular") {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_type must be \"prefill\", \"decode\" or \"regular\", not \"",
                     api_internal::Excerpt(spec.worker_type), "\""));
  }
  if (spec.bootstrap_port && (*spec.bootstrap_port < 1 || *spec.bootstrap_port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bootstrap_port must be in [1, 65535], not ", *spec.bootstrap_port));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AdminWorkerSpec> ParseAdminWorkerBody(std::string_view body,
                                                     const std::string& default_type) {
  RETURN_IF_ERROR(
      api_internal::CheckJsonBeforeParsing(body, api_internal::kMaxControlParsedBytes, "the body"));
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  AdminWorkerSpec spec;
  spec.worker_type = default_type;
  auto url = j.find("url");
  if (url == j.end()) return absl::InvalidArgumentError("url is required");
  if (!url->is_string()) return absl::InvalidArgumentError("url must be a string");
  spec.url = url->get<std::string>();
  auto type = j.find("worker_type");
  if (type != j.end() && !type->is_null()) {
    if (!type->is_string()) return absl::InvalidArgumentError("worker_type must be a string");
    spec.worker_type = type->get<std::string>();
  }
  auto port = j.find("bootstrap_port");
  if (port != j.end() && !port->is_null()) {
    if (!port->is_number_integer()) {
      return absl::InvalidArgumentError("bootstrap_port must be an integer or null");
    }
    const int64_t p = port->get<int64_t>();
    if (p < 1 || p > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("bootstrap_port must be in [1, 65535], not ", p));
    }
    spec.bootstrap_port = static_cast<int>(p);
  }
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  return spec;
}

absl::StatusOr<AdminWorkerSpec> ParseAdminWorkerQuery(const HttpRequest& request,
                                                      const std::string& default_type) {
  AdminWorkerSpec spec;
  spec.worker_type = default_type;
  std::optional<std::string> url = request.Query("url");
  if (!url) return absl::InvalidArgumentError("the query parameter url is required (?url=...)");
  spec.url = *url;
  if (auto type = request.Query("worker_type")) spec.worker_type = *type;
  if (auto port = request.Query("bootstrap_port")) {
    int p = 0;
    if (!absl::SimpleAtoi(*port, &p)) {
      return absl::InvalidArgumentError(absl::StrCat("bootstrap_port must be an integer, not \"",
                                                     api_internal::Excerpt(*port), "\""));
    }
    spec.bootstrap_port = p;
  }
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  return spec;
}

}  // namespace tandem::router

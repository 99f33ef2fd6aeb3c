#include "router/request_headers.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "router/api/request.h"

namespace tandem::router {

absl::Status CheckBearer(const HttpRequest& request, const std::string& key,
                         const std::string& what) {
  if (key.empty()) return absl::OkStatus();
  std::optional<std::string> header = request.Header("Authorization");
  if (!header) {
    return absl::UnauthenticatedError(
        absl::StrCat("missing ", what, ": send it as the header 'Authorization: Bearer <key>'"));
  }
  std::string value(absl::StripAsciiWhitespace(*header));
  constexpr char kScheme[] = "bearer ";
  if (value.size() < sizeof(kScheme) - 1 ||
      !absl::EqualsIgnoreCase(value.substr(0, sizeof(kScheme) - 1), kScheme)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the Authorization header must be 'Bearer <", what, ">'"));
  }
  const std::string given(absl::StripAsciiWhitespace(value.substr(sizeof(kScheme) - 1)));
  // Compare in constant time for equal lengths: the key is a secret.
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size() && i < key.size(); ++i) {
    diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  }
  if (diff != 0) return absl::UnauthenticatedError(absl::StrCat("incorrect ", what, " provided"));
  return absl::OkStatus();
}

const std::vector<std::string>& DefaultRequestIdHeaders() {
  static const auto* headers =
      new std::vector<std::string>{"x-request-id", "x-correlation-id", "x-trace-id", "request-id"};
  return *headers;
}

absl::StatusOr<std::optional<std::string>> ClientRequestId(const HttpRequest& request,
                                                           const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    std::optional<std::string> value = request.Header(name);
    if (!value) continue;
    std::string id(absl::StripAsciiWhitespace(*value));
    if (id.empty()) continue;
    if (id.size() > kMaxRidBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("the ", name, " header must be at most ", kMaxRidBytes,
                       " bytes of printable ASCII, got ", id.size(), " bytes"));
    }
    for (const char c : id) {
      if (!absl::ascii_isprint(static_cast<unsigned char>(c))) {
        return absl::InvalidArgumentError(
            absl::StrCat("the ", name, " header must be at most ", kMaxRidBytes,
                         " bytes of printable ASCII (no control characters or non-ASCII bytes)"));
      }
    }
    return id;
  }
  return std::nullopt;
}

}  // namespace tandem::router

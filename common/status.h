// Status helpers on absl::Status / absl::StatusOr, used at every module boundary.
//
// Errors that a peer, a file, the network or a user can cause are values, never exceptions:
//   RETURN_IF_ERROR(DoThing());                 // propagates a non-OK absl::Status
//   ASSIGN_OR_RETURN(auto value, MakeThing());  // unwraps an absl::StatusOr<T> or propagates
//   ASSIGN_OR_RETURN(auto w, Load(path), "model.safetensors: ");  // with context
// The optional third argument of ASSIGN_OR_RETURN / second of RETURN_IF_ERROR is a prefix string
// prepended to the message, so a caller can add context ("model.safetensors: ") without losing
// the original code.
//
// Note: Debian's Abseil is built with its own absl::string_view (not an alias of
// std::string_view); convert explicitly where the two meet.
#ifndef TANDEM_COMMON_STATUS_H_
#define TANDEM_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tandem {

// Returns `status` with `prefix` prepended to its message; OK stays OK.
inline absl::Status Annotate(const absl::Status& status, absl::string_view prefix) {
  if (status.ok() || prefix.empty()) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

}  // namespace tandem

#define TANDEM_STATUS_CONCAT_INNER_(a, b) a##b
#define TANDEM_STATUS_CONCAT_(a, b) TANDEM_STATUS_CONCAT_INNER_(a, b)

#define TANDEM_RETURN_IF_ERROR_1_(expr)              \
  do {                                               \
    ::absl::Status tandem_status_ = (expr);          \
    if (!tandem_status_.ok()) return tandem_status_; \
  } while (0)
#define TANDEM_RETURN_IF_ERROR_2_(expr, prefix)                                  \
  do {                                                                           \
    ::absl::Status tandem_status_ = (expr);                                      \
    if (!tandem_status_.ok()) return ::tandem::Annotate(tandem_status_, prefix); \
  } while (0)
#define TANDEM_PICK_3_(a, b, c, ...) c

// RETURN_IF_ERROR(expr [, prefix])
#define RETURN_IF_ERROR(...)                                                                \
  TANDEM_PICK_3_(__VA_ARGS__, TANDEM_RETURN_IF_ERROR_2_, TANDEM_RETURN_IF_ERROR_1_, unused) \
  (__VA_ARGS__)

#define TANDEM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, prefix)     \
  auto tmp = (expr);                                              \
  if (!tmp.ok()) return ::tandem::Annotate(tmp.status(), prefix); \
  lhs = std::move(tmp).value()
#define TANDEM_ASSIGN_OR_RETURN_2_(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_STATUS_CONCAT_(tandem_statusor_, __LINE__), lhs, expr, "")
#define TANDEM_ASSIGN_OR_RETURN_3_(lhs, expr, prefix)                                         \
  TANDEM_ASSIGN_OR_RETURN_IMPL_(TANDEM_STATUS_CONCAT_(tandem_statusor_, __LINE__), lhs, expr, \
                                prefix)
#define TANDEM_PICK_4_(a, b, c, d, ...) d

// ASSIGN_OR_RETURN(lhs, expr [, prefix]); lhs may declare (`auto x`) or assign (`x`).
#define ASSIGN_OR_RETURN(...)                                                                 \
  TANDEM_PICK_4_(__VA_ARGS__, TANDEM_ASSIGN_OR_RETURN_3_, TANDEM_ASSIGN_OR_RETURN_2_, unused) \
  (__VA_ARGS__)

#endif  // TANDEM_COMMON_STATUS_H_

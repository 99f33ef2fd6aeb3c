// Invariant checks: TANDEM_CHECK(condition, message) and TANDEM_CHECK_OK(status, what).
//
// A failed check is a bug in the calling code or a configuration the process cannot run with,
// found where continuing would corrupt state (KV block bookkeeping, a weight layout, a CSPRNG
// that failed) — never bad input, which gets an absl::Status. It writes
// "<file>:<line>: check failed: <condition>: <message>" to stderr and aborts, so the core dump and
// the supervisor's restart follow. Checks are always on (Release included): each guards a
// condition whose failure must not pass silently, and none sits on a per-token path.
//
// `message` is anything convertible to std::string_view (a literal, an absl::StrCat result); it
// is evaluated only when the check fails.
#ifndef TANDEM_COMMON_CHECK_H_
#define TANDEM_COMMON_CHECK_H_

#include <string_view>

#include "absl/status/status.h"

namespace tandem {

// Prints the failure and aborts. Use the macros.
[[noreturn]] void CheckFailure(const char* file, int line, std::string_view condition,
                               std::string_view message);

}  // namespace tandem

#define TANDEM_CHECK(condition, message)                                 \
  do {                                                                   \
    if (!(condition)) {                                                  \
      ::tandem::CheckFailure(__FILE__, __LINE__, #condition, (message)); \
    }                                                                    \
  } while (false)

// `status` must be OK; `what` names the operation ("KV block release").
#define TANDEM_CHECK_OK(status, what)                                                      \
  do {                                                                                     \
    const ::absl::Status tandem_check_status_ = (status);                                  \
    if (!tandem_check_status_.ok()) {                                                      \
      ::tandem::CheckFailure(__FILE__, __LINE__, (what), tandem_check_status_.ToString()); \
    }                                                                                      \
  } while (false)

#endif  // TANDEM_COMMON_CHECK_H_

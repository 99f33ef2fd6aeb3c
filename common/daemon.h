// Small pieces every daemon's main() uses, so that all of them behave alike for operators:
// exit code 2 for a bad flag, a bad config file or bad options (model path, secret...), 1 for a
// failure to start (port in use, device missing), 0 after an orderly shutdown.
#ifndef TANDEM_COMMON_DAEMON_H_
#define TANDEM_COMMON_DAEMON_H_

#include <string>

#include "absl/status/status.h"

namespace tandem {

inline constexpr int kExitUsage = 2;
inline constexpr int kExitStartFailed = 1;

// Prints "<program>: <message>" to stderr and returns the exit code for `status`: kExitUsage
// when the operator's input is at fault (INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION,
// OUT_OF_RANGE, DATA_LOSS: e.g. a corrupt model file), otherwise kExitStartFailed.
int ReportStartupFailure(const std::string& program, const absl::Status& status);

}  // namespace tandem

#endif  // TANDEM_COMMON_DAEMON_H_

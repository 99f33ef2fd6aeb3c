#include "common/daemon.h"

#include <iostream>

namespace tandem {

int ReportStartupFailure(const std::string& program, const absl::Status& status) {
  std::cerr << program << ": " << status.message() << std::endl;
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kDataLoss:
      return kExitUsage;
    default:
      return kExitStartFailed;
  }
}

}  // namespace tandem

// Parser for the Prometheus text exposition format (version 0.0.4), as the router's /metrics
// serves it: `# HELP` / `# TYPE` comments and `name{label="value",...} value [timestamp]` samples.
// Enough of the format for tandemctl's summary; no OpenMetrics extensions (exemplars, `# EOF`).
// Pure functions over values; thread-compatible.
#ifndef TANDEM_TOOLS_TANDEMCTL_PROMETHEUS_H_
#define TANDEM_TOOLS_TANDEMCTL_PROMETHEUS_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::ctl {

struct Sample {
  std::string name;                           // "tandem_router_ttft_seconds_bucket"
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;                           // +Inf, -Inf and NaN are accepted

  // The value of `label`, or "" when absent.
  std::string Label(const std::string& label) const;
};

// Every sample of `text`, in order. Comments and blank lines are skipped. A malformed line
// (bad name, unterminated label value, bad escape, missing or non-numeric value) is
// InvalidArgument naming the line number and what is wrong.
absl::StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text);

}  // namespace tandem::ctl

#endif  // TANDEM_TOOLS_TANDEMCTL_PROMETHEUS_H_

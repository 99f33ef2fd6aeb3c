#include "common/byte_size.h"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem {
namespace {

absl::Status BadSize(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "invalid memory size '", text, "': ", why,
      " (use bytes, a unit such as 4GiB or 512MB, or a fraction of RAM such as 0.25)"));
}

// Multiplier for a unit suffix, 0 if unknown. Single letters are binary, as operators expect
// from tools like `free -g` and Kubernetes' Gi/G habits differ; we document the choice.
int64_t UnitMultiplier(const std::string& unit) {
  static constexpr int64_t kKi = 1024;
  if (unit.empty() || unit == "b") return 1;
  if (unit == "k" || unit == "kib") return kKi;
  if (unit == "m" || unit == "mib") return kKi * kKi;
  if (unit == "g" || unit == "gib") return kKi * kKi * kKi;
  if (unit == "t" || unit == "tib") return kKi * kKi * kKi * kKi;
  if (unit == "kb") return 1000;
  if (unit == "mb") return 1000 * 1000;
  if (unit == "gb") return 1000LL * 1000 * 1000;
  if (unit == "tb") return 1000LL * 1000 * 1000 * 1000;
  return 0;
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(const std::string& text, int64_t total_ram_bytes) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty()) return BadSize(text, "empty");
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  std::string unit(absl::StripAsciiWhitespace(s.substr(i)));
  absl::AsciiStrToLower(&unit);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) {
    return BadSize(text, "not a number");
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) {
    return BadSize(text, "not a number");
  }
  if (value <= 0) return BadSize(text, "must be greater than zero");

  const bool is_integer = number.find('.') == std::string::npos;
  if (unit.empty() && !is_integer) {
    if (value >= 1) return BadSize(text, "a fraction of RAM must be below 1");
    if (total_ram_bytes <= 0) return BadSize(text, "the machine's RAM size is unknown");
    return static_cast<int64_t>(value * static_cast<double>(total_ram_bytes));
  }
  const int64_t multiplier = UnitMultiplier(unit);
  if (multiplier == 0) return BadSize(text, absl::StrCat("unknown unit '", unit, "'"));
  const double bytes = value * static_cast<double>(multiplier);
  if (bytes >= 9.0e18) return BadSize(text, "too large");
  if (bytes < 1) return BadSize(text, "less than one byte");
  return static_cast<int64_t>(bytes);
}

int64_t TotalRamBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<int64_t>(pages) * page_size;
}

std::string FormatBytes(int64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.2f %s", v, kUnits[u]);
}

}  // namespace tandem

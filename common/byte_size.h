// Parsing of memory sizes given by operators: "--kv-cache-memory 4GiB", "512MB", "1073741824",
// or a fraction of the machine's RAM such as "0.25". Never a block count: the daemons derive block
// counts from bytes (DESIGN.md).
#ifndef TANDEM_COMMON_BYTE_SIZE_H_
#define TANDEM_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace tandem {

// Parses `text` as a size in bytes. Accepted forms:
//   "1073741824"              plain bytes (an integer >= 1)
//   "4GiB" "512MiB" "64KiB"   binary units (KiB, MiB, GiB, TiB), integer or decimal ("1.5GiB")
//   "4GB" "512MB" "64KB"      decimal units (KB, MB, GB, TB) — also "4G", "512M", "64K" as binary
//   "0.25"                    a fraction in (0, 1) of `total_ram_bytes`
// Case-insensitive, optional spaces between number and unit. Zero, negatives, garbage, overflow
// and fractions >= 1 without a unit are errors naming the value.
absl::StatusOr<int64_t> ParseByteSize(const std::string& text, int64_t total_ram_bytes);

// Total physical memory of this machine in bytes (sysconf), or 0 if unknown.
int64_t TotalRamBytes();

// "1.50 GiB" style rendering for logs and errors.
std::string FormatBytes(int64_t bytes);

}  // namespace tandem

#endif  // TANDEM_COMMON_BYTE_SIZE_H_

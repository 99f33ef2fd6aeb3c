// The release version of Tandem, printed by every binary's --version.
#ifndef TANDEM_COMMON_VERSION_H_
#define TANDEM_COMMON_VERSION_H_

namespace tandem {

inline constexpr char kTandemVersion[] = "0.1.0";

}  // namespace tandem

#endif  // TANDEM_COMMON_VERSION_H_

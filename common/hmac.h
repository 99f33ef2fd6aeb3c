// HMAC-SHA256 and a constant-time comparison: the one implementation behind every message
// authenticator in Tandem (cluster tokens and worker proofs in common/cluster_token.h, the KV
// transfer handshake in kvtransfer/auth.h, the KV control channel in
// worker/handoff/control_channel.h). Each caller keeps its own domain label and field encoding.
#ifndef TANDEM_COMMON_HMAC_H_
#define TANDEM_COMMON_HMAC_H_

#include <string>
#include <string_view>

namespace tandem {

inline constexpr size_t kHmacSha256Bytes = 32;

// HMAC-SHA256 of `message` under `key`: kHmacSha256Bytes raw bytes.
std::string HmacSha256(std::string_view key, std::string_view message);

// Whether `a` and `b` hold the same bytes, in a time that depends only on their sizes (never on
// where they first differ), so a peer cannot learn a valid authenticator byte by byte. Unequal
// sizes and empty inputs are unequal.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tandem

#endif  // TANDEM_COMMON_HMAC_H_

// Cluster membership: a shared secret proven with an HMAC-SHA256 challenge-response.
//
// Both sides contribute a random nonce; each proves knowledge of the secret by sending
// HMAC(secret, label | role | client nonce | server nonce | client name | server name), so a
// recorded exchange cannot be replayed and neither side ever sends the secret. Proofs are
// compared in constant time. The daemons reuse these helpers for their bootstrap channel.
// The transport is not encrypted: the secret keeps non-members out; it does not hide the bytes
// from someone who can read the network (isolate the KV network for that).
// Stateless functions; thread-safe.
#ifndef TANDEM_KVTRANSFER_AUTH_H_
#define TANDEM_KVTRANSFER_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tandem::kv {

inline constexpr size_t kMinSecretBytes = 16;

enum class AuthRole { kClient, kServer };

// OK if `secret` is usable (at least kMinSecretBytes bytes).
absl::Status ValidateClusterSecret(const std::string& secret);

// Reads a secret file (one line; a trailing newline is dropped) and validates it. The error
// names the path. A file readable by group or others is refused: the secret is a credential.
absl::StatusOr<std::string> LoadClusterSecretFile(const std::string& path);

// `kNonceSize` random bytes from OpenSSL's CSPRNG.
std::string MakeNonce();

// The proof `role` sends for this exchange (32 bytes).
std::string ComputeProof(const std::string& secret, AuthRole role, const std::string& client_nonce,
                         const std::string& server_nonce, const std::string& client_name,
                         const std::string& server_name);

// Constant-time equality of two proofs (false if sizes differ).
bool ProofEquals(const std::string& a, const std::string& b);

// A random 64-bit non-zero session id.
uint64_t MakeSessionId();

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_AUTH_H_

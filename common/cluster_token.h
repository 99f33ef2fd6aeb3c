// Cluster tokens: short-lived proofs that a caller of a worker's gRPC service holds the cluster
// secret, without sending the secret.
//
// A token is "v1.<unix_ms>.<hex HMAC-SHA256(secret, "tandem-grpc-v1" | unix_ms | method)>", sent
// as the metadata entry kClusterAuthMetadata of every call. The worker recomputes the HMAC for the
// method it serves and accepts the token only while its timestamp is within `window` of the
// worker's clock. So a token read off the network can be replayed only against the same method
// and only for that long; the secret never travels. Comparison is constant-time.
//
// Stateless functions; thread-safe.
#ifndef TANDEM_COMMON_CLUSTER_TOKEN_H_
#define TANDEM_COMMON_CLUSTER_TOKEN_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tandem {

// gRPC metadata keys are lower case.
inline constexpr char kClusterAuthMetadata[] = "x-tandem-auth";
// How far a token's timestamp may be from the verifier's clock, either way. It bounds replay and
// must cover clock skew between hosts (keep them NTP-synchronised).
inline constexpr absl::Duration kClusterTokenWindow = absl::Seconds(60);

// HMAC-SHA256 of `message` under `key` (32 raw bytes).
std::string HmacSha256(std::string_view key, std::string_view message);

// The token for one call of `method` (gRPC's full name, "/tandem.proto.Worker/Decode") at `now`.
std::string MakeClusterToken(std::string_view secret, std::string_view method, absl::Time now);

// OK when `token` was made with `secret` for `method` within `window` of `now`. Otherwise
// Unauthenticated, the message starting "missing or wrong cluster secret" and saying what was
// wrong (no token, malformed, stale or from the future, wrong HMAC). `token` is untrusted.
absl::Status VerifyClusterToken(std::string_view secret, std::string_view method,
                                std::string_view token, absl::Time now,
                                absl::Duration window = kClusterTokenWindow);

// The cluster secret as every daemon takes it: the first line of `file` (--cluster-secret-file),
// else `value` (--cluster-secret), else the TANDEM_CLUSTER_SECRET environment variable, with
// surrounding whitespace removed, so one file serves the router and the workers. Errors name the
// source: an unreadable file, a secret shorter than 16 bytes, or none given when `required`
// (without `required`, none given is an empty string).
absl::StatusOr<std::string> ResolveClusterSecret(const std::string& file, const std::string& value,
                                                 bool required);

}  // namespace tandem

#endif  // TANDEM_COMMON_CLUSTER_TOKEN_H_

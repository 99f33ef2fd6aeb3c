// Cluster tokens: short-lived proofs that a caller of a worker's gRPC service holds the cluster
// secret, without sending the secret; and worker proofs, the other direction: a worker shows the
// router that it holds the secret before the router sends it any token or leg.
//
// A token is "v2.<unix_ms>.<hex HMAC-SHA256(secret, "tandem-grpc-v2" | unix_ms | method |
// audience)>", sent as the metadata entry kClusterAuthMetadata of every call. The audience is the
// instance id of the one worker the token is for (random per worker process, learnt from its
// proof). The worker recomputes the HMAC for the method it serves and its own instance id, and
// accepts the token only while its timestamp is within `window` of the worker's clock. So a token
// read off the network, or received by a worker, opens nothing on any other worker (nor on the
// same worker after a restart), can be replayed only against the same method of the same worker
// and only for that long; the secret never travels. Comparison is constant-time.
//
// A worker proof answers the router's fresh random nonce: hex HMAC-SHA256(secret,
// "tandem-worker-proof-v1" | nonce | target | instance_id), where target is the "host:port" the
// router dialled and instance_id the worker's. A peer without the secret cannot make one, and a
// recorded one is worthless (the nonce is new each time).
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

// The token for one call of `method` (gRPC's full name, "/tandem.proto.Worker/Decode"; on the
// session socket, the connection's challenge) at `now`, for the worker whose instance id is
// `audience`.
std::string MakeClusterToken(std::string_view secret, std::string_view method,
                             std::string_view audience, absl::Time now);

// OK when `token` was made with `secret` for `method` and `audience` (the verifying worker's own
// instance id) within `window` of `now`. Otherwise Unauthenticated, the message starting
// "missing or wrong cluster secret" and saying what was wrong (no token, malformed or of another
// version, stale or from the future, wrong HMAC: another secret, method or worker). `token` is
// untrusted.
absl::Status VerifyClusterToken(std::string_view secret, std::string_view method,
                                std::string_view audience, std::string_view token, absl::Time now,
                                absl::Duration window = kClusterTokenWindow);

// Bounds of the proof exchange's fields, checked by both sides (they arrive from the network).
inline constexpr size_t kMinProofNonceBytes = 16;
inline constexpr size_t kMaxProofFieldBytes = 256;

// The worker's answer to the router's `nonce` (see the header comment): 64 hex digits.
std::string MakeWorkerProof(std::string_view secret, std::string_view nonce,
                            std::string_view target, std::string_view instance_id);

// OK when `proof` is MakeWorkerProof(secret, nonce, target, instance_id), compared in constant
// time, and instance_id is 1..kMaxProofFieldBytes printable ASCII characters. Otherwise
// Unauthenticated "the worker did not prove the cluster secret: <why>". `proof` and
// `instance_id` are untrusted.
absl::Status VerifyWorkerProof(std::string_view secret, std::string_view nonce,
                               std::string_view target, std::string_view instance_id,
                               std::string_view proof);

// `bytes` random bytes from OpenSSL's generator as lower-case hex; "" when it fails. Nonces and
// instance ids.
std::string RandomHex(size_t bytes);

// The cluster secret as every daemon takes it: the first line of `file` (--cluster-secret-file),
// else `value` (--cluster-secret), else the TANDEM_CLUSTER_SECRET environment variable, with
// surrounding whitespace removed, so one file serves the router and the workers. Errors name the
// source: an unreadable file, a secret shorter than 16 bytes, or none given when `required`
// (without `required`, none given is an empty string).
absl::StatusOr<std::string> ResolveClusterSecret(const std::string& file, const std::string& value,
                                                 bool required);

}  // namespace tandem

#endif  // TANDEM_COMMON_CLUSTER_TOKEN_H_

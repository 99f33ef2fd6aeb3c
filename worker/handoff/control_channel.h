// Control-plane messages between a decode worker and a prefill worker (proto/kv_control.proto),
// sealed with the cluster secret.
//
// The bootstrap channel (ZMQ, the prefill worker's --disaggregation-bootstrap-port) is plain TCP:
// anyone can connect. Every message on it is HMAC-SHA256(cluster secret, domain || payload)
// followed by the serialized ControlMessage, so a peer without the secret can neither register a
// room (and so direct KV into a decode worker's blocks) nor abort one. Completion notices travel
// over the transfer engine's own authenticated connection and are sealed the same way.
#ifndef TANDEM_WORKER_HANDOFF_CONTROL_CHANNEL_H_
#define TANDEM_WORKER_HANDOFF_CONTROL_CHANNEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/kv_control.pb.h"

namespace tandem::worker {

inline constexpr size_t kControlMacBytes = 32;
inline constexpr size_t kMaxControlBytes = 1 << 20;

// Stamps the current version and seals.
std::string SealControl(const std::string& secret, proto::ControlMessage message);
// Errors, naming the problem, checked in this order: InvalidArgument for bytes too short to carry
// an authenticator or longer than kMaxControlBytes; Unauthenticated for a MAC that does not verify
// (the peer does not hold this cluster's secret); then, from a peer that does hold it,
// InvalidArgument for bytes that do not parse, an unknown version, no body.
// ControlFromMember tells the two kinds of InvalidArgument apart.
absl::StatusOr<proto::ControlMessage> OpenControl(const std::string& secret,
                                                  const std::string& bytes);

// Whether OpenControl's `result` for `bytes` shows a sender holding the cluster secret (it opened,
// or it failed only after its authenticator verified): such a sender is always answered, a
// stranger only as often as the bootstrap server's budget allows.
bool ControlFromMember(const std::string& bytes,
                       const absl::StatusOr<proto::ControlMessage>& result);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_CONTROL_CHANNEL_H_

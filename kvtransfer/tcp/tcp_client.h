// The connecting half of the tcp backend: opens a peer's lanes and authenticates each one.
//
// ConnectLanes runs the handshake of frame.h on the calling thread: for every lane a DEALER
// socket (heartbeats on, no reconnection: a lost connection means a dead peer) with a monitor
// socket reporting its disconnection. It verifies the server's proof before sending its own, so
// a server without the secret learns nothing usable. The returned sockets may then move to
// another thread (ZMQ allows it after a full memory barrier, e.g. a mutex hand-over).
#ifndef TANDEM_KVTRANSFER_TCP_TCP_CLIENT_H_
#define TANDEM_KVTRANSFER_TCP_TCP_CLIENT_H_

#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kvtransfer/descriptor.h"

namespace tandem::kv {

struct ClientOptions {
  std::string endpoint;    // the peer's tcp:// endpoint
  std::string local_name;  // our engine name
  std::string peer_name;   // the name the peer's descriptor announced
  std::string secret;
  CompatibilityRecord compat;  // ours; the peer checks it
  int heartbeat_ms = 1000;
  std::string monitor_prefix;  // unique inproc:// prefix for the monitor sockets
};

// One authenticated connection. Owns its sockets; close with CloseLane().
struct ClientLane {
  zmq::socket_t socket;   // DEALER
  zmq::socket_t monitor;  // PAIR receiving `socket`'s disconnect events
  uint64_t session = 0;   // the id the server assigned
};

// Errors: a server's kReject becomes a Status with the code it sent and its reason:
// PERMISSION_DENIED (wrong secret), FAILED_PRECONDITION (incompatible record; the reason names
// the field and both values, "local" being ours), RESOURCE_EXHAUSTED (the server has too many
// handshakes in progress: retry later), INVALID_ARGUMENT (it could not parse our hello).
// A server that fails our check of its proof is PERMISSION_DENIED; no answer is DEADLINE_EXCEEDED.
absl::StatusOr<std::vector<ClientLane>> ConnectLanes(zmq::context_t& ctx,
                                                     const ClientOptions& options, int lanes,
                                                     absl::Time deadline);
void CloseLane(ClientLane& lane);

// Sends a kControl request on an authenticated lane and waits for its kControlReply body; a
// kNack becomes the error it carries.
absl::StatusOr<std::string> ControlCall(ClientLane& lane, const std::string& body,
                                        absl::Time deadline);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TCP_TCP_CLIENT_H_

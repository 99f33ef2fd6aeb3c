// The `tcp` backend: the transfer engine over ZeroMQ (tcp:// endpoints).
//
// Per peer, `lanes` DEALER connections to the peer's ROUTER endpoint, each authenticated with the
// cluster secret (frame.h's handshake). A batch is coalesced (adjacent ops whose local and remote
// ranges are both contiguous merge), cut into slices of at most `slice_bytes`, and the slices are
// spread round-robin over the lanes. Payloads at least kZeroCopyBytes long are sent straight
// from registered memory (constant ZMQ messages, no copy; see the lifetime rule in
// transfer_engine.h); runs of smaller slices of one batch are packed into kWriteMulti frames of
// up to 1 MiB (one copy, far fewer messages: a KV block is often a few KiB). The receiver checks
// each write against its RegionTable and copies it into the region, then acknowledges the last
// slice of the batch on each lane; the batch is kCompleted when every lane it used acknowledged. A
// notification waits until every earlier batch to that peer is settled (acknowledged, rejected or
// flushed) and then goes out on lane 0.
//
// Failure: a lane's disconnect (peer killed, heartbeat timeout after 3 heartbeat intervals) marks
// the peer dead and fails its running batches at once; deadlines are enforced by the I/O thread.
// A dead peer is not reconnected: the owner imports its descriptor again.
//
// Threads: one I/O thread owns every socket after Start(); public methods are thread-safe and
// hand work to it through a queue. ImportPeer runs the handshake on the caller's thread, then
// hands the connected sockets over.
#ifndef TANDEM_KVTRANSFER_TCP_TCP_ENGINE_H_
#define TANDEM_KVTRANSFER_TCP_TCP_ENGINE_H_

#include "absl/status/statusor.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

// Payloads shorter than this are copied into the ZMQ message (cheaper than a zero-copy message).
inline constexpr uint64_t kZeroCopyBytes = 16 * 1024;

absl::StatusOr<TransferEnginePtr> CreateTcpEngine(EngineOptions options);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TCP_TCP_ENGINE_H_

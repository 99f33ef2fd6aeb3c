// The `rdma` backend: one-sided RDMA WRITE over RC queue pairs (libibverbs, or fake verbs in
// tests), with the tcp backend's authenticated ZMQ connection as its control channel.
//
// Start(): query the port, allocate a protection domain, register every region as a memory
// region (its address and rkey go into the descriptor), create one completion queue, bind the
// control endpoint. ImportPeer(): authenticate over the control channel (frame.h handshake),
// then a kControl request carries our `lanes` queue-pair addresses (QPN, PSN, LID, GID, MTU);
// the peer creates as many queue pairs, connects them to ours and answers with theirs; we
// connect ours. Submit(): slices (at most the port's max message size) are spread over the
// queue pairs; each queue pair's share is posted as one chain of RDMA WRITEs whose last is
// signaled. An RC completion means the bytes were placed in the peer's memory, so a batch is
// kCompleted when every chain it posted completed. Notify(): once every earlier batch to the
// peer settled, a SEND on queue pair 0 (ordered after all writes on it) carries the message into
// a receive buffer the peer posted; its kCompleted means the message was placed there (the
// peer's polling thread then hands it to its handler, after the data). A completion with an error
// status (remote access error on a bad rkey or bounds, retry exceeded on a dead peer, flush) fails
// its batch and marks the peer dead. A polling thread drains the completion queue and enforces
// deadlines.
//
// Region bounds are enforced by the peer's adapter (the memory registration). Restricted regions
// (windows) are not offered by this backend: the receiver's CPU does not see one-sided writes,
// so a window would need a memory window bound per peer; RegisterRegion refuses them.
// Thread-safe.
#ifndef TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_H_
#define TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_H_

#include "absl/status/statusor.h"
#include "kvtransfer/rdma/verbs.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

absl::StatusOr<TransferEnginePtr> CreateRdmaEngine(EngineOptions options, rdma::VerbsPtr verbs);

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_RDMA_RDMA_ENGINE_H_

// GrpcServer: a gRPC server serving the Worker service (proto/worker.proto) on top of a
// WorkerCore, with the callback API so that thousands of decode streams need no thread each.
//
// Sessions (rpc Session, what the router uses): prefill and decode legs multiplexed on one
// stream, replies batched per write (worker/session_server.h). Decode streams (rpc Decode): the
// leg's events are queued as the engine produces them and written one at a time; the last event
// ends the RPC with OK. A client that cancels (or whose stream or session breaks) aborts the leg
// in the engine. Every path ends the RPC exactly once. Prefill legs go to the WorkerCore's
// PrefillLegs (prefill workers); elsewhere they fail with FAILED_PRECONDITION. A prefill leg the
// router cancels aborts its room. Shutdown ends open sessions first (on the session socket
// too), cancelling their legs.
//
// Access: with a non-empty `cluster_secret`, every call must carry a valid cluster token
// (common/cluster_token.h) naming this process's random instance id in its metadata; a call
// without one, with a wrong or stale one, or one made for another worker, ends UNAUTHENTICATED
// ("missing or wrong cluster secret: ...") before the WorkerCore sees it. The router learns the
// instance id from the ClusterProof service (proto/cluster_proof.proto) served on the same port,
// the one call without a token. With an empty secret (only colocated workers may run without
// one) every Worker call is served and Prove is refused.
//
// Memory before authentication: gRPC reads a unary or server-streaming call's request whole
// before any handler (and so the token check) runs, so what a caller without the secret can make
// the worker hold is bounded by limits, not by the check: a message above
// MaxWorkerMessageBytes(context length) is refused (RESOURCE_EXHAUSTED), at most
// kMaxConcurrentStreams calls are open per connection, and all of gRPC's buffers together live
// in a kGrpcMemoryQuotaBytes resource quota. The Session stream's token is checked when the
// stream opens, before any of its messages is read. The price of the quota: while a flood fills
// it, gRPC reclaims memory by resetting streams and closing connections with GOAWAY, which can
// also end a call on an idle authenticated connection (UNAVAILABLE; the channel reconnects). The
// session socket (worker/session_socket.h) is not affected.
//
// Thread-safe. The WorkerCore is borrowed and must outlive the server. This header keeps gRPC's
// headers out of its users (they are heavy to compile).
#ifndef TANDEM_WORKER_GRPC_SERVER_H_
#define TANDEM_WORKER_GRPC_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/worker_core.h"

namespace tandem::worker {

// Calls open at once on one connection (the router multiplexes legs on one Session stream; tools
// open a handful).
inline constexpr int kMaxConcurrentStreams = 64;
// The ceiling on the memory gRPC's buffers may take on the server, all connections together.
inline constexpr int64_t kGrpcMemoryQuotaBytes = int64_t{32} << 20;

// The largest message the worker takes on gRPC for a model of `context_length` tokens: a
// SessionUp batches calls up to 1 MiB (router/workers/worker_session.h) or carries one larger
// call alone, whose prompt is at most `context_length` token ids of at most 5 bytes each (a
// varint), plus 4 MiB for the rest of a call (rid, sampling parameters, stop strings).
size_t MaxWorkerMessageBytes(int64_t context_length);

class GrpcServer {
 public:
  // Listens on host:port (port 0: ephemeral). A port already in use (even by another process
  // with SO_REUSEPORT) is UNAVAILABLE with a message naming `port_flag` and the address.
  // With `session_port` >= 0 (0: ephemeral) it also serves the session socket there
  // (worker/session_socket.h), with the same secret, and Health advertises its port; a port in
  // use names --session-port.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const std::string& host, int port,
                                                           WorkerCore* core,
                                                           const std::string& port_flag,
                                                           const std::string& cluster_secret,
                                                           int session_port = -1);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const;
  // Stops accepting; RPCs still open after `grace_seconds` are cancelled. Blocks until every RPC
  // has ended. Idempotent.
  void Shutdown(double grace_seconds);

 private:
  struct Impl;
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_GRPC_SERVER_H_

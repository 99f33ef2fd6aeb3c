// rpc Session (proto/worker.proto) over gRPC: each call is one RouterLink (worker/session_server.h)
// carried by a gRPC callback reactor. This is the only place the worker's link meets gRPC types:
// the link speaks absl::Status, converted to a grpc::Status once, when the call finishes.
//
//   grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(...) override {
//     if (!authorized) return RefuseGrpcLink(status);
//     return ServeGrpcLink(&links_, &legs_);
//   }
//
// Thread-safety: both functions are thread-safe. The reactors delete themselves when gRPC is done
// with them (OnDone).
#ifndef TANDEM_WORKER_GRPC_LINK_H_
#define TANDEM_WORKER_GRPC_LINK_H_

#include <grpcpp/grpcpp.h>

#include "proto/worker.pb.h"
#include "worker/session_server.h"

namespace tandem::worker {

// A reactor for a new Session call, registered with `server`; `server` and `legs` must outlive it.
grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* ServeGrpcLink(LinkServer* server,
                                                                             LegHandler* legs);

// A reactor that ends a Session call at once with `status` (refused before anything ran).
grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* RefuseGrpcLink(grpc::Status status);

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_GRPC_LINK_H_

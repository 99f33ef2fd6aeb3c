// The worker's side of the proof exchange (proto/cluster_proof.proto, common/cluster_token.h):
// it answers the router's nonce with an HMAC of the cluster secret, bound to the address the
// router dialled and to this process's instance id, which every cluster token sent to this
// worker must then name.
//
//   auto proof = std::make_unique<ClusterProofService>(secret, instance_id);
//   builder.RegisterService(proof.get());
//   ... BuildAndStart ...
//   proof->SetGrpcPort(bound_port);   // before the port is announced: Prove fails until then
//
// A worker without a secret answers FAILED_PRECONDITION: it has nothing to prove, and a router
// that holds a secret must not trust it.
//
// Thread-safe. The service object must outlive the gRPC server it is registered with.
#ifndef TANDEM_WORKER_CLUSTER_PROOF_SERVICE_H_
#define TANDEM_WORKER_CLUSTER_PROOF_SERVICE_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "proto/cluster_proof.grpc.pb.h"
#include "proto/cluster_proof.pb.h"

namespace tandem::worker {

// The answer to `request` for a worker listening for gRPC on `grpc_port`. InvalidArgument for a
// nonce shorter than kMinProofNonceBytes or a field longer than kMaxProofFieldBytes;
// FailedPrecondition without a secret, or when the target's port is not `grpc_port` (a relay:
// the router dialled some other address, which forwarded the call here). Pure; thread-safe.
absl::StatusOr<proto::ProveResponse> AnswerProof(const std::string& secret,
                                                 const std::string& instance_id, int grpc_port,
                                                 const proto::ProveRequest& request);

class ClusterProofService final : public proto::ClusterProof::CallbackService {
 public:
  ClusterProofService(std::string cluster_secret, std::string instance_id);

  // The port this worker's gRPC server listens on (known once it is bound).
  void SetGrpcPort(int port) { grpc_port_.store(port, std::memory_order_release); }

  grpc::ServerUnaryReactor* Prove(grpc::CallbackServerContext* context,
                                  const proto::ProveRequest* request,
                                  proto::ProveResponse* response) override;

 private:
  const std::string cluster_secret_;
  const std::string instance_id_;
  std::atomic<int> grpc_port_{0};
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_CLUSTER_PROOF_SERVICE_H_

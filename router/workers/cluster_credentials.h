// Client side of the workers' access control: gRPC channels whose every call carries a fresh
// cluster token (common/cluster_token.h) for its own method and for the one worker the channel
// talks to, added by a client interceptor so that no call site can forget it (health checks, load
// polls and legs alike); and the proof exchange that tells the router which worker that is.
//
//   auto audience = std::make_shared<ClusterAudience>();
//   auto channel = CreateWorkerChannel("10.0.0.7:30001", secret, audience, args);
//   ASSIGN_OR_RETURN(std::string id, ProveWorker(*channel, "10.0.0.7:30001", secret, deadline));
//   audience->Set(id);                              // from now on every call is authenticated
//
// Until the audience is set (the worker proved it holds the secret) calls carry no token at
// all: a peer that cannot prove the secret never sees one it could replay. Prove itself never
// carries a token. An empty secret gives a plain channel: a worker that demands the secret then
// answers each call UNAUTHENTICATED "missing or wrong cluster secret: ...".
//
// Thread-safe; the secret is copied, the audience shared with whoever updates it.
#ifndef TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_
#define TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/cluster_proof.pb.h"

namespace tandem::router {

// The instance id of the worker a channel's tokens are for; "" until it proved the secret.
// Thread-safe.
class ClusterAudience {
 public:
  std::string Get() const;
  void Set(std::string instance_id);
  // The worker refused a token for this id (it restarted, or its secret changed): no more tokens
  // until it proves itself again.
  void Clear();

 private:
  mutable absl::Mutex mu_;
  std::string instance_id_ ABSL_GUARDED_BY(mu_);
};

// The full name of the one call that carries no token.
inline constexpr char kProveMethod[] = "/tandem.proto.ClusterProof/Prove";

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& target,
                                                   const std::string& cluster_secret,
                                                   std::shared_ptr<const ClusterAudience> audience,
                                                   const grpc::ChannelArguments& args = {});

// A Prove request for `target` (the "host:port" dialled) with a fresh nonce; empty nonce when
// the random generator failed.
proto::ProveRequest NewProveRequest(const std::string& target);

// Checks a worker's answer to `request`: its instance id when the proof is right, otherwise
// Unauthenticated "the worker did not prove the cluster secret: ...". `response` is untrusted.
absl::StatusOr<std::string> CheckProveResponse(const std::string& cluster_secret,
                                               const proto::ProveRequest& request,
                                               const proto::ProveResponse& response);

// The whole exchange, blocking until `deadline` (tools and tests; the router's registry uses
// WorkerClient::Prove). A worker that does not answer, or answers with an error (a stranger
// without the ClusterProof service answers UNIMPLEMENTED), is Unauthenticated naming its status.
absl::StatusOr<std::string> ProveWorker(grpc::Channel& channel, const std::string& target,
                                        const std::string& cluster_secret, absl::Time deadline);

// CreateWorkerChannel and ProveWorker together: a channel whose calls are authenticated for the
// worker at `target` (a plain channel when `cluster_secret` is empty). Tools and tests.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectProvenWorker(
    const std::string& target, const std::string& cluster_secret, absl::Time deadline,
    const grpc::ChannelArguments& args = {});

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_

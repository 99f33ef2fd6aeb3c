#include "worker/cluster_proof_service.h"

#include <charconv>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cluster_token.h"
#include "worker/conversions.h"

namespace tandem::worker {
namespace {

// The port of "host:port" / "[v6]:port"; -1 when there is none.
int TargetPort(std::string_view target) {
  const size_t colon = target.rfind(':');
  if (colon == std::string_view::npos ||
      (target.find(']') != std::string_view::npos && colon < target.find(']'))) {
    return -1;
  }
  const std::string_view text = target.substr(colon + 1);
  int port = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return -1;
  return port;
}

}  // namespace

absl::StatusOr<proto::ProveResponse> AnswerProof(const std::string& secret,
                                                 const std::string& instance_id, int grpc_port,
                                                 const proto::ProveRequest& request) {
  if (secret.empty()) {
    return absl::FailedPreconditionError(
        "this worker has no cluster secret, so it cannot prove one (start it with "
        "--cluster-secret-file)");
  }
  if (request.nonce().size() < kMinProofNonceBytes ||
      request.nonce().size() > kMaxProofFieldBytes ||
      request.target().size() > kMaxProofFieldBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a proof request needs a nonce of ", kMinProofNonceBytes, "..",
                     kMaxProofFieldBytes, " bytes and a target of at most ", kMaxProofFieldBytes));
  }
  // Answering for another port would let a stranger on this host relay the router's nonce here
  // and pass for a member.
  const int port = TargetPort(request.target());
  if (grpc_port <= 0 || port != grpc_port) {
    return absl::FailedPreconditionError(
        absl::StrCat("the router dialled '", request.target(), "' but this worker's gRPC port is ",
                     grpc_port, " (a relayed proof request is refused)"));
  }
  proto::ProveResponse response;
  response.set_instance_id(instance_id);
  response.set_proof(MakeWorkerProof(secret, request.nonce(), request.target(), instance_id));
  return response;
}

ClusterProofService::ClusterProofService(std::string cluster_secret, std::string instance_id)
    : cluster_secret_(std::move(cluster_secret)), instance_id_(std::move(instance_id)) {}

grpc::ServerUnaryReactor* ClusterProofService::Prove(grpc::CallbackServerContext* context,
                                                     const proto::ProveRequest* request,
                                                     proto::ProveResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<proto::ProveResponse> answer = AnswerProof(
      cluster_secret_, instance_id_, grpc_port_.load(std::memory_order_acquire), *request);
  if (!answer.ok()) {
    reactor->Finish(ToGrpcStatus(answer.status()));
    return reactor;
  }
  *response = *std::move(answer);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace tandem::worker

#include "router/workers/cluster_credentials.h"

#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "proto/cluster_proof.grpc.pb.h"

namespace tandem::router {
namespace {

// Adds the token to the call's initial metadata; one interceptor per call.
class ClusterTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  ClusterTokenInterceptor(const std::string* secret, const ClusterAudience* audience,
                          std::string method)
      : secret_(secret), audience_(audience), method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA) &&
        method_ != kProveMethod) {
      const std::string audience = audience_->Get();
      if (!audience.empty()) {
        methods->GetSendInitialMetadata()->emplace(
            kClusterAuthMetadata, MakeClusterToken(*secret_, method_, audience, absl::Now()));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string* secret_;        // owned by the factory, which the channel keeps
  const ClusterAudience* audience_;  // likewise
  const std::string method_;
};

class ClusterTokenFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  ClusterTokenFactory(std::string secret, std::shared_ptr<const ClusterAudience> audience)
      : secret_(std::move(secret)), audience_(std::move(audience)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClusterTokenInterceptor(&secret_, audience_.get(),
                                       info->method() == nullptr ? "" : info->method());
  }

 private:
  const std::string secret_;
  const std::shared_ptr<const ClusterAudience> audience_;
};

}  // namespace

std::string ClusterAudience::Get() const {
  absl::MutexLock lock(&mu_);
  return instance_id_;
}

void ClusterAudience::Set(std::string instance_id) {
  absl::MutexLock lock(&mu_);
  instance_id_ = std::move(instance_id);
}

void ClusterAudience::Clear() { Set(std::string()); }

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& target,
                                                   const std::string& cluster_secret,
                                                   std::shared_ptr<const ClusterAudience> audience,
                                                   const grpc::ChannelArguments& args) {
  if (cluster_secret.empty() || audience == nullptr) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<ClusterTokenFactory>(cluster_secret, std::move(audience)));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

proto::ProveRequest NewProveRequest(const std::string& target) {
  proto::ProveRequest request;
  request.set_nonce(RandomHex(32));
  request.set_target(target);
  return request;
}

absl::StatusOr<std::string> CheckProveResponse(const std::string& cluster_secret,
                                               const proto::ProveRequest& request,
                                               const proto::ProveResponse& response) {
  if (request.nonce().empty()) {
    return absl::InternalError("the router could not draw a random nonce for the proof");
  }
  absl::Status status = VerifyWorkerProof(cluster_secret, request.nonce(), request.target(),
                                          response.instance_id(), response.proof());
  if (!status.ok()) return status;
  return response.instance_id();
}

absl::StatusOr<std::string> ProveWorker(grpc::Channel& channel, const std::string& target,
                                        const std::string& cluster_secret, absl::Time deadline) {
  // The stub wants a shared channel; this one is borrowed for the call only.
  std::shared_ptr<grpc::Channel> borrowed(&channel, [](grpc::Channel*) {});
  auto stub = proto::ClusterProof::NewStub(borrowed);
  const proto::ProveRequest request = NewProveRequest(target);
  proto::ProveResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  const grpc::Status status = stub->Prove(&context, request, &response);
  if (!status.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("the worker did not prove the cluster secret: grpc code ",
                     static_cast<int>(status.error_code()), ": ", status.error_message()));
  }
  return CheckProveResponse(cluster_secret, request, response);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> ConnectProvenWorker(
    const std::string& target, const std::string& cluster_secret, absl::Time deadline,
    const grpc::ChannelArguments& args) {
  auto audience = std::make_shared<ClusterAudience>();
  auto channel = CreateWorkerChannel(target, cluster_secret, audience, args);
  if (cluster_secret.empty()) return channel;
  absl::StatusOr<std::string> id = ProveWorker(*channel, target, cluster_secret, deadline);
  if (!id.ok()) return id.status();
  audience->Set(*std::move(id));
  return channel;
}

}  // namespace tandem::router

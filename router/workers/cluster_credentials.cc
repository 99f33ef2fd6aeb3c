#include "router/workers/cluster_credentials.h"

#include <grpcpp/support/client_interceptor.h>

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/cluster_token.h"

namespace tandem::router {
namespace {

// Adds the token to the call's initial metadata; one interceptor per call.
class ClusterTokenInterceptor : public grpc::experimental::Interceptor {
 public:
  ClusterTokenInterceptor(const std::string* secret, std::string method)
      : secret_(secret), method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(kClusterAuthMetadata,
                                                 MakeClusterToken(*secret_, method_, absl::Now()));
    }
    methods->Proceed();
  }

 private:
  const std::string* secret_;  // owned by the factory, which the channel keeps
  const std::string method_;
};

class ClusterTokenFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClusterTokenFactory(std::string secret) : secret_(std::move(secret)) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new ClusterTokenInterceptor(&secret_, info->method() == nullptr ? "" : info->method());
  }

 private:
  const std::string secret_;
};

}  // namespace

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& target,
                                                   const std::string& cluster_secret,
                                                   const grpc::ChannelArguments& args) {
  if (cluster_secret.empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<ClusterTokenFactory>(cluster_secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

}  // namespace tandem::router

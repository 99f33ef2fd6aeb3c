// Client side of the workers' access control: gRPC channels whose every call carries a fresh
// cluster token (common/cluster_token.h) for its own method, added by a client interceptor so
// that no call site can forget it (health checks, load polls and legs alike).
//
//   auto channel = CreateWorkerChannel("10.0.0.7:30001", secret, args);
//   auto stub = proto::Worker::NewStub(channel);   // every call is authenticated
//
// An empty secret gives a plain channel: a worker that demands the secret then answers each call
// UNAUTHENTICATED "missing or wrong cluster secret: ...". Thread-safe; the secret is copied.
#ifndef TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_
#define TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace tandem::router {

std::shared_ptr<grpc::Channel> CreateWorkerChannel(const std::string& target,
                                                   const std::string& cluster_secret,
                                                   const grpc::ChannelArguments& args = {});

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_CLUSTER_CREDENTIALS_H_

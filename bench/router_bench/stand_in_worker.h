// StandInWorker: an in-process gRPC server implementing proto::Worker as a colocated worker that
// answers at once, so a benchmark measures the router, not a model. A decode leg (on a Session,
// as the router sends it, or the Decode RPC) returns one event with `tokens` fixed token ids,
// finished with reason LENGTH; sessions are served by the workers' own session code
// (worker/session_server.h), so their batching is measured too. Health says SERVING; GetLoad
// reports an idle worker (and the session socket's port); GetServerInfo a COLOCATED worker of
// `model_path`; Abort finds nothing; FlushCache flushes. Prefill is not served (UNIMPLEMENTED:
// plain mode never calls it). The server runs with GRPC_ARG_MINIMAL_STACK (no server-side deadline
// or message-size filters). Thread-safe (gRPC's callback threads); owns its server, stopped on
// destruction.
#ifndef TANDEM_BENCH_ROUTER_BENCH_STAND_IN_WORKER_H_
#define TANDEM_BENCH_ROUTER_BENCH_STAND_IN_WORKER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "worker/session_server.h"
#include "worker/session_socket.h"

namespace tandem::bench {

class StandInWorker : public proto::Worker::CallbackService, public worker::LegHandler {
 public:
  // Listens on 127.0.0.1 at an ephemeral port, and with `session_socket` serves the session
  // socket (worker/session_socket.h) at another, which Health advertises as a worker does.
  static absl::StatusOr<std::unique_ptr<StandInWorker>> Start(int tokens,
                                                              const std::string& model_path,
                                                              bool session_socket = true);
  ~StandInWorker() override;
  StandInWorker(const StandInWorker&) = delete;
  StandInWorker& operator=(const StandInWorker&) = delete;

  int port() const { return port_; }

  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(
      grpc::CallbackServerContext* context) override;
  grpc::ServerWriteReactor<proto::DecodeEvent>* Decode(
      grpc::CallbackServerContext* context, const proto::DecodeRequest* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const proto::AbortRequest* request,
                                  proto::AbortResponse* response) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* request,
                                   proto::HealthResponse* response) override;
  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context,
                                    const proto::LoadRequest* request,
                                    proto::LoadReport* response) override;
  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* context,
                                       const proto::FlushCacheRequest* request,
                                       proto::FlushCacheResponse* response) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const proto::ServerInfoRequest* request,
                                          proto::ServerInfo* response) override;

  // worker::LegHandler: decode legs end at once; prefill legs are not served.
  absl::StatusOr<std::function<void()>> StartDecode(
      const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) override;
  void StartPrefill(const proto::PrefillRequest& request,
                    std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) override;
  void CancelPrefill(uint64_t room) override;

 private:
  StandInWorker(int tokens, std::string model_path)
      : tokens_(tokens), model_path_(std::move(model_path)) {}

  const int tokens_;
  const std::string model_path_;
  int port_ = 0;
  worker::LinkServer sessions_;
  std::unique_ptr<worker::LinkSocketServer> sockets_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_ROUTER_BENCH_STAND_IN_WORKER_H_

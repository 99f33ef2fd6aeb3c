#include "bench/router_bench/stand_in_worker.h"

#include "absl/strings/str_cat.h"
#include "worker/grpc_link.h"

namespace tandem::bench {
namespace {

constexpr int kBlockSize = 16;
constexpr int kTotalBlocks = 4096;

// The one event a decode leg answers with.
proto::DecodeEvent Answer(const proto::DecodeRequest& request, int tokens) {
  proto::DecodeEvent event;
  const int n = request.sampling_params().has_max_new_tokens()
                    ? std::max(1, std::min(tokens, request.sampling_params().max_new_tokens()))
                    : tokens;
  for (int i = 0; i < n; ++i) {
    event.add_token_ids(200 + i);
    if (request.return_logprob()) event.add_token_logprobs(-0.5f);
  }
  event.set_finished(true);
  event.mutable_finish_reason()->set_type(proto::FinishReason::LENGTH);
  event.mutable_finish_reason()->set_length(n);
  event.set_prompt_tokens(request.input_ids_size());
  event.set_completion_tokens(n);
  return event;
}

// Writes one finished event and ends the call; deletes itself when gRPC is done with it.
class DecodeReactor : public grpc::ServerWriteReactor<proto::DecodeEvent> {
 public:
  DecodeReactor(const proto::DecodeRequest& request, int tokens) : event_(Answer(request, tokens)) {
    StartWriteAndFinish(&event_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  proto::DecodeEvent event_;
};

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* context) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StandInWorker>> StandInWorker::Start(int tokens,
                                                                    const std::string& model_path,
                                                                    bool session_socket) {
  std::unique_ptr<StandInWorker> w(new StandInWorker(tokens, model_path));
  if (session_socket) {
    absl::StatusOr<std::unique_ptr<worker::LinkSocketServer>> sockets =
        worker::LinkSocketServer::Start("127.0.0.1", 0, w.get(), "", "", "session socket: ");
    if (!sockets.ok()) return sockets.status();
    w->sockets_ = *std::move(sockets);
  }
  grpc::ServerBuilder builder;
  // As cheap a gRPC server as can be written, like the HTTP backends nginx is measured with: no
  // deadline, message-size or census filters (GRPC_ARG_MINIMAL_STACK), callback API, one
  // write-and-finish per call.
  builder.AddChannelArgument(GRPC_ARG_MINIMAL_STACK, 1);
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &w->port_);
  builder.RegisterService(w.get());
  w->server_ = builder.BuildAndStart();
  if (w->server_ == nullptr || w->port_ == 0) {
    return absl::UnavailableError("could not start a gRPC server on 127.0.0.1");
  }
  return w;
}

StandInWorker::~StandInWorker() {
  if (sockets_ != nullptr) sockets_->CloseAll();
  sessions_.CloseAll();
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* StandInWorker::Session(
    grpc::CallbackServerContext* /*context*/) {
  return worker::ServeGrpcLink(&sessions_, this);
}

absl::StatusOr<std::function<void()>> StandInWorker::StartDecode(
    const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) {
  sink(Answer(request, tokens_));
  return [] {};
}

void StandInWorker::StartPrefill(const proto::PrefillRequest& /*request*/,
                                 std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) {
  done(absl::UnimplementedError("the router_bench stand-in serves plain mode only"));
}

void StandInWorker::CancelPrefill(uint64_t /*room*/) {}

grpc::ServerWriteReactor<proto::DecodeEvent>* StandInWorker::Decode(
    grpc::CallbackServerContext* /*context*/, const proto::DecodeRequest* request) {
  return new DecodeReactor(*request, tokens_);
}

grpc::ServerUnaryReactor* StandInWorker::Abort(grpc::CallbackServerContext* context,
                                               const proto::AbortRequest* /*request*/,
                                               proto::AbortResponse* response) {
  response->set_found(false);
  return Done(context);
}

grpc::ServerUnaryReactor* StandInWorker::Health(grpc::CallbackServerContext* context,
                                                const proto::HealthRequest* /*request*/,
                                                proto::HealthResponse* response) {
  response->set_status(proto::HealthResponse::SERVING);
  if (sockets_ != nullptr) response->set_session_port(sockets_->port());
  return Done(context);
}

grpc::ServerUnaryReactor* StandInWorker::GetLoad(grpc::CallbackServerContext* context,
                                                 const proto::LoadRequest* /*request*/,
                                                 proto::LoadReport* response) {
  response->set_free_kv_blocks(kTotalBlocks);
  response->set_total_kv_blocks(kTotalBlocks);
  response->set_kv_block_size(kBlockSize);
  return Done(context);
}

grpc::ServerUnaryReactor* StandInWorker::FlushCache(grpc::CallbackServerContext* context,
                                                    const proto::FlushCacheRequest* /*request*/,
                                                    proto::FlushCacheResponse* response) {
  response->set_flushed(true);
  return Done(context);
}

grpc::ServerUnaryReactor* StandInWorker::GetServerInfo(grpc::CallbackServerContext* context,
                                                       const proto::ServerInfoRequest* /*request*/,
                                                       proto::ServerInfo* response) {
  response->set_role(proto::ServerInfo::COLOCATED);
  response->set_model_path(model_path_);
  response->set_context_length(512);
  response->set_max_running_requests(1024);
  response->set_kv_block_size(kBlockSize);
  response->set_total_kv_blocks(kTotalBlocks);
  response->set_transfer_backend("tcp");
  response->set_version("router_bench stand-in");
  return Done(context);
}

}  // namespace tandem::bench

#include "worker/grpc_server.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker.grpc.pb.h"
#include "worker/conversions.h"

namespace tandem::worker {
namespace {

// One Decode stream. Deletes itself once gRPC is done with it (OnDone) and the leg has delivered
// its last event (or never started), whichever comes second: the engine may still deliver the
// leg's abort event after a cancelled RPC has ended.
class DecodeReactor : public grpc::ServerWriteReactor<proto::DecodeEvent> {
 public:
  DecodeReactor(WorkerCore* core, const proto::DecodeRequest& request) : core_(core) {
    absl::StatusOr<LegId> leg = core_->StartDecode(
        request, [this](proto::DecodeEvent event) { OnEvent(std::move(event)); });
    if (!leg.ok()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        finish_called_ = true;
      }
      Finish(ToGrpcStatus(leg.status()));
      Unref();  // no leg: no event will come
      return;
    }
    bool cancel = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      leg_ = *leg;
      started_ = true;
      cancel = cancelled_;
    }
    if (cancel) core_->CancelDecode(*leg);
  }

  void OnCancel() override {
    bool finish = false;
    bool started = false;
    LegId leg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      started = started_;
      leg = leg_;
      // With a write in flight, OnWriteDone (which fails now) finishes instead.
      if (!writing_ && !finish_called_) finish = finish_called_ = true;
    }
    if (started) core_->CancelDecode(leg);
    if (finish) Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled"));
  }

  void OnWriteDone(bool ok) override {
    const proto::DecodeEvent* next = nullptr;
    bool finish = false;
    grpc::Status status = grpc::Status::OK;
    bool cancel_leg = false;
    LegId leg;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool was_last = queue_.front().finished();
      queue_.pop_front();
      if (!ok || cancelled_) {
        writing_ = false;
        cancel_leg = !was_last && started_;
        leg = leg_;
        if (!finish_called_) {
          finish = finish_called_ = true;
          status = grpc::Status(grpc::StatusCode::CANCELLED, "the stream to the client broke");
        }
      } else if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (was_last && !finish_called_) finish = finish_called_ = true;
      }
    }
    if (cancel_leg) core_->CancelDecode(leg);
    if (next != nullptr) StartWrite(next);
    if (finish) Finish(status);
  }

  void OnDone() override { Unref(); }

 private:
  // Engine loop thread.
  void OnEvent(proto::DecodeEvent event) {
    const bool last = event.finished();
    const proto::DecodeEvent* write = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!finish_called_) {
        // std::deque keeps references to its elements valid across push_back.
        queue_.push_back(std::move(event));
        if (!writing_) {
          writing_ = true;
          write = &queue_.back();
        }
      }
    }
    if (write != nullptr) StartWrite(write);
    if (last) Unref();
  }

  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  WorkerCore* core_;
  std::atomic<int> refs_{2};  // gRPC's OnDone + the leg's last event
  std::mutex mu_;
  std::deque<proto::DecodeEvent> queue_;  // guarded by mu_; front() is being written
  bool writing_ = false;                  // guarded by mu_
  bool finish_called_ = false;            // guarded by mu_
  bool cancelled_ = false;                // guarded by mu_
  bool started_ = false;                  // guarded by mu_; leg_ is valid
  LegId leg_;                             // guarded by mu_
};

// One Prefill leg. A client that cancels (the router gave up on the pair, or its client went
// away) aborts the room at once, so the KV push stops and both sides free the room's blocks
// instead of finishing a handoff nobody will decode. Deletes itself when gRPC is done with it
// and the leg has answered, whichever comes second.
class PrefillReactor : public grpc::ServerUnaryReactor {
 public:
  PrefillReactor(WorkerCore* core, const proto::PrefillRequest& request,
                 proto::PrefillResponse* response)
      : core_(core), room_(request.bootstrap_room()) {
    core_->StartPrefill(request, [this, response](absl::StatusOr<proto::PrefillResponse> result) {
      if (result.ok()) {
        *response = *std::move(result);
        Finish(grpc::Status::OK);
      } else {
        Finish(ToGrpcStatus(result.status()));
      }
      Unref();
    });
  }

  void OnCancel() override {
    proto::AbortRequest abort;
    abort.set_bootstrap_room(room_);
    abort.set_reason("the router cancelled the prefill leg");
    core_->Abort(abort);
  }

  void OnDone() override { Unref(); }

 private:
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  WorkerCore* core_;
  const uint64_t room_;
  std::atomic<int> refs_{2};  // gRPC's OnDone + the leg's answer
};

class WorkerService final : public proto::Worker::CallbackService {
 public:
  explicit WorkerService(WorkerCore* core) : core_(core) {}

  grpc::ServerWriteReactor<proto::DecodeEvent>* Decode(
      grpc::CallbackServerContext* /*context*/, const proto::DecodeRequest* request) override {
    return new DecodeReactor(core_, *request);
  }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* /*context*/,
                                    const proto::PrefillRequest* request,
                                    proto::PrefillResponse* response) override {
    return new PrefillReactor(core_, *request, response);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const proto::AbortRequest* request,
                                  proto::AbortResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (request->target_case() == proto::AbortRequest::TARGET_NOT_SET) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "an abort names a rid or a bootstrap_room"));
      return reactor;
    }
    *response = core_->Abort(*request);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* context,
                                   const proto::HealthRequest* request,
                                   proto::HealthResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    core_->Health(*request, [reactor, response](proto::HealthResponse h) {
      *response = std::move(h);
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context,
                                    const proto::LoadRequest* /*request*/,
                                    proto::LoadReport* response) override {
    *response = core_->GetLoad();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* context,
                                       const proto::FlushCacheRequest* /*request*/,
                                       proto::FlushCacheResponse* response) override {
    *response = core_->FlushCache();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const proto::ServerInfoRequest* /*request*/,
                                          proto::ServerInfo* response) override {
    *response = core_->GetServerInfo();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  WorkerCore* core_;
};

}  // namespace

struct GrpcServer::Impl {
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;  // guarded by shutdown_mu
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& host, int port,
                                                              WorkerCore* core,
                                                              const std::string& port_flag) {
  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<WorkerService>(core);
  const std::string address = host.find(':') != std::string::npos
                                  ? absl::StrCat("[", host, "]:", port)
                                  : absl::StrCat(host, ":", port);
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which would let a second worker share the port silently.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // The router pings every 10 s while a leg is open, also when no data flows (a decode leg
  // queued for KV, a prefill leg waiting for its room). gRPC's default server policy (pings at
  // most every 5 min without data, 2 strikes) would answer that with GOAWAY and kill the legs.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterService(impl->service.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    if (impl->server != nullptr) impl->server->Shutdown();
    return absl::UnavailableError(absl::StrCat(port_flag, "cannot listen for gRPC on ", address,
                                               ": the port is in use or the address is not "
                                               "available"));
  }
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Shutdown(0); }

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::Shutdown(double grace_seconds) {
  std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(grace_seconds)));
  impl_->server->Wait();
}

}  // namespace tandem::worker

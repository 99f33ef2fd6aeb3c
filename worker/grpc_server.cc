#include "worker/grpc_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/cluster_token.h"
#include "common/log_every.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"
#include "proto/worker.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "worker/cluster_proof_service.h"
#include "worker/conversions.h"
#include "worker/grpc_link.h"
#include "worker/session_server.h"
#include "worker/session_socket.h"

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

// Answers a Decode call that was refused before it started (no leg, no event).
class RefusedDecodeReactor : public grpc::ServerWriteReactor<proto::DecodeEvent> {
 public:
  explicit RefusedDecodeReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// The full gRPC method names the tokens are bound to (proto/worker.proto, package tandem.proto).
constexpr char kDecodeMethod[] = "/tandem.proto.Worker/Decode";
constexpr char kPrefillMethod[] = "/tandem.proto.Worker/Prefill";
constexpr char kSessionMethod[] = "/tandem.proto.Worker/Session";
constexpr char kAbortMethod[] = "/tandem.proto.Worker/Abort";
constexpr char kHealthMethod[] = "/tandem.proto.Worker/Health";
constexpr char kGetLoadMethod[] = "/tandem.proto.Worker/GetLoad";
constexpr char kFlushCacheMethod[] = "/tandem.proto.Worker/FlushCache";
constexpr char kGetServerInfoMethod[] = "/tandem.proto.Worker/GetServerInfo";
constexpr char kGetKvEventsMethod[] = "/tandem.proto.Worker/GetKvEvents";

// A session's legs run on the WorkerCore, as the Prefill and Decode RPCs' do.
class CoreLegs : public LegHandler {
 public:
  explicit CoreLegs(WorkerCore* core) : core_(core) {}

  absl::StatusOr<std::function<void()>> StartDecode(
      const proto::DecodeRequest& request, std::function<void(proto::DecodeEvent)> sink) override {
    absl::StatusOr<LegId> leg = core_->StartDecode(request, std::move(sink));
    if (!leg.ok()) return leg.status();
    WorkerCore* core = core_;
    return [core, leg = *std::move(leg)] { core->CancelDecode(leg); };
  }

  void StartPrefill(const proto::PrefillRequest& request,
                    std::function<void(absl::StatusOr<proto::PrefillResponse>)> done) override {
    core_->StartPrefill(request, std::move(done));
  }

  void CancelPrefill(uint64_t room) override {
    proto::AbortRequest abort;
    abort.set_bootstrap_room(room);
    abort.set_reason("the router cancelled the prefill leg");
    core_->Abort(abort);
  }

 private:
  WorkerCore* core_;
};

class WorkerService final : public proto::Worker::CallbackService {
 public:
  WorkerService(WorkerCore* core, std::string cluster_secret, std::string instance_id)
      : core_(core),
        legs_(core),
        cluster_secret_(std::move(cluster_secret)),
        instance_id_(std::move(instance_id)) {}

  // Ends the open sessions (their legs are cancelled): grpc::Server::Shutdown would otherwise
  // wait its whole grace period for these long-lived calls.
  void CloseSessions() {
    if (sockets_) sockets_->CloseAll();
    sessions_.CloseAll();
  }
  LegHandler* legs() { return &legs_; }
  // The session socket Health advertises (none: 0).
  void SetSessionSockets(std::unique_ptr<LinkSocketServer> sockets) {
    sockets_ = std::move(sockets);
  }

  // Every method checks the caller's token first and runs nothing else when it is refused.
  // Per handler rather than gRPC's AuthMetadataProcessor: gRPC 1.51 aborts when one is set on
  // insecure server credentials, and a server interceptor cannot finish a call with a status.
  grpc::Status Authenticate(const grpc::CallbackServerContext* context, const char* method) const {
    if (cluster_secret_.empty()) return grpc::Status::OK;
    const auto& metadata = context->client_metadata();
    const auto it = metadata.find(kClusterAuthMetadata);
    std::string_view token;
    if (it != metadata.end()) token = std::string_view(it->second.data(), it->second.size());
    const absl::Status status =
        VerifyClusterToken(cluster_secret_, method, instance_id_, token, absl::Now());
    if (status.ok()) return grpc::Status::OK;
    // At most one line a second: a stranger hammering the port must not fill the disk.
    if (refusal_logs_.Allow()) {
      spdlog::warn("gRPC {} from {} refused: {}", method, context->peer(),
                   std::string(status.message()));
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(status.message()));
  }

  // A unary call refused with `status`.
  static grpc::ServerUnaryReactor* Refuse(grpc::CallbackServerContext* context,
                                          grpc::Status status) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(std::move(status));
    return reactor;
  }

  grpc::ServerWriteReactor<proto::DecodeEvent>* Decode(
      grpc::CallbackServerContext* context, const proto::DecodeRequest* request) override {
    if (grpc::Status auth = Authenticate(context, kDecodeMethod); !auth.ok()) {
      return new RefusedDecodeReactor(std::move(auth));
    }
    return new DecodeReactor(core_, *request);
  }

  grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* Session(
      grpc::CallbackServerContext* context) override {
    if (grpc::Status auth = Authenticate(context, kSessionMethod); !auth.ok()) {
      return RefuseGrpcLink(std::move(auth));
    }
    return ServeGrpcLink(&sessions_, &legs_);
  }

  grpc::ServerUnaryReactor* Prefill(grpc::CallbackServerContext* context,
                                    const proto::PrefillRequest* request,
                                    proto::PrefillResponse* response) override {
    if (grpc::Status auth = Authenticate(context, kPrefillMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    return new PrefillReactor(core_, *request, response);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const proto::AbortRequest* request,
                                  proto::AbortResponse* response) override {
    if (grpc::Status auth = Authenticate(context, kAbortMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
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
    if (grpc::Status auth = Authenticate(context, kHealthMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const int session_port = sockets_ ? sockets_->port() : 0;
    core_->Health(*request, [reactor, response, session_port](proto::HealthResponse h) {
      *response = std::move(h);
      response->set_session_port(session_port);
      reactor->Finish(grpc::Status::OK);
    });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* context,
                                    const proto::LoadRequest* /*request*/,
                                    proto::LoadReport* response) override {
    if (grpc::Status auth = Authenticate(context, kGetLoadMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    *response = core_->GetLoad();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* FlushCache(grpc::CallbackServerContext* context,
                                       const proto::FlushCacheRequest* /*request*/,
                                       proto::FlushCacheResponse* response) override {
    if (grpc::Status auth = Authenticate(context, kFlushCacheMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    *response = core_->FlushCache();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetKvEvents(grpc::CallbackServerContext* context,
                                        const proto::KvEventsRequest* request,
                                        proto::KvEventsReply* response) override {
    if (grpc::Status auth = Authenticate(context, kGetKvEventsMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    absl::StatusOr<proto::KvEventsReply> reply = core_->GetKvEvents(*request);
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (!reply.ok()) {
      reactor->Finish(ToGrpcStatus(reply.status()));
      return reactor;
    }
    *response = std::move(*reply);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const proto::ServerInfoRequest* /*request*/,
                                          proto::ServerInfo* response) override {
    if (grpc::Status auth = Authenticate(context, kGetServerInfoMethod); !auth.ok()) {
      return Refuse(context, std::move(auth));
    }
    *response = core_->GetServerInfo();
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  WorkerCore* core_;
  CoreLegs legs_;
  LinkServer sessions_;
  std::unique_ptr<LinkSocketServer> sockets_;  // set before the gRPC server starts
  const std::string cluster_secret_;           // empty: calls are not authenticated
  const std::string instance_id_;              // every token must name it (its audience)
  mutable LogEvery refusal_logs_{absl::Seconds(1)};
};

}  // namespace

size_t MaxWorkerMessageBytes(int64_t context_length) {
  constexpr size_t kBatchBytes = size_t{1} << 20;
  constexpr size_t kRestOfCallBytes = size_t{4} << 20;
  const size_t prompt_bytes = static_cast<size_t>(std::max<int64_t>(context_length, 0)) * 5;
  return std::max(kBatchBytes, prompt_bytes) + kRestOfCallBytes;
}

struct GrpcServer::Impl {
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<ClusterProofService> proof;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::mutex shutdown_mu;
  bool shut_down = false;  // guarded by shutdown_mu
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const std::string& host, int port,
                                                              WorkerCore* core,
                                                              const std::string& port_flag,
                                                              const std::string& cluster_secret,
                                                              int session_port) {
  auto impl = std::make_unique<Impl>();
  // New for each process, so tokens made for an earlier run of this worker (or for any other
  // worker) are refused here.
  const std::string instance_id = RandomHex(16);
  if (instance_id.empty()) {
    return absl::InternalError("cannot draw a random instance id for the worker");
  }
  impl->service = std::make_unique<WorkerService>(core, cluster_secret, instance_id);
  impl->proof = std::make_unique<ClusterProofService>(cluster_secret, instance_id);
  if (session_port >= 0) {
    ASSIGN_OR_RETURN(auto sockets,
                     LinkSocketServer::Start(host, session_port, impl->service->legs(),
                                             cluster_secret, instance_id, "--session-port: "));
    impl->service->SetSessionSockets(std::move(sockets));
  }
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
  // A unary call's request is read whole before its handler checks the token, so these limits,
  // not the check, bound what a stranger can make the worker buffer: one message at most what a
  // real leg of this model needs (not gRPC's 4 MiB default nor the 64 MiB the socket takes after
  // authentication), a bounded number of calls per connection, and one quota for all buffers.
  const size_t max_message = MaxWorkerMessageBytes(core->GetServerInfo().context_length());
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams);
  grpc::ResourceQuota quota("tandem-worker-grpc");
  quota.Resize(static_cast<size_t>(kGrpcMemoryQuotaBytes));
  builder.SetResourceQuota(quota);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl->port);
  builder.RegisterService(impl->service.get());
  builder.RegisterService(impl->proof.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    if (impl->server != nullptr) impl->server->Shutdown();
    return absl::UnavailableError(absl::StrCat(port_flag, "cannot listen for gRPC on ", address,
                                               ": the port is in use or the address is not "
                                               "available"));
  }
  impl->proof->SetGrpcPort(impl->port);
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GrpcServer::~GrpcServer() { Shutdown(0); }

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::Shutdown(double grace_seconds) {
  std::lock_guard<std::mutex> lock(impl_->shutdown_mu);
  if (impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->service->CloseSessions();
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(grace_seconds)));
  impl_->server->Wait();
}

}  // namespace tandem::worker

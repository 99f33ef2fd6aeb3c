#include "router/workers/worker_client.h"

#include <atomic>
#include <charconv>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "router/workers/cluster_credentials.h"
#include "router/workers/worker_session.h"
#include "spdlog/spdlog.h"

namespace tandem::router {
namespace {

// After a session socket failed to connect, sessions go over gRPC for this long.
constexpr absl::Duration kSocketRetry = absl::Seconds(30);
constexpr absl::Duration kRelearnDeadline = absl::Seconds(5);
// A dead peer fails its calls within keepalive time + timeout (while calls are active).
constexpr int kKeepaliveTimeMs = 10000;
constexpr int kKeepaliveTimeoutMs = 5000;
// Prompts and logprob-heavy events can be large; the worker's own limits apply first.
constexpr int kMaxMessageBytes = 256 << 20;

void SetDeadline(grpc::ClientContext* ctx, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return;
  ctx->set_deadline(absl::ToChronoTime(deadline));
}

grpc::Status Cancelled() { return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"); }

// A unary call's status for a call never sent.
grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// One unary call: owns its context, request and response until `done` has run. Shared by the
// handle and the gRPC callback, so Cancel() stays valid after completion.
//
// What the call holds once `done` has run (its ClientContext keeps a reference to the channel,
// and `done` may keep the WorkerClient) is let go on the session timer thread, never on the gRPC
// thread that ran the callback: if that were the channel's last reference, ~Channel would release
// gRPC's shared callback completion queue from one of that queue's own threads, and when no
// other channel held it the queue was shut down and deleted under the thread still reading it
// (an abort in grpc_cq_internal_unref, seen when a client was dropped right after its last call).
template <typename Req, typename Resp>
class UnaryCall : public CallHandle, public std::enable_shared_from_this<UnaryCall<Req, Resp>> {
 public:
  using Done = std::function<void(grpc::Status, Resp)>;
  UnaryCall(Req request, Done done) : request_(std::move(request)), done_(std::move(done)) {}

  void Cancel() override {
    cancelled_.store(true, std::memory_order_release);
    ctx_.TryCancel();
  }

  template <typename StartFn>
  std::shared_ptr<CallHandle> Start(absl::Time deadline, StartFn start) {
    SetDeadline(&ctx_, deadline);
    auto self = this->shared_from_this();
    start(&ctx_, &request_, &response_, [self](grpc::Status status) mutable {
      if (self->cancelled_.load(std::memory_order_acquire)) status = Cancelled();
      Done done = std::move(self->done_);
      self->done_ = nullptr;
      done(std::move(status), std::move(self->response_));
      LegTimers().RunAt(absl::InfinitePast(), [self = std::move(self), done = std::move(done)] {});
    });
    return self;
  }

 private:
  grpc::ClientContext ctx_;
  Req request_;
  Resp response_;
  Done done_;
  std::atomic<bool> cancelled_{false};
};

// The handle of a call that was never sent.
class NoCall : public CallHandle {
 public:
  void Cancel() override {}
};

// Fails a call that must not reach the worker; `done` runs on the timer thread, never inside
// the caller's own frame (callers may hold locks their callbacks take).
template <typename Resp>
std::shared_ptr<CallHandle> FailSoon(std::function<void(grpc::Status, Resp)> done,
                                     grpc::Status status) {
  LegTimers().RunAt(absl::InfinitePast(),
                    [done = std::move(done), status = std::move(status)] { done(status, Resp()); });
  return std::make_shared<NoCall>();
}

absl::Status BadUrl(const std::string& url, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("bad worker url \"", url, "\": ", why));
}

}  // namespace

absl::StatusOr<WorkerAddress> ParseWorkerUrl(const std::string& url) {
  std::string_view rest = url;
  for (std::string_view scheme : {"http://", "grpc://"}) {
    if (rest.substr(0, scheme.size()) == scheme) {
      rest.remove_prefix(scheme.size());
      break;
    }
  }
  if (rest.find("://") != std::string_view::npos) {
    return BadUrl(url, "the scheme must be http:// or grpc://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find('/') != std::string_view::npos) return BadUrl(url, "a worker url has no path");
  WorkerAddress address;
  std::string_view port_text;
  if (!rest.empty() && rest.front() == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return BadUrl(url, "unterminated '[' of an IPv6 host");
    address.host = std::string(rest.substr(1, close - 1));
    if (address.host.empty() || address.host.find(':') == std::string::npos) {
      return BadUrl(url, "the bracketed host must be an IPv6 address");
    }
    rest.remove_prefix(close + 1);
    if (rest.empty() || rest.front() != ':') return BadUrl(url, "missing ':port'");
    port_text = rest.substr(1);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return BadUrl(url, "missing ':port'");
    address.host = std::string(rest.substr(0, colon));
    if (address.host.find(':') != std::string::npos) {
      return BadUrl(url, "an IPv6 host must be in brackets, e.g. [::1]:30001");
    }
    port_text = rest.substr(colon + 1);
  }
  if (address.host.empty()) return BadUrl(url, "empty host");
  for (char c : address.host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':' || c == '%';
    if (!ok)
      return BadUrl(url, absl::StrCat("invalid character '", std::string(1, c), "' in host"));
  }
  int port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    return BadUrl(url, absl::StrCat("port \"", std::string(port_text), "\" is not in 1..65535"));
  }
  address.port = port;
  address.target = address.host.find(':') != std::string::npos
                       ? absl::StrCat("[", address.host, "]:", port)
                       : absl::StrCat(address.host, ":", port);
  return address;
}

absl::StatusOr<std::shared_ptr<WorkerClient>> WorkerClient::Create(
    const std::string& url, const std::string& cluster_secret) {
  absl::StatusOr<WorkerAddress> address = ParseWorkerUrl(url);
  if (!address.ok()) return address.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
  // Ping only while calls are active: an idle channel needs no pings (the health loop covers it)
  // and workers' default ping policy would answer idle pings with GOAWAY.
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a worker restarts on the same port.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  // Per-call filters the router does not need (a measurable share of its CPU per request):
  // gRPC's own retries (the dispatcher retries with a new pair and a new room; a call gRPC
  // would have retried transparently fails UNAVAILABLE and is retried there), and the idle
  // filter (the health loop keeps the channel busy anyway). Deadline checks and message-size
  // limits stay, which is why GRPC_ARG_MINIMAL_STACK is not used: it drops both.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  args.SetInt(GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS, std::numeric_limits<int>::max());
  auto audience = std::make_shared<ClusterAudience>();
  auto channel = CreateWorkerChannel(address->target, cluster_secret, audience, args);
  return std::shared_ptr<WorkerClient>(new WorkerClient(
      url, *std::move(address), std::move(channel), cluster_secret, std::move(audience)));
}

WorkerClient::WorkerClient(std::string url, WorkerAddress address,
                           std::shared_ptr<grpc::Channel> channel, std::string cluster_secret,
                           std::shared_ptr<ClusterAudience> audience)
    : url_(std::move(url)),
      address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(proto::Worker::NewStub(channel_)),
      proof_stub_(proto::ClusterProof::NewStub(channel_)),
      cluster_secret_(std::move(cluster_secret)),
      audience_(std::move(audience)),
      verified_(cluster_secret_.empty()) {}

bool WorkerClient::verified() const { return verified_.load(std::memory_order_acquire); }

absl::Status WorkerClient::Unverified() const {
  return absl::UnavailableError(
      absl::StrCat("worker ", url_, " is unverified: it did not prove the cluster secret"));
}

void WorkerClient::SetAudience(std::string instance_id) {
  std::shared_ptr<WorkerLink> retired;
  {
    absl::MutexLock lock(&link_mu_);
    if (audience_->Get() == instance_id) return;
    audience_->Set(instance_id);
    verified_.store(cluster_secret_.empty() || !instance_id.empty(), std::memory_order_release);
    // A session socket's token was made for the previous instance (or none).
    retired = std::move(link_);
  }
  if (retired != nullptr) retired->Retire();
}

void WorkerClient::ForgetProof() {
  if (!cluster_secret_.empty()) SetAudience(std::string());
}

std::shared_ptr<CallHandle> WorkerClient::Prove(absl::Time deadline,
                                                std::function<void(absl::Status)> done) {
  if (cluster_secret_.empty()) {
    LegTimers().RunAt(absl::InfinitePast(), [done = std::move(done)] { done(absl::OkStatus()); });
    return std::make_shared<NoCall>();
  }
  proto::ProveRequest request = NewProveRequest(address_.target);
  std::weak_ptr<WorkerClient> weak = weak_from_this();
  auto check = [weak, request, secret = cluster_secret_, done = std::move(done)](
                   grpc::Status status, proto::ProveResponse response) {
    absl::Status result;
    std::string instance_id;
    if (!status.ok()) {
      // A transport failure keeps its code (the worker may not be up yet); any other refusal,
      // UNIMPLEMENTED from a stranger included, is a failed proof.
      const bool transport = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                             status.error_code() == grpc::StatusCode::CANCELLED;
      result = absl::Status(
          transport ? static_cast<absl::StatusCode>(status.error_code())
                    : absl::StatusCode::kUnauthenticated,
          absl::StrCat("the worker did not prove the cluster secret: grpc code ",
                       static_cast<int>(status.error_code()), ": ", status.error_message()));
    } else if (absl::StatusOr<std::string> id = CheckProveResponse(secret, request, response);
               id.ok()) {
      instance_id = *std::move(id);
    } else {
      result = id.status();
    }
    // On the timer thread: were this the client's last reference, its channel must not be
    // destroyed on a gRPC thread (see UnaryCall). The audience is set before `done` runs.
    LegTimers().RunAt(absl::InfinitePast(), [weak, result, instance_id, done] {
      if (result.ok()) {
        if (auto client = weak.lock()) client->SetAudience(instance_id);
      }
      done(result);
    });
  };
  auto call = std::make_shared<UnaryCall<proto::ProveRequest, proto::ProveResponse>>(
      std::move(request), std::move(check));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    proof_stub_->async()->Prove(ctx, req, resp, std::move(cb));
  });
}

std::function<absl::Status(absl::Status)> WorkerClient::LegStatusFilter() {
  if (cluster_secret_.empty()) return [](absl::Status status) { return status; };
  // Holds no reference to the client: a leg may end after the client was dropped, and the
  // client must not be destroyed on the thread that delivers it (see UnaryCall).
  return [weak = weak_from_this(), url = url_](absl::Status status) {
    if (status.code() != absl::StatusCode::kUnauthenticated) return status;
    // A proven worker refused our token: it restarted (a new instance id) or changed its
    // secret. Stop trusting it at once and report UNAVAILABLE, which the dispatcher retries
    // elsewhere and reports to the registry, whose next probe is then a new proof. Posted: this
    // runs inside the session's delivery, and ForgetProof retires the session.
    LegTimers().Post([weak] {
      if (auto client = weak.lock()) client->ForgetProof();
    });
    return absl::UnavailableError(absl::StrCat("worker ", url,
                                               " refused this router's cluster token (it "
                                               "restarted, or its secret changed): ",
                                               status.message()));
  };
}

LegPtr WorkerClient::StartPrefill(proto::PrefillRequest request, Deadline deadline,
                                  PrefillDoneFn done) {
  std::shared_ptr<LegStream> call =
      NewPrefillLegStream([filter = LegStatusFilter(), done = std::move(done)](
                              absl::Status status, proto::PrefillResponse response) {
        done(filter(std::move(status)), std::move(response));
      });
  proto::SessionCall message;
  *message.mutable_prefill() = std::move(request);
  SendLeg(call, &message, deadline);
  return call;
}

LegPtr WorkerClient::StartDecode(proto::DecodeRequest request, Deadline deadline,
                                 LegEventFn on_event, LegDoneFn done) {
  std::shared_ptr<LegStream> call = NewDecodeLegStream(
      std::move(on_event), [filter = LegStatusFilter(), done = std::move(done)](
                               absl::Status status) { done(filter(std::move(status))); });
  proto::SessionCall message;
  *message.mutable_decode() = std::move(request);
  SendLeg(call, &message, deadline);
  return call;
}

void WorkerClient::SendLeg(const std::shared_ptr<LegStream>& call, proto::SessionCall* message,
                           Deadline deadline) {
  if (!verified()) {
    // The registry never routes to an unverified worker; this keeps prompts from one anyway.
    LegStream::FailLater(call, Unverified());
    return;
  }
  const size_t bytes = message->ByteSizeLong();  // once: it walks the whole prompt
  if (bytes > kMaxSessionCallBytes) {
    LegStream::FailLater(
        call, absl::ResourceExhaustedError(
                  absl::StrCat("a leg of ", bytes, " bytes exceeds the worker's message limit of ",
                               kMaxSessionCallBytes, " bytes")));
    return;
  }
  for (;;) {
    std::shared_ptr<WorkerLink> session;
    {
      absl::MutexLock lock(&link_mu_);
      if (link_ == nullptr || link_->closing()) link_ = OpenLinkLocked();
      session = link_;
    }
    if (session->Send(call, message, bytes, deadline)) return;
  }
}

std::shared_ptr<WorkerLink> WorkerClient::OpenLinkLocked() {
  if (session_port_ == 0 || absl::Now() < socket_retry_after_) {
    return OpenGrpcLink(channel_, stub_.get(), url_);
  }
  // The failure callback may outlive this client (the connection runs on its own thread).
  std::weak_ptr<WorkerClient> weak = weak_from_this();
  return OpenSocketLink(address_.host, session_port_, url_, cluster_secret_, audience_->Get(),
                        [weak](const absl::Status& status) {
                          auto client = weak.lock();
                          if (client == nullptr) return;
                          spdlog::warn("{}; its legs go over gRPC for up to {} s",
                                       std::string(status.message()),
                                       absl::ToInt64Seconds(kSocketRetry));
                          {
                            absl::MutexLock lock(&client->link_mu_);
                            client->socket_retry_after_ = absl::Now() + kSocketRetry;
                          }
                          // A worker restarted on the same gRPC port listens on a new ephemeral
                          // session port: ask now rather than at the next health check, so its
                          // legs are back on the socket at once.
                          client->Health(false, absl::Now() + kRelearnDeadline,
                                         [](grpc::Status, proto::HealthResponse) {});
                        });
}

int WorkerClient::session_port() {
  absl::MutexLock lock(&link_mu_);
  return session_port_;
}

void WorkerClient::LearnSessionPort(int port) {
  if (port < 0 || port > 65535) return;
  absl::MutexLock lock(&link_mu_);
  if (port == session_port_) return;
  session_port_ = port;
  socket_retry_after_ = absl::InfinitePast();
  if (link_ != nullptr) {
    link_->Retire();
    link_ = nullptr;
  }
}

WorkerClient::~WorkerClient() {
  absl::MutexLock lock(&link_mu_);
  if (link_ != nullptr) link_->Retire();
}

void WorkerClient::AbortLegs(proto::AbortRequest request, Deadline deadline) {
  Abort(std::move(request), absl::Now() + absl::FromChrono(deadline.remaining()),
        [](grpc::Status, proto::AbortResponse) {});
}

std::shared_ptr<CallHandle> WorkerClient::Abort(
    proto::AbortRequest request, absl::Time deadline,
    std::function<void(grpc::Status, proto::AbortResponse)> done) {
  if (!verified()) return FailSoon(std::move(done), ToGrpc(Unverified()));
  auto call = std::make_shared<UnaryCall<proto::AbortRequest, proto::AbortResponse>>(
      std::move(request), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->Abort(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::Health(
    bool generate, absl::Time deadline,
    std::function<void(grpc::Status, proto::HealthResponse)> done) {
  if (!verified()) return FailSoon(std::move(done), ToGrpc(Unverified()));
  proto::HealthRequest request;
  request.set_generate(generate);
  std::weak_ptr<WorkerClient> weak = weak_from_this();
  auto learn = [weak, done = std::move(done)](grpc::Status status, proto::HealthResponse r) {
    if (status.ok()) {
      // On the timer thread: were this the client's last reference, its channel must not be
      // destroyed on a gRPC thread (see UnaryCall).
      LegTimers().RunAt(absl::InfinitePast(), [weak, port = r.session_port()] {
        if (auto client = weak.lock()) client->LearnSessionPort(port);
      });
    }
    done(std::move(status), std::move(r));
  };
  auto call = std::make_shared<UnaryCall<proto::HealthRequest, proto::HealthResponse>>(
      std::move(request), std::move(learn));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->Health(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::GetLoad(
    absl::Time deadline, std::function<void(grpc::Status, proto::LoadReport)> done) {
  if (!verified()) return FailSoon(std::move(done), ToGrpc(Unverified()));
  auto call = std::make_shared<UnaryCall<proto::LoadRequest, proto::LoadReport>>(
      proto::LoadRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->GetLoad(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::FlushCache(
    absl::Time deadline, std::function<void(grpc::Status, proto::FlushCacheResponse)> done) {
  if (!verified()) return FailSoon(std::move(done), ToGrpc(Unverified()));
  auto call = std::make_shared<UnaryCall<proto::FlushCacheRequest, proto::FlushCacheResponse>>(
      proto::FlushCacheRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->FlushCache(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::GetServerInfo(
    absl::Time deadline, std::function<void(grpc::Status, proto::ServerInfo)> done) {
  if (!verified()) return FailSoon(std::move(done), ToGrpc(Unverified()));
  auto call = std::make_shared<UnaryCall<proto::ServerInfoRequest, proto::ServerInfo>>(
      proto::ServerInfoRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->GetServerInfo(ctx, req, resp, std::move(cb));
  });
}

}  // namespace tandem::router

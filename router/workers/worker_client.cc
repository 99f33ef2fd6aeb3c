#include "router/workers/worker_client.h"

#include <atomic>
#include <charconv>
#include <deque>
#include <limits>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/timer_queue.h"
#include "router/workers/cluster_credentials.h"

namespace tandem::router {
namespace {

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

// One unary call: owns its context, request and response until `done` has run. Shared by the
// handle and the gRPC callback, so Cancel() stays valid after completion.
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
    start(&ctx_, &request_, &response_, [self](grpc::Status status) {
      if (self->cancelled_.load(std::memory_order_acquire)) status = Cancelled();
      Done done = std::move(self->done_);
      self->done_ = nullptr;
      done(std::move(status), std::move(self->response_));
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

// The process's timer thread for session calls: their deadlines, and their cancellations (a
// cancelled call's `done` runs there, never inside the caller's Cancel()). Never destroyed, so
// that no exit-time destructor races a gRPC thread still completing a call.
TimerQueue& CallTimers() {
  static TimerQueue* timers = new TimerQueue();
  return *timers;
}

// A session message holds several calls; this caps one (a single larger call goes alone).
constexpr size_t kBatchBytes = 1 << 20;
// The worker's limit for one session message (worker/grpc_server.cc), less framing slack.
constexpr size_t kMaxCallBytes = (64 << 20) - 1024;

grpc::Status FromCallError(const proto::CallError& error) {
  const int code = error.code();
  if (code <= 0 || code > grpc::StatusCode::UNAUTHENTICATED) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("the worker ended a leg with an invalid status code ", code,
                                     ": ", error.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), error.message());
}

}  // namespace

class WorkerSession;

// A prefill or decode leg on a Session. Replies and the final status reach the caller under
// `mu_`, so no event can overtake or follow `done`.
class SessionCall : public CallHandle {
 public:
  void Cancel() override;

  // The reader thread: one reply for this call. Ends the call when the reply does.
  void OnReply(const proto::SessionReply& reply) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    if (Deliver(reply)) EndLocked();
  }
  // Ends the call with `status` unless it has ended. Any thread.
  void Fail(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    Finish(status);
    EndLocked();
  }
  // Whether `reply` is the call's last.
  static bool Ends(const proto::SessionReply& reply) {
    return !reply.has_event() || reply.event().finished();
  }

  void Attach(std::weak_ptr<WorkerSession> session, uint64_t id) {
    session_ = std::move(session);
    id_ = id;
  }
  void SetTimer(TimerQueue::Id timer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) {
      CallTimers().Cancel(timer);
    } else {
      timer_ = timer;
    }
  }

 protected:
  // Under mu_: passes `reply` on; true when it ended the call (after calling `done`).
  virtual bool Deliver(const proto::SessionReply& reply) = 0;
  // Under mu_: calls `done` with `status`.
  virtual void Finish(const grpc::Status& status) = 0;

 private:
  void EndLocked() {
    ended_ = true;
    if (timer_ != 0) CallTimers().Cancel(timer_);
  }

  std::mutex mu_;
  bool ended_ = false;                    // guarded by mu_
  TimerQueue::Id timer_ = 0;              // guarded by mu_: the deadline
  std::weak_ptr<WorkerSession> session_;  // set once before the call is sent
  uint64_t id_ = 0;
};

class DecodeSessionCall : public SessionCall {
 public:
  DecodeSessionCall(std::function<void(const proto::DecodeEvent&)> on_event,
                    std::function<void(grpc::Status)> done)
      : on_event_(std::move(on_event)), done_(std::move(done)) {}

 protected:
  bool Deliver(const proto::SessionReply& reply) override {
    switch (reply.body_case()) {
      case proto::SessionReply::kEvent:
        on_event_(reply.event());
        if (!reply.event().finished()) return false;
        Finish(grpc::Status::OK);
        return true;
      case proto::SessionReply::kError:
        Finish(FromCallError(reply.error()));
        return true;
      default:
        Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                            "the worker answered a decode leg with something else"));
        return true;
    }
  }
  void Finish(const grpc::Status& status) override {
    auto done = std::move(done_);
    done_ = nullptr;
    on_event_ = nullptr;
    done(status);
  }

 private:
  std::function<void(const proto::DecodeEvent&)> on_event_;
  std::function<void(grpc::Status)> done_;
};

class PrefillSessionCall : public SessionCall {
 public:
  explicit PrefillSessionCall(std::function<void(grpc::Status, proto::PrefillResponse)> done)
      : done_(std::move(done)) {}

 protected:
  bool Deliver(const proto::SessionReply& reply) override {
    switch (reply.body_case()) {
      case proto::SessionReply::kPrefill: {
        auto done = std::move(done_);
        done_ = nullptr;
        done(grpc::Status::OK, reply.prefill());
        return true;
      }
      case proto::SessionReply::kError:
        Finish(FromCallError(reply.error()));
        return true;
      default:
        Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                            "the worker answered a prefill leg with something else"));
        return true;
    }
  }
  void Finish(const grpc::Status& status) override {
    auto done = std::move(done_);
    done_ = nullptr;
    done(status, proto::PrefillResponse());
  }

 private:
  std::function<void(grpc::Status, proto::PrefillResponse)> done_;
};

// One Session stream to a worker, carrying the legs of many requests. Calls are written in
// batches: what is sent while a write is in flight goes out with the next one. Owns itself while
// the stream runs (`self_`, dropped last in OnDone); the WorkerClient holds the current one.
class WorkerSession : public grpc::ClientBidiReactor<proto::SessionUp, proto::SessionDown>,
                      public std::enable_shared_from_this<WorkerSession> {
 public:
  WorkerSession(std::shared_ptr<grpc::Channel> channel, std::string url)
      : channel_(std::move(channel)), url_(std::move(url)) {}

  static std::shared_ptr<WorkerSession> Open(std::shared_ptr<grpc::Channel> channel,
                                             proto::Worker::Stub* stub, const std::string& url) {
    auto session = std::make_shared<WorkerSession>(std::move(channel), url);
    session->self_ = session;
    stub->async()->Session(&session->ctx_, session.get());
    // Writes start from any thread at any time: the hold keeps the reactor from completing
    // until the stream has ended (OnReadDone(false) removes it).
    session->AddHold();
    session->StartRead(&session->down_);
    session->StartCall();
    return session;
  }

  // False when the session no longer takes calls (the caller opens another); `message` is then
  // untouched. Otherwise `call` is live and `message` sent (moved from).
  bool Send(const std::shared_ptr<SessionCall>& call, proto::SessionCall* message,
            absl::Time deadline) {
    const size_t bytes = message->ByteSizeLong();
    uint64_t id;
    bool write;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_) return false;
      id = next_id_++;
      call->Attach(weak_from_this(), id);
      calls_.emplace(id, call);
      message->set_call_id(id);
      pending_.emplace_back(bytes, std::move(*message));
      write = TakeBatchLocked();
    }
    if (write) StartWrite(&in_flight_);
    if (deadline != absl::InfiniteFuture()) {
      std::weak_ptr<WorkerSession> weak = weak_from_this();
      call->SetTimer(CallTimers().RunAt(deadline, [weak, id] {
        if (auto s = weak.lock()) {
          s->Cancel(id, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
                    /*post=*/false);
        }
      }));
    }
    return true;
  }

  // Ends call `id` with `status` (nothing if it has ended) and tells the worker to abort the
  // leg. With `post` the call's `done` runs on the timer thread, else here.
  void Cancel(uint64_t id, grpc::Status status, bool post) {
    std::shared_ptr<SessionCall> call;
    bool write = false;
    bool close = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = calls_.find(id);
      if (it == calls_.end()) return;
      call = std::move(it->second);
      calls_.erase(it);
      if (!broken_) {
        proto::SessionCall cancel;
        cancel.set_call_id(id);
        cancel.set_cancel(true);
        pending_.emplace_back(cancel.ByteSizeLong(), std::move(cancel));
        write = TakeBatchLocked();
      }
      close = retired_ && calls_.empty();
    }
    if (write) StartWrite(&in_flight_);
    if (close) ctx_.TryCancel();
    if (post) {
      CallTimers().RunAt(absl::InfinitePast(), [call, status] { call->Fail(status); });
    } else {
      call->Fail(status);
    }
  }

  // The WorkerClient let go: the session ends once its last call has.
  void Retire() {
    bool close;
    {
      std::lock_guard<std::mutex> lock(mu_);
      retired_ = closing_ = true;
      close = calls_.empty();
    }
    if (close) ctx_.TryCancel();
  }

  bool closing() {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_;
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_flight_.Clear();
      writing_ = false;
      if (!ok) {
        broken_ = closing_ = true;  // the read fails too, and OnDone fails the calls
      } else {
        write = TakeBatchLocked();
      }
    }
    if (write) StartWrite(&in_flight_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        broken_ = closing_ = true;
      }
      RemoveHold();
      return;
    }
    bool close = false;
    for (const proto::SessionReply& reply : down_.replies()) {
      std::shared_ptr<SessionCall> call;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = calls_.find(reply.call_id());
        if (it == calls_.end()) continue;  // cancelled or timed out meanwhile
        call = it->second;
        if (SessionCall::Ends(reply)) {
          calls_.erase(it);
          close = retired_ && calls_.empty();
        }
      }
      call->OnReply(reply);
    }
    down_.Clear();
    if (close) ctx_.TryCancel();
    StartRead(&down_);
  }

  void OnDone(const grpc::Status& status) override {
    std::unordered_map<uint64_t, std::shared_ptr<SessionCall>> calls;
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = broken_ = true;
      calls.swap(calls_);
    }
    const grpc::Status failure =
        !status.ok() ? status
                     : grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    absl::StrCat("worker ", url_, " ended the session"));
    for (auto& [id, call] : calls) call->Fail(failure);
    calls.clear();
    // The session may hold the last reference to the channel (its WorkerClient is gone), and
    // gRPC 1.51 must not destroy a channel on one of its callback threads (the callback queue's
    // thread pool would join itself and be freed while running). Let go on the timer thread.
    CallTimers().RunAt(absl::InfinitePast(), [self = std::move(self_)] {});
  }

 private:
  // Under mu_: when no write is in flight, moves the next batch of pending calls into
  // in_flight_; true when the caller must StartWrite it.
  bool TakeBatchLocked() {
    if (writing_ || broken_ || pending_.empty()) return false;
    size_t bytes = 0;
    while (!pending_.empty() &&
           (in_flight_.calls_size() == 0 || bytes + pending_.front().first <= kBatchBytes)) {
      bytes += pending_.front().first;
      *in_flight_.add_calls() = std::move(pending_.front().second);
      pending_.pop_front();
    }
    writing_ = true;
    return true;
  }

  const std::shared_ptr<grpc::Channel> channel_;  // outlives the call
  const std::string url_;
  grpc::ClientContext ctx_;
  proto::SessionDown down_;     // the read in flight
  proto::SessionUp in_flight_;  // the write in flight (while writing_)
  std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<SessionCall>> calls_;  // guarded by mu_
  std::deque<std::pair<size_t, proto::SessionCall>> pending_;         // guarded by mu_: bytes, call
  uint64_t next_id_ = 1;                                              // guarded by mu_
  bool writing_ = false;                                              // guarded by mu_
  bool closing_ = false;  // guarded by mu_: takes no new calls
  bool broken_ = false;   // guarded by mu_: the stream cannot carry writes any more
  bool retired_ = false;  // guarded by mu_: the WorkerClient let go
  std::shared_ptr<WorkerSession> self_;
};

void SessionCall::Cancel() {
  if (auto session = session_.lock()) session->Cancel(id_, Cancelled(), /*post=*/true);
}

namespace {

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
  auto channel = CreateWorkerChannel(address->target, cluster_secret, args);
  return std::shared_ptr<WorkerClient>(
      new WorkerClient(url, *std::move(address), std::move(channel)));
}

WorkerClient::WorkerClient(std::string url, WorkerAddress address,
                           std::shared_ptr<grpc::Channel> channel)
    : url_(std::move(url)),
      address_(std::move(address)),
      channel_(std::move(channel)),
      stub_(proto::Worker::NewStub(channel_)) {}

std::shared_ptr<CallHandle> WorkerClient::Prefill(
    proto::PrefillRequest request, absl::Time deadline,
    std::function<void(grpc::Status, proto::PrefillResponse)> done) {
  auto call = std::make_shared<PrefillSessionCall>(std::move(done));
  proto::SessionCall message;
  *message.mutable_prefill() = std::move(request);
  SendLeg(call, &message, deadline);
  return call;
}

std::shared_ptr<CallHandle> WorkerClient::Decode(
    proto::DecodeRequest request, absl::Time deadline,
    std::function<void(const proto::DecodeEvent&)> on_event,
    std::function<void(grpc::Status)> done) {
  auto call = std::make_shared<DecodeSessionCall>(std::move(on_event), std::move(done));
  proto::SessionCall message;
  *message.mutable_decode() = std::move(request);
  SendLeg(call, &message, deadline);
  return call;
}

void WorkerClient::SendLeg(const std::shared_ptr<SessionCall>& call, proto::SessionCall* message,
                           absl::Time deadline) {
  if (message->ByteSizeLong() > kMaxCallBytes) {
    grpc::Status too_big(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("a leg of ", message->ByteSizeLong(),
                     " bytes exceeds the worker's message limit of ", kMaxCallBytes, " bytes"));
    CallTimers().RunAt(absl::InfinitePast(), [call, too_big] { call->Fail(too_big); });
    return;
  }
  for (;;) {
    std::shared_ptr<WorkerSession> session;
    {
      std::lock_guard<std::mutex> lock(session_mu_);
      if (session_ == nullptr || session_->closing()) {
        session_ = WorkerSession::Open(channel_, stub_.get(), url_);
      }
      session = session_;
    }
    if (session->Send(call, message, deadline)) return;
  }
}

WorkerClient::~WorkerClient() {
  std::lock_guard<std::mutex> lock(session_mu_);
  if (session_ != nullptr) session_->Retire();
}

std::shared_ptr<CallHandle> WorkerClient::Abort(
    proto::AbortRequest request, absl::Time deadline,
    std::function<void(grpc::Status, proto::AbortResponse)> done) {
  auto call = std::make_shared<UnaryCall<proto::AbortRequest, proto::AbortResponse>>(
      std::move(request), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->Abort(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::Health(
    bool generate, absl::Time deadline,
    std::function<void(grpc::Status, proto::HealthResponse)> done) {
  proto::HealthRequest request;
  request.set_generate(generate);
  auto call = std::make_shared<UnaryCall<proto::HealthRequest, proto::HealthResponse>>(
      std::move(request), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->Health(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::GetLoad(
    absl::Time deadline, std::function<void(grpc::Status, proto::LoadReport)> done) {
  auto call = std::make_shared<UnaryCall<proto::LoadRequest, proto::LoadReport>>(
      proto::LoadRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->GetLoad(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::FlushCache(
    absl::Time deadline, std::function<void(grpc::Status, proto::FlushCacheResponse)> done) {
  auto call = std::make_shared<UnaryCall<proto::FlushCacheRequest, proto::FlushCacheResponse>>(
      proto::FlushCacheRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->FlushCache(ctx, req, resp, std::move(cb));
  });
}

std::shared_ptr<CallHandle> WorkerClient::GetServerInfo(
    absl::Time deadline, std::function<void(grpc::Status, proto::ServerInfo)> done) {
  auto call = std::make_shared<UnaryCall<proto::ServerInfoRequest, proto::ServerInfo>>(
      proto::ServerInfoRequest(), std::move(done));
  return call->Start(deadline, [this](auto* ctx, auto* req, auto* resp, auto cb) {
    stub_->async()->GetServerInfo(ctx, req, resp, std::move(cb));
  });
}

}  // namespace tandem::router

#include "router/workers/worker_session.h"

#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {

grpc::Status Cancelled() { return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"); }

grpc::Status FromCallError(const proto::CallError& error) {
  const int code = error.code();
  if (code <= 0 || code > grpc::StatusCode::UNAUTHENTICATED) {
    return grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("the worker ended a leg with an invalid status code ", code,
                                     ": ", error.message()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(code), error.message());
}

class DecodeSessionCall : public SessionCall {
 public:
  DecodeSessionCall(std::function<void(const proto::DecodeEvent&)> on_event,
                    std::function<void(grpc::Status)> done)
      : SessionCall(proto::SessionReply::kEvent, "decode"),
        on_event_(std::move(on_event)),
        done_(std::move(done)) {}

 protected:
  bool Deliver(const proto::SessionReply& reply) override {
    on_event_(reply.event());
    if (!reply.event().finished()) return false;
    Finish(grpc::Status::OK);
    return true;
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
      : SessionCall(proto::SessionReply::kPrefill, "prefill"), done_(std::move(done)) {}

 protected:
  bool Deliver(const proto::SessionReply& reply) override {
    auto done = std::move(done_);
    done_ = nullptr;
    done(grpc::Status::OK, reply.prefill());
    return true;
  }
  void Finish(const grpc::Status& status) override {
    auto done = std::move(done_);
    done_ = nullptr;
    done(status, proto::PrefillResponse());
  }

 private:
  std::function<void(grpc::Status, proto::PrefillResponse)> done_;
};

}  // namespace

TimerQueue& SessionTimers() {
  static TimerQueue* timers = new TimerQueue();
  return *timers;
}

void SessionCall::OnReply(const proto::SessionReply& reply) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return;
  if (reply.body_case() == answer_) {
    if (!Deliver(reply)) return;
  } else if (reply.has_error()) {
    Finish(FromCallError(reply.error()));
  } else {
    Finish(grpc::Status(grpc::StatusCode::INTERNAL,
                        absl::StrCat("the worker answered a ", kind_, " leg with something else")));
  }
  EndLocked();
}

void SessionCall::Fail(const grpc::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return;
  Finish(status);
  EndLocked();
}

void SessionCall::FailLater(std::shared_ptr<SessionCall> call, grpc::Status status) {
  SessionTimers().RunAt(absl::InfinitePast(), [call = std::move(call), status = std::move(status)] {
    call->Fail(status);
  });
}

bool SessionCall::Ends(const proto::SessionReply& reply) const {
  return reply.body_case() != answer_ || !reply.has_event() || reply.event().finished();
}

void SessionCall::Attach(std::weak_ptr<WorkerSession> session, uint64_t id) {
  session_ = std::move(session);
  id_ = id;
}

void SessionCall::SetTimer(TimerQueue::Id timer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) {
    SessionTimers().Cancel(timer);
  } else {
    timer_ = timer;
  }
}

void SessionCall::EndLocked() {
  ended_ = true;
  if (timer_ != 0) SessionTimers().Cancel(timer_);
}

void SessionCall::Cancel() {
  if (auto session = session_.lock()) session->Cancel(id_, Cancelled(), /*post=*/true);
}

std::shared_ptr<SessionCall> NewDecodeCall(std::function<void(const proto::DecodeEvent&)> on_event,
                                           std::function<void(grpc::Status)> done) {
  return std::make_shared<DecodeSessionCall>(std::move(on_event), std::move(done));
}

std::shared_ptr<SessionCall> NewPrefillCall(
    std::function<void(grpc::Status, proto::PrefillResponse)> done) {
  return std::make_shared<PrefillSessionCall>(std::move(done));
}

namespace {

// rpc Session. Owns itself while the stream runs (`self_`, let go after OnDone on the timer
// thread).
class GrpcWorkerSession : public WorkerSession,
                          public grpc::ClientBidiReactor<proto::SessionUp, proto::SessionDown> {
 public:
  GrpcWorkerSession(std::shared_ptr<grpc::Channel> channel, std::string url)
      : WorkerSession(std::move(url), /*hold_writes=*/false), channel_(std::move(channel)) {}

  void Start(proto::Worker::Stub* stub, std::shared_ptr<GrpcWorkerSession> self) {
    self_ = std::move(self);
    stub->async()->Session(&ctx_, this);
    // Writes start from any thread at any time: the hold keeps the reactor from completing
    // until the stream has ended (OnReadDone(false) removes it).
    AddHold();
    StartRead(&down_);
    StartCall();
  }

  void OnWriteDone(bool ok) override { WriteDone(ok); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Broken();
      RemoveHold();
      return;
    }
    OnReplies(down_);
    down_.Clear();
    StartRead(&down_);
  }
  void OnDone(const grpc::Status& status) override {
    FailAll(status);
    // The session may hold the last reference to the channel (its WorkerClient is gone), and
    // gRPC 1.51 must not destroy a channel on one of its callback threads (the callback queue's
    // thread pool would join itself and be freed while running). Let go on the timer thread.
    SessionTimers().RunAt(absl::InfinitePast(), [self = std::move(self_)] {});
  }

 protected:
  void WriteBatch(const proto::SessionUp* batch) override { StartWrite(batch); }
  void CloseTransport() override { ctx_.TryCancel(); }

 private:
  const std::shared_ptr<grpc::Channel> channel_;  // outlives the call
  grpc::ClientContext ctx_;
  proto::SessionDown down_;  // the read in flight
  std::shared_ptr<GrpcWorkerSession> self_;
};

}  // namespace

std::shared_ptr<WorkerSession> OpenGrpcSession(std::shared_ptr<grpc::Channel> channel,
                                               proto::Worker::Stub* stub, const std::string& url) {
  auto session = std::make_shared<GrpcWorkerSession>(std::move(channel), url);
  session->Start(stub, session);
  return session;
}

bool WorkerSession::Send(const std::shared_ptr<SessionCall>& call, proto::SessionCall* message,
                         size_t bytes, absl::Time deadline) {
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
  if (write) WriteBatch(&in_flight_);
  if (deadline != absl::InfiniteFuture()) {
    std::weak_ptr<WorkerSession> weak = weak_from_this();
    call->SetTimer(SessionTimers().RunAt(deadline, [weak, id] {
      if (auto s = weak.lock()) {
        s->Cancel(id, grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded"),
                  /*post=*/false);
      }
    }));
  }
  return true;
}

void WorkerSession::Cancel(uint64_t id, grpc::Status status, bool post) {
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
  if (write) WriteBatch(&in_flight_);
  if (close) CloseTransport();
  if (post) {
    SessionCall::FailLater(std::move(call), std::move(status));
  } else {
    call->Fail(status);
  }
}

void WorkerSession::Retire() {
  bool close;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_ = closing_ = true;
    close = calls_.empty();
  }
  if (close) CloseTransport();
}

bool WorkerSession::closing() {
  std::lock_guard<std::mutex> lock(mu_);
  return closing_;
}

void WorkerSession::WriteDone(bool ok) {
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
  if (write) WriteBatch(&in_flight_);
}

void WorkerSession::ReleaseWrites() {
  bool write;
  {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    write = TakeBatchLocked();
  }
  if (write) WriteBatch(&in_flight_);
}

void WorkerSession::Broken() {
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = closing_ = true;
}

void WorkerSession::OnReplies(const proto::SessionDown& down) {
  bool close = false;
  for (const proto::SessionReply& reply : down.replies()) {
    std::shared_ptr<SessionCall> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = calls_.find(reply.call_id());
      if (it == calls_.end()) continue;  // cancelled or timed out meanwhile
      call = it->second;
      if (call->Ends(reply)) {
        calls_.erase(it);
        close = retired_ && calls_.empty();
      }
    }
    call->OnReply(reply);
  }
  if (close) CloseTransport();
}

void WorkerSession::FailAll(const grpc::Status& status) {
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
}

bool WorkerSession::TakeBatchLocked() {
  if (writing_ || broken_ || pending_.empty()) return false;
  size_t bytes = 0;
  while (!pending_.empty() &&
         (in_flight_.calls_size() == 0 || bytes + pending_.front().first <= kSessionBatchBytes)) {
    bytes += pending_.front().first;
    *in_flight_.add_calls() = std::move(pending_.front().second);
    pending_.pop_front();
  }
  writing_ = true;
  return true;
}

}  // namespace tandem::router

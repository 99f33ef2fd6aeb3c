#include "router/workers/worker_session.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {

absl::Status Cancelled() { return absl::CancelledError("cancelled"); }

class DecodeLegStream : public LegStream {
 public:
  DecodeLegStream(LegEventFn on_event, LegDoneFn done)
      : LegStream(proto::SessionReply::kEvent, "decode"),
        on_event_(std::move(on_event)),
        done_(std::move(done)) {}

 protected:
  void DeliverEvent(const proto::SessionReply& reply) override { on_event_(reply.event()); }
  void Finish(absl::Status status, const proto::SessionReply* answer) override {
    auto on_event = std::move(on_event_);
    auto done = std::move(done_);
    on_event_ = nullptr;
    done_ = nullptr;
    if (answer != nullptr) on_event(answer->event());
    done(std::move(status));
  }

 private:
  // Called by the one thread that delivers (LegStream's state machine hands them over).
  LegEventFn on_event_;
  LegDoneFn done_;
};

class PrefillLegStream : public LegStream {
 public:
  explicit PrefillLegStream(PrefillDoneFn done)
      : LegStream(proto::SessionReply::kPrefill, "prefill"), done_(std::move(done)) {}

 protected:
  void DeliverEvent(const proto::SessionReply& /*reply*/) override {}  // Ends() never lets one by
  void Finish(absl::Status status, const proto::SessionReply* answer) override {
    auto done = std::move(done_);
    done_ = nullptr;
    done(std::move(status), answer != nullptr ? answer->prefill() : proto::PrefillResponse());
  }

 private:
  PrefillDoneFn done_;
};

}  // namespace

absl::Status LegStatusFromWire(int code, std::string message, absl::StatusCode invalid) {
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    return absl::Status(invalid, absl::StrCat("the worker ended a leg with an invalid status code ",
                                              code, ": ", message));
  }
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

absl::Status LegStatusFromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return LegStatusFromWire(static_cast<int>(status.error_code()), status.error_message(),
                           absl::StatusCode::kUnknown);
}

const char* LegStateName(LegState state) {
  switch (state) {
    case LegState::kSent:
      return "sent";
    case LegState::kStreaming:
      return "streaming";
    case LegState::kEnded:
      return "ended";
  }
  return "ended";
}

TimerQueue& LegTimers() {
  static TimerQueue* timers = new TimerQueue();
  return *timers;
}

LegState LegStream::state() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

TimerQueue::Id LegStream::EndLocked() {
  state_ = LegState::kEnded;
  return std::exchange(timer_, 0);
}

void LegStream::OnReply(const proto::SessionReply& reply) {
  const bool last = Ends(reply);
  TimerQueue::Id timer = 0;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == LegState::kEnded) return;
    if (last) {
      timer = EndLocked();
    } else {
      state_ = LegState::kStreaming;
      delivering_ = true;
    }
  }
  if (!last) {
    DeliverEvent(reply);
    std::optional<absl::Status> failed;
    {
      absl::MutexLock lock(&mu_);
      delivering_ = false;
      failed.swap(failed_);
    }
    if (failed) Finish(*std::move(failed), nullptr);
    return;
  }
  if (timer != 0) LegTimers().Cancel(timer);
  if (reply.body_case() == answer_) {
    Finish(absl::OkStatus(), &reply);
  } else if (reply.has_error()) {
    Finish(LegStatusFromWire(reply.error().code(), reply.error().message(),
                             absl::StatusCode::kInternal),
           nullptr);
  } else {
    Finish(absl::InternalError(
               absl::StrCat("the worker answered a ", kind_, " leg with something else")),
           nullptr);
  }
}

void LegStream::Fail(absl::Status status) {
  TimerQueue::Id timer;
  bool handed_over = false;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == LegState::kEnded) return;
    timer = EndLocked();
    if (delivering_) {
      failed_ = std::move(status);  // the delivering thread ends the leg after its event
      handed_over = true;
    }
  }
  if (timer != 0) LegTimers().Cancel(timer);
  if (!handed_over) Finish(std::move(status), nullptr);
}

void LegStream::FailLater(std::shared_ptr<LegStream> call, absl::Status status) {
  LegTimers().Post([call = std::move(call), status = std::move(status)] { call->Fail(status); });
}

bool LegStream::Ends(const proto::SessionReply& reply) const {
  return reply.body_case() != answer_ || !reply.has_event() || reply.event().finished();
}

void LegStream::Attach(std::weak_ptr<WorkerLink> link, uint64_t id) {
  link_ = std::move(link);
  id_ = id;
}

void LegStream::SetTimer(TimerQueue::Id timer) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != LegState::kEnded) {
      timer_ = timer;
      return;
    }
  }
  LegTimers().Cancel(timer);
}

void LegStream::Cancel() {
  if (auto link = link_.lock()) link->Cancel(id_, Cancelled(), /*post=*/true);
}

std::shared_ptr<LegStream> NewDecodeLegStream(LegEventFn on_event, LegDoneFn done) {
  return std::make_shared<DecodeLegStream>(std::move(on_event), std::move(done));
}

std::shared_ptr<LegStream> NewPrefillLegStream(PrefillDoneFn done) {
  return std::make_shared<PrefillLegStream>(std::move(done));
}

namespace {

// rpc Session. Owns itself while the stream runs (`self_`, let go after OnDone on the timer
// thread).
class GrpcWorkerLink : public WorkerLink,
                       public grpc::ClientBidiReactor<proto::SessionUp, proto::SessionDown> {
 public:
  GrpcWorkerLink(std::shared_ptr<grpc::Channel> channel, std::string url)
      : WorkerLink(std::move(url), /*hold_writes=*/false), channel_(std::move(channel)) {}

  void Start(proto::Worker::Stub* stub, std::shared_ptr<GrpcWorkerLink> self) {
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
    FailAll(LegStatusFromGrpc(status));
    // The session may hold the last reference to the channel (its WorkerClient is gone), and
    // gRPC 1.51 must not destroy a channel on one of its callback threads (the callback queue's
    // thread pool would join itself and be freed while running). Let go on the timer thread.
    LegTimers().Post([self = std::move(self_)] {});
  }

 protected:
  void WriteBatch(const proto::SessionUp* batch) override { StartWrite(batch); }
  void CloseTransport() override { ctx_.TryCancel(); }

 private:
  const std::shared_ptr<grpc::Channel> channel_;  // outlives the call
  grpc::ClientContext ctx_;
  proto::SessionDown down_;  // the read in flight
  std::shared_ptr<GrpcWorkerLink> self_;
};

}  // namespace

std::shared_ptr<WorkerLink> OpenGrpcLink(std::shared_ptr<grpc::Channel> channel,
                                         proto::Worker::Stub* stub, const std::string& url) {
  auto link = std::make_shared<GrpcWorkerLink>(std::move(channel), url);
  link->Start(stub, link);
  return link;
}

bool WorkerLink::Send(const std::shared_ptr<LegStream>& call, proto::SessionCall* message,
                      size_t bytes, Deadline deadline) {
  uint64_t id;
  bool write;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return false;
    id = next_id_++;
    call->Attach(weak_from_this(), id);
    calls_.emplace(id, call);
    message->set_call_id(id);
    pending_.emplace_back(bytes, std::move(*message));
    write = TakeBatchLocked();
  }
  if (write) WriteBatch(&in_flight_);
  if (!deadline.is_never()) {
    std::weak_ptr<WorkerLink> weak = weak_from_this();
    call->SetTimer(LegTimers().RunAt(deadline.when(), [weak, id] {
      if (auto s = weak.lock()) {
        s->Cancel(id, absl::DeadlineExceededError("Deadline Exceeded"), /*post=*/false);
      }
    }));
  }
  return true;
}

void WorkerLink::Cancel(uint64_t id, absl::Status status, bool post) {
  std::shared_ptr<LegStream> call;
  bool write = false;
  bool close = false;
  {
    absl::MutexLock lock(&mu_);
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
    LegStream::FailLater(std::move(call), std::move(status));
  } else {
    call->Fail(status);
  }
}

void WorkerLink::Retire() {
  bool close;
  {
    absl::MutexLock lock(&mu_);
    retired_ = closing_ = true;
    close = calls_.empty();
  }
  if (close) CloseTransport();
}

bool WorkerLink::closing() {
  absl::MutexLock lock(&mu_);
  return closing_;
}

void WorkerLink::WriteDone(bool ok) {
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
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

void WorkerLink::ReleaseWrites() {
  bool write;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write = TakeBatchLocked();
  }
  if (write) WriteBatch(&in_flight_);
}

void WorkerLink::Broken() {
  absl::MutexLock lock(&mu_);
  broken_ = closing_ = true;
}

void WorkerLink::OnReplies(const proto::SessionDown& down) {
  bool close = false;
  for (const proto::SessionReply& reply : down.replies()) {
    std::shared_ptr<LegStream> call;
    {
      absl::MutexLock lock(&mu_);
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

void WorkerLink::FailAll(const absl::Status& status) {
  std::unordered_map<uint64_t, std::shared_ptr<LegStream>> calls;
  {
    absl::MutexLock lock(&mu_);
    closing_ = broken_ = true;
    calls.swap(calls_);
  }
  const absl::Status failure =
      !status.ok() ? status
                   : absl::UnavailableError(absl::StrCat("worker ", url_, " ended the session"));
  for (auto& [id, call] : calls) call->Fail(failure);
}

bool WorkerLink::TakeBatchLocked() {
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

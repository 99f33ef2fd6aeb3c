#include "worker/session_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::worker {

void SessionCore::Handle(const proto::SessionUp& up) {
  for (const proto::SessionCall& call : up.calls()) HandleCall(call);
}

bool SessionCore::ended() {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void SessionCore::Written(bool ok) {
  bool write = false;
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.Clear();
    if (ok && !close_called_ && pending_.replies_size() > 0) {
      in_flight_.Swap(&pending_);
      write = true;
    } else {
      writing_ = false;
      if ((!ok || ended_) && !close_called_) close = close_called_ = true;
    }
  }
  if (write) WriteBatch(&in_flight_);
  if (!ok) End(grpc::Status(grpc::StatusCode::CANCELLED, "the stream to the router broke"));
  if (close) Close(end_status_);
}

void SessionCore::End(grpc::Status status) {
  std::vector<std::function<void()>> cancels;
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    ended_ = true;
    end_status_ = std::move(status);
    for (auto& [id, cancel] : live_) {
      if (cancel) cancels.push_back(cancel);
    }
    pending_.Clear();
    if (!writing_ && !close_called_) close = close_called_ = true;
  }
  for (auto& cancel : cancels) cancel();
  if (close) Close(end_status_);
}

void SessionCore::Forget() { server_->Forget(this); }

void SessionCore::HandleCall(const proto::SessionCall& call) {
  const uint64_t id = call.call_id();
  switch (call.body_case()) {
    case proto::SessionCall::kCancel: {
      std::function<void()> cancel;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = live_.find(id);
        if (it != live_.end()) cancel = it->second;
      }
      if (cancel) cancel();
      return;
    }
    case proto::SessionCall::kDecode:
      StartDecode(id, call.decode());
      return;
    case proto::SessionCall::kPrefill:
      StartPrefill(id, call.prefill());
      return;
    case proto::SessionCall::BODY_NOT_SET:
      break;
  }
  Reply(id, [&](proto::SessionReply* r) {
    r->mutable_error()->set_code(grpc::StatusCode::INVALID_ARGUMENT);
    r->mutable_error()->set_message(absl::StrCat("session call ", id, " has no body"));
  });
}

// Registers call `id` as live (with `cancel`, possibly empty until the leg has started) and
// takes a reference for it; false (and an error reply) when it cannot start.
bool SessionCore::Admit(uint64_t id, std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  if (!live_.emplace(id, std::move(cancel)).second) {
    AppendLocked(id, [&](proto::SessionReply* r) {
      r->mutable_error()->set_code(grpc::StatusCode::INVALID_ARGUMENT);
      r->mutable_error()->set_message(
          absl::StrCat("session call ", id, " is already live in this session"));
    });
    WriteIfIdleLocked();
    return false;
  }
  Ref();
  return true;
}

namespace {

void SetError(proto::SessionReply* r, const absl::Status& status) {
  r->mutable_error()->set_code(static_cast<int>(status.code()));
  r->mutable_error()->set_message(std::string(status.message()));
}

}  // namespace

void SessionCore::StartDecode(uint64_t id, const proto::DecodeRequest& request) {
  if (!Admit(id, nullptr)) {
    FlushWrite();
    return;
  }
  absl::StatusOr<std::function<void()>> cancel = legs_->StartDecode(
      request, [this, id](proto::DecodeEvent event) { OnEvent(id, std::move(event)); });
  if (!cancel.ok()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(id);
    }
    Reply(id, [&](proto::SessionReply* r) { SetError(r, cancel.status()); });
    Unref();
    return;
  }
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(id);  // gone when the leg already ended inline
    if (it != live_.end()) {
      it->second = *cancel;
      cancel_now = ended_;  // End() ran before the leg could be cancelled
    }
  }
  if (cancel_now) (*cancel)();
}

void SessionCore::StartPrefill(uint64_t id, const proto::PrefillRequest& request) {
  const uint64_t room = request.bootstrap_room();
  SessionLegs* legs = legs_;
  if (!Admit(id, [legs, room] { legs->CancelPrefill(room); })) {
    FlushWrite();
    return;
  }
  legs_->StartPrefill(request, [this, id](absl::StatusOr<proto::PrefillResponse> result) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(id);
    }
    Reply(id, [&](proto::SessionReply* r) {
      if (result.ok()) {
        *r->mutable_prefill() = *std::move(result);
      } else {
        SetError(r, result.status());
      }
    });
    Unref();
  });
}

// Engine thread (or inline from StartDecode).
void SessionCore::OnEvent(uint64_t id, proto::DecodeEvent event) {
  const bool last = event.finished();
  if (last) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(id);
  }
  Reply(id, [&](proto::SessionReply* r) { *r->mutable_event() = std::move(event); });
  if (last) Unref();
}

// Queues the reply `fill` writes for call `id` and starts a write when none is in flight.
template <typename Fill>
void SessionCore::Reply(uint64_t id, Fill fill) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    AppendLocked(id, fill);
    WriteIfIdleLocked();
  }
  FlushWrite();
}

template <typename Fill>
void SessionCore::AppendLocked(uint64_t id, Fill&& fill) {
  proto::SessionReply* r = pending_.add_replies();
  r->set_call_id(id);
  fill(r);
}

// Moves the pending replies in flight when no write is (the caller then calls FlushWrite).
void SessionCore::WriteIfIdleLocked() {
  if (writing_ || close_called_ || pending_.replies_size() == 0) return;
  writing_ = true;
  in_flight_.Swap(&pending_);
  start_write_ = true;
}

void SessionCore::FlushWrite() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!start_write_) return;
    start_write_ = false;
  }
  WriteBatch(&in_flight_);
}

namespace {

// One Session call: a SessionCore carried by gRPC's reactor, which holds the core's first
// reference until OnDone.
class SessionReactor : public grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>,
                       public SessionCore {
 public:
  SessionReactor(SessionServer* server, SessionLegs* legs) : SessionCore(server, legs) {
    StartRead(&up_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the router half-closed the stream or it broke: the session is over
      End(grpc::Status::OK);
      return;
    }
    Handle(up_);
    up_.Clear();
    if (!ended()) StartRead(&up_);
  }
  void OnWriteDone(bool ok) override { Written(ok); }
  void OnCancel() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "the router cancelled the session"));
  }
  void OnDone() override {
    Forget();
    Unref();
  }

 protected:
  void WriteBatch(const proto::SessionDown* batch) override { StartWrite(batch); }
  void Close(const grpc::Status& status) override { Finish(status); }

 private:
  proto::SessionUp up_;  // the read in flight (gRPC's reactions are serialized)
};

class RefusedSession : public grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown> {
 public:
  explicit RefusedSession(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

SessionServer::~SessionServer() { CloseAll(); }

grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* SessionServer::Open(
    SessionLegs* legs) {
  auto* session = new SessionReactor(this, legs);
  Add(session);
  return session;
}

void SessionServer::Add(SessionCore* session) {
  bool closed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed = closed_;
    open_.insert(session);
  }
  if (closed) session->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is stopping"));
}

grpc::ServerBidiReactor<proto::SessionUp, proto::SessionDown>* SessionServer::Refuse(
    grpc::Status status) {
  return new RefusedSession(std::move(status));
}

void SessionServer::CloseAll() {
  std::vector<SessionCore*> sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (SessionCore* s : open_) {
      s->Ref();  // Forget waits for mu_, so each is alive here
      sessions.push_back(s);
    }
  }
  for (SessionCore* s : sessions) {
    s->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the worker is stopping"));
    s->Unref();
  }
}

void SessionServer::Forget(SessionCore* session) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(session);
}

}  // namespace tandem::worker

#include "worker/session_server.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tandem::worker {

void RouterLink::Handle(const proto::SessionUp& up) {
  for (const proto::SessionCall& call : up.calls()) HandleCall(call);
}

bool RouterLink::ended() {
  std::lock_guard<std::mutex> lock(mu_);
  return ended_;
}

void RouterLink::Written(bool ok) {
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
  if (!ok) End(absl::CancelledError("the stream to the router broke"));
  if (close) Close(end_status_);
}

void RouterLink::End(absl::Status status) {
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

void RouterLink::Forget() { server_->Forget(this); }

void RouterLink::HandleCall(const proto::SessionCall& call) {
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
    r->mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
    r->mutable_error()->set_message(absl::StrCat("session call ", id, " has no body"));
  });
}

// Registers call `id` as live (with `cancel`, possibly empty until the leg has started) and
// takes a reference for it; false (and an error reply) when it cannot start.
bool RouterLink::Admit(uint64_t id, std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ended_) return false;
  if (!live_.emplace(id, std::move(cancel)).second) {
    AppendLocked(id, [&](proto::SessionReply* r) {
      r->mutable_error()->set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
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

void RouterLink::StartDecode(uint64_t id, const proto::DecodeRequest& request) {
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

void RouterLink::StartPrefill(uint64_t id, const proto::PrefillRequest& request) {
  const uint64_t room = request.bootstrap_room();
  LegHandler* legs = legs_;
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
void RouterLink::OnEvent(uint64_t id, proto::DecodeEvent event) {
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
void RouterLink::Reply(uint64_t id, Fill fill) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    AppendLocked(id, fill);
    WriteIfIdleLocked();
  }
  FlushWrite();
}

template <typename Fill>
void RouterLink::AppendLocked(uint64_t id, Fill&& fill) {
  proto::SessionReply* r = pending_.add_replies();
  r->set_call_id(id);
  fill(r);
}

// Moves the pending replies in flight when no write is (the caller then calls FlushWrite).
void RouterLink::WriteIfIdleLocked() {
  if (writing_ || close_called_ || pending_.replies_size() == 0) return;
  writing_ = true;
  in_flight_.Swap(&pending_);
  start_write_ = true;
}

void RouterLink::FlushWrite() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!start_write_) return;
    start_write_ = false;
  }
  WriteBatch(&in_flight_);
}

LinkServer::~LinkServer() { CloseAll(); }

void LinkServer::Add(RouterLink* link) {
  bool closed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed = closed_;
    open_.insert(link);
  }
  if (closed) link->End(absl::UnavailableError("the worker is stopping"));
}

void LinkServer::CloseAll() {
  std::vector<RouterLink*> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (RouterLink* s : open_) {
      s->Ref();  // Forget waits for mu_, so each is alive here
      links.push_back(s);
    }
  }
  for (RouterLink* s : links) {
    s->End(absl::UnavailableError("the worker is stopping"));
    s->Unref();
  }
}

void LinkServer::Forget(RouterLink* link) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(link);
}

}  // namespace tandem::worker

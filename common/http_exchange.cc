// Exchange (declared in common/http_session.h): one request's answer, handed from the handler
// (HttpResponder / HttpStream, any thread) to its HttpConnection's strand. All state sits under
// mu_; the session is called only through TrySend (a whole answer written by the sending thread)
// and its Post* methods, and close callbacks run outside the lock.
#include <exception>
#include <utility>

#include "common/http_session.h"
#include "spdlog/spdlog.h"

namespace tandem::http_internal {

Exchange::Exchange(std::shared_ptr<HttpConnection> session, size_t max_buffer_bytes,
                   BodyBudget::Lease body_lease)
    : max_buffer_bytes_(max_buffer_bytes),
      body_lease_(std::move(body_lease)),
      session_(std::move(session)) {}

bool Exchange::Send(HttpResponse response) {
  std::shared_ptr<HttpConnection> written;  // released outside the lock
  absl::MutexLock lock(&mu_);
  if (state_ != State::kPending || session_ == nullptr) return false;
  body_lease_ = {};  // answered: the handler is done with the request
  // Send runs on the handler's thread (an I/O thread, or a callback thread of the router, e.g.
  // from a responder's destructor): nothing may escape it, or that thread terminates the process.
  bool sent_directly = false;
  try {
    sent_directly = session_->TrySend(response);
  } catch (const std::exception& e) {
    spdlog::error("http: a direct answer failed ({}); the connection writes a 500", e.what());
    response = HttpResponse::Error(500, "internal error: the response could not be sent");
  } catch (...) {
    spdlog::error("http: a direct answer failed; the connection writes a 500");
    response = HttpResponse::Error(500, "internal error: the response could not be sent");
  }
  if (sent_directly) {
    // Written by this thread: done, as when the connection writes it.
    state_ = State::kDone;
    on_close_ = nullptr;
    written = std::move(session_);
    return true;
  }
  state_ = State::kResponding;
  try {
    session_->PostSend(std::move(response));
  } catch (...) {
    // Out of memory for the task: the connection cannot be answered; close it.
    spdlog::error("http: could not hand an answer to its connection; closing it");
    session_->PostClose();
  }
  return true;
}

bool Exchange::StartStream(int status, const std::string& content_type,
                           const HttpHeaders& headers) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kPending || session_ == nullptr) return false;
  state_ = State::kStreaming;
  session_->PostStartStream(status, content_type, headers);
  return true;
}

bool Exchange::Write(std::string data) {
  std::shared_ptr<HttpConnection> to_close;
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kStreaming || finish_requested_ || overflowed_ || session_ == nullptr) {
      return false;
    }
    if (data.empty()) return true;
    if (pending_.size() + data.size() > max_buffer_bytes_) {
      overflowed_ = true;
      to_close = session_;
    } else {
      if (pending_.empty()) {
        pending_ = std::move(data);
      } else {
        pending_ += data;
      }
      SchedulePumpLocked();
      return true;
    }
  }
  spdlog::warn("http: client too slow, more than {} bytes of stream pending; closing",
               max_buffer_bytes_);
  to_close->PostClose();
  return false;
}

void Exchange::Finish() {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kStreaming || finish_requested_ || session_ == nullptr) return;
  finish_requested_ = true;
  body_lease_ = {};
  SchedulePumpLocked();
}

void Exchange::SchedulePumpLocked() {
  if (pump_scheduled_) return;
  pump_scheduled_ = true;
  session_->PostPump();
}

bool Exchange::closed() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kClosed || overflowed_;
}

bool Exchange::pending() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kPending;
}

bool Exchange::answered() const {
  absl::MutexLock lock(&mu_);
  return state_ == State::kResponding || state_ == State::kDone;
}

void Exchange::SetOnClose(std::function<void()> callback) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kClosed) {
      if (state_ != State::kDone) on_close_ = std::move(callback);
      return;
    }
  }
  if (callback) callback();
}

std::string Exchange::TakePending(bool* finish) {
  absl::MutexLock lock(&mu_);
  pump_scheduled_ = false;
  std::string data = std::move(pending_);
  pending_.clear();
  *finish = finish_requested_ && data.empty();
  return data;
}

void Exchange::MarkDone() {
  std::shared_ptr<HttpConnection> session;  // released outside the lock
  absl::MutexLock lock(&mu_);
  if (state_ == State::kClosed) return;
  state_ = State::kDone;
  session = std::move(session_);
  on_close_ = nullptr;
}

void Exchange::MarkClosed() {
  std::function<void()> callback;
  std::shared_ptr<HttpConnection> session;
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kDone || state_ == State::kClosed) return;
    state_ = State::kClosed;
    session = std::move(session_);
    callback = std::move(on_close_);
    on_close_ = nullptr;
  }
  if (callback) {
    try {
      callback();
    } catch (const std::exception& e) {
      spdlog::error("http: close callback threw: {}", e.what());
    } catch (...) {
      spdlog::error("http: close callback threw an exception of unknown type");
    }
  }
}

}  // namespace tandem::http_internal

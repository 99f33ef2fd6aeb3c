#include "router/client_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "router/router_server.h"

namespace tandem::router {
namespace {

// Appends `e` to `into`, as one event carrying both: tokens, logprobs and text concatenated, the
// later event's end and counters.
void AppendEvent(const proto::DecodeEvent& e, proto::DecodeEvent* into) {
  std::string text = into->text() + e.text();
  into->MergeFrom(e);
  into->set_text(std::move(text));
}

double ToSec(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Retry-After of a 429: a second, about what a short request takes to end and free its claim.
constexpr int kRetryAfterSecs = 1;

// What a request may claim of a worker's KV, for admission: its prompt and every token it may
// generate. Nothing is taken off for a prefix the worker may have cached (a plain worker's radix
// cache) or for an early stop: the estimate errs toward refusing, never toward preempting.
int64_t KvNeedTokens(const RoutedRequest& request) {
  return static_cast<int64_t>(request.input_ids.size()) +
         std::max<int64_t>(0, request.sampling.max_new_tokens());
}

}  // namespace

// The error kind label of tandem_router_errors_total for a failed request.
std::string ErrorKind(const absl::Status& s) {
  if (HttpStatusFor(s) == 413) return "bad_request";  // a request too large for a worker
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kAlreadyExists:
      return "bad_request";
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return "unauthorized";
    case absl::StatusCode::kResourceExhausted:
      return "queue_full";
    case absl::StatusCode::kDeadlineExceeded:
      return "timeout";
    case absl::StatusCode::kUnavailable:
      return "upstream";
    case absl::StatusCode::kCancelled:
      return "client_gone";
    default:
      return "internal";
  }
}

void AddRetryAfter(HttpResponse* r) {
  if (r->status == 429) r->headers.emplace_back("retry-after", std::to_string(kRetryAfterSecs));
}

ClientCall::ClientCall(RouterServer* server, std::string route, RoutedBatch batch,
                       HttpResponder responder)
    : server_(server),
      route_(std::move(route)),
      received_(absl::Now()),
      n_(batch.n),
      single_(batch.single()),
      stream_requested_(!batch.items.empty() && batch.items.front().stream),
      rids_(RidsOf(batch)),
      kv_needs_(KvNeedsOf(batch)),
      responder_(std::move(responder)) {
  headers_.emplace_back("x-request-id", batch.rid);
  items_.reserve(batch.items.size());
  for (RoutedRequest& request : batch.items) {
    Item item;
    item.request = std::make_shared<RoutedRequest>(std::move(request));
    item.shaper = std::make_unique<ResponseShaper>(*item.request, server->tokenizer_.get());
    items_.push_back(std::move(item));
  }
  // Items are prompt-major: prompt p's choices are p * n .. p * n + n - 1.
  const size_t n = static_cast<size_t>(std::max(n_, 1));
  for (size_t first = 0; n > 1 && first + n <= items_.size(); first += n) {
    if (!MaySharePrompt(*items_[first].request)) continue;
    items_[first].has_siblings = true;
    for (size_t k = first + 1; k < first + n; ++k) items_[k].leader = static_cast<int>(first);
  }
}

ClientCall::~ClientCall() { ReleaseRids(); }

std::vector<int64_t> ClientCall::KvNeedsOf(const RoutedBatch& batch) {
  std::vector<int64_t> needs;
  for (const RoutedRequest& item : batch.items) needs.push_back(KvNeedTokens(item));
  return needs;
}

void ClientCall::ReleaseRids() {
  if (!rids_held_.exchange(false)) return;
  for (const std::string& rid : rids_) server_->ReleaseRid(rid);
}

void ClientCall::ReleaseSlot(size_t i) {
  server_->router_metrics_->inflight.Decrement();
  server_->admission_->Release(kv_needs_[i]);
  server_->router_metrics_->queue_depth.Set(static_cast<double>(server_->admission_->queued()));
}

void ClientCall::Begin() {
  std::weak_ptr<ClientCall> weak = weak_from_this();
  // May run at once on this thread when the client is already gone: no lock held here.
  HttpResponder* responder;
  size_t count;
  {
    absl::MutexLock lock(&mu_);
    responder = &*responder_;
    count = items_.size();
  }
  responder->OnClientGone([weak] {
    if (auto self = weak.lock()) self->ClientGone();
  });
  auto self = shared_from_this();
  for (size_t i = 0; i < count; ++i) {
    {
      absl::MutexLock lock(&mu_);
      if (done_) {
        // Failed or gone before this item asked for a slot: it never runs.
        for (size_t k = i; k < count; ++k) items_[k].ended = true;
        SendHeldErrorLocked();
        break;
      }
    }
    const uint64_t ticket = server_->admission_->Acquire(
        kv_needs_[i], [self, i](absl::Status s) { self->Admitted(i, std::move(s)); });
    absl::MutexLock lock(&mu_);
    if (!items_[i].ended && items_[i].run == nullptr) items_[i].ticket = ticket;
  }
  server_->router_metrics_->queue_depth.Set(static_cast<double>(server_->admission_->queued()));
  bool cancel;
  {
    absl::MutexLock lock(&mu_);
    cancel = done_;
  }
  // A failure while later items were still asking for slots left their tickets behind.
  if (cancel) CancelOthers();
}

void ClientCall::Admitted(size_t i, absl::Status status) {
  bool start = false;
  {
    absl::MutexLock lock(&mu_);
    Item& item = items_[i];
    item.ticket = 0;
    if (!status.ok()) {
      item.ended = true;
      FailLocked(status, /*from_admission=*/true);
      SendHeldErrorLocked();  // the request had failed already and waited for this item
    } else {
      server_->router_metrics_->inflight.Increment();
      if (done_) {
        item.ended = true;  // the request ended while it waited: give the slot back at once
      } else {
        start = true;
      }
    }
  }
  server_->router_metrics_->queue_depth.Set(static_cast<double>(server_->admission_->queued()));
  if (!status.ok()) {
    CancelOthers();
    return;
  }
  if (!start) {
    ReleaseSlot(i);
    absl::MutexLock lock(&mu_);
    SendHeldErrorLocked();
    return;
  }
  std::optional<LegPlace> share_with;
  {
    absl::MutexLock lock(&mu_);
    Item& item = items_[i];
    if (item.leader >= 0) {
      const Item& leader = items_[static_cast<size_t>(item.leader)];
      if (leader.place) {
        share_with = leader.place;
      } else if (done_) {
        // The request ended since this item was admitted, and CancelOthers may have run
        // already: it never waits, and never runs.
        item.ended = true;
        start = false;
      } else if (!leader.ended) {
        item.waits_for_leader = true;  // OnLeaderRouted, OnDone or CancelOthers starts or ends it
        return;
      }
    }
  }
  if (!start) {
    ReleaseSlot(i);
    absl::MutexLock lock(&mu_);
    SendHeldErrorLocked();
    return;
  }
  StartItem(i, std::move(share_with));
}

void ClientCall::StartItem(size_t i, std::optional<LegPlace> share_with) {
  std::shared_ptr<const RoutedRequest> request;
  StartOptions options;
  auto self = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    request = items_[i].request;
    if (items_[i].has_siblings) {
      options.on_routed = [self, i](const LegPlace& place) { self->OnLeaderRouted(i, place); };
    }
  }
  options.share_with = std::move(share_with);
  std::shared_ptr<DispatchRun> run = server_->dispatcher_->Start(
      request, [self, i](const proto::DecodeEvent& e) { self->OnEvent(i, e); },
      [self, i](absl::Status s) { self->OnDone(i, std::move(s)); }, std::move(options));
  bool cancel = false;
  {
    absl::MutexLock lock(&mu_);
    if (!items_[i].ended) items_[i].run = run;
    cancel = done_ && !items_[i].ended;
  }
  // Never cancel on a thread that may be inside a run's own callbacks.
  if (cancel) server_->dispatcher_->Post([run] { run->Cancel(); });
}

void ClientCall::OnLeaderRouted(size_t i, const LegPlace& place) {
  std::vector<size_t> start;
  {
    absl::MutexLock lock(&mu_);
    Item& leader = items_[i];
    if (place.worker == nullptr) {
      // The attempt's leg is gone; news of a later attempt already replaced it.
      if (place.attempt >= leader.place_attempt) {
        leader.place_attempt = place.attempt;
        leader.place.reset();
      }
      return;
    }
    // A place for an attempt already reported gone (or superseded) is stale.
    if (place.attempt <= leader.place_attempt || leader.ended) return;
    leader.place_attempt = place.attempt;
    leader.place = place;
    if (done_) return;  // CancelOthers ends the waiting siblings
    start = TakeWaitingSiblingsLocked(i);
  }
  for (size_t k : start) StartItem(k, place);
}

std::vector<size_t> ClientCall::TakeWaitingSiblingsLocked(size_t leader) {
  std::vector<size_t> waiting;
  for (size_t k = 0; k < items_.size(); ++k) {
    Item& item = items_[k];
    if (item.leader == static_cast<int>(leader) && item.waits_for_leader) {
      item.waits_for_leader = false;
      waiting.push_back(k);
    }
  }
  return waiting;
}

void ClientCall::ClientGone() {
  {
    absl::MutexLock lock(&mu_);
    FailLocked(absl::CancelledError("client gone"));
  }
  CancelOthers();
}

void ClientCall::Abort() {
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    done_ = true;
    ReleaseRids();
    if (stream_) {
      FinishAborted();  // the client reads the abort now; the legs end behind it
    } else {
      held_abort_ = true;  // answered once every item ended, as a held error is
      SendHeldErrorLocked();
    }
  }
  CancelOthers();
}

void ClientCall::FinishAborted() {
  proto::DecodeEvent abort;
  abort.set_finished(true);
  abort.mutable_finish_reason()->set_type(proto::FinishReason::ABORT);
  abort.mutable_finish_reason()->set_message("aborted by /abort_request");
  // Not an error of the router's or a worker's: counted by status only, and before the client
  // can see the end (and read /metrics).
  if (stream_requested_) {
    server_->router_metrics_->CountRequest(route_, 200);
    if (!stream_ && responder_) {
      stream_ = responder_->StartStream(200, "text/event-stream", headers_);
      responder_.reset();
    }
    if (stream_) {
      // Every choice still open ends with the abort, after the tokens it had not sent yet.
      for (Item& item : items_) {
        if (item.finished) continue;
        if (item.pending_tokens > 0) stream_->Write(item.shaper->StreamEvent(item.pending));
        stream_->Write(item.shaper->StreamEvent(abort));
      }
      stream_->Write(items_.front().shaper->StreamDone());
      stream_->Finish();
    }
  } else if (responder_) {
    ResponseShaper& shaper = *items_.front().shaper;
    shaper.Accumulate(abort);
    HttpResponse r = ErrorResponse(shaper.FinalStatus());
    r.headers.insert(r.headers.end(), headers_.begin(), headers_.end());
    server_->router_metrics_->CountRequest(route_, r.status);
    responder_->Send(std::move(r));
    responder_.reset();
  } else {
    server_->router_metrics_->CountRequest(route_, 200);
  }
}

void ClientCall::CancelOthers() {
  std::vector<std::shared_ptr<DispatchRun>> runs;
  std::vector<std::pair<size_t, uint64_t>> tickets;
  std::vector<size_t> waiting;  // siblings that held a slot waiting for their leader: never run
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < items_.size(); ++i) {
      Item& item = items_[i];
      if (item.ended) continue;
      if (item.run) runs.push_back(item.run);
      if (item.ticket != 0) tickets.emplace_back(i, item.ticket);
      if (item.waits_for_leader) {
        item.waits_for_leader = false;
        item.ended = true;
        waiting.push_back(i);
      }
    }
  }
  if (!waiting.empty()) {
    for (size_t k : waiting) ReleaseSlot(k);
    absl::MutexLock lock(&mu_);
    SendHeldErrorLocked();
  }
  for (const auto& [i, ticket] : tickets) {
    if (server_->admission_->Cancel(ticket)) {
      absl::MutexLock lock(&mu_);
      items_[i].ticket = 0;
      items_[i].ended = true;
      SendHeldErrorLocked();
    }
  }
  server_->router_metrics_->queue_depth.Set(static_cast<double>(server_->admission_->queued()));
  // Never cancel on the calling thread: it may be inside a run's own event delivery.
  for (const auto& run : runs) server_->dispatcher_->Post([run] { run->Cancel(); });
}

void ClientCall::OnEvent(size_t i, const proto::DecodeEvent& e) {
  HttpStreamPtr started;  // set when this event starts the stream
  {
    absl::MutexLock lock(&mu_);
    if (done_) return;
    completion_tokens_ += e.token_ids_size();
    if (!first_token_ && e.token_ids_size() > 0) {
      first_token_ = absl::Now();
      server_->router_metrics_->ttft.Observe(ToSec(*first_token_ - received_));
    }
    ResponseShaper& shaper = *items_[i].shaper;
    if (e.finished()) items_[i].finished = true;
    if (!stream_requested_) {
      shaper.Accumulate(e);
      return;
    }
    Item& item = items_[i];
    const proto::DecodeEvent* chunk = &e;
    if (item.request->sampling.stream_interval() > 1) {
      // SGLang's stream_interval: the first token at once, then a chunk per stream_interval
      // tokens, and the end.
      AppendEvent(e, &item.pending);
      item.pending_tokens += e.token_ids_size();
      if (item.streamed && !e.finished() &&
          item.pending_tokens < item.request->sampling.stream_interval()) {
        return;
      }
      chunk = &item.pending;
    }
    if (!stream_) {
      stream_ = responder_->StartStream(200, "text/event-stream", headers_);
      responder_.reset();
      started = stream_;
    }
    std::string bytes = shaper.StreamEvent(*chunk);
    // Kept before the client reads the end, so that its next request can name it.
    if (chunk->finished()) server_->StoreResponse(shaper);
    stream_->Write(std::move(bytes));
    item.streamed = true;
    if (chunk == &item.pending) {
      item.pending.Clear();
      item.pending_tokens = 0;
    }
  }
  if (started) {
    // Registered outside mu_: it runs at once when the client is already gone.
    std::weak_ptr<ClientCall> weak = weak_from_this();
    started->OnClose([weak] {
      if (auto self = weak.lock()) self->ClientGone();
    });
  }
}

void ClientCall::OnDone(size_t i, absl::Status status) {
  // The slot is free before the response's last bytes go out: a client that sends its next
  // request the moment it has read this response's end must find it free (the slot and the rid).
  ReleaseSlot(i);
  bool failed = false;
  std::vector<size_t> unpinned;  // siblings that waited for this leader: the ordinary way now
  {
    absl::MutexLock lock(&mu_);
    Item& item = items_[i];
    item.run = nullptr;
    item.ended = true;
    item.place.reset();
    if (done_) {
      SendHeldErrorLocked();
      return;
    }
    if (status.ok() && !stream_requested_) status = item.shaper->FinalStatus();
    if (!status.ok()) {
      FailLocked(status);
      failed = true;
    } else if (++succeeded_ == items_.size()) {
      CompleteLocked();
    } else if (item.has_siblings) {
      unpinned = TakeWaitingSiblingsLocked(i);
    }
  }
  if (failed) CancelOthers();
  for (size_t k : unpinned) StartItem(k, std::nullopt);
}

void ClientCall::FailLocked(const absl::Status& status, bool from_admission) {
  if (done_) return;
  done_ = true;
  ReleaseRids();
  if (stream_) {
    stream_->Write(items_.front().shaper->StreamError(status));
    Count(200, status);  // the status line went out as 200; the error is in the stream
    stream_->Finish();
  } else if (status.code() == absl::StatusCode::kCancelled) {
    Count(499, status);
  } else {
    held_error_ = status;
    held_from_admission_ = from_admission;
    SendHeldErrorLocked();
  }
}

void ClientCall::SendHeldErrorLocked() {
  if (!held_error_ && !held_abort_) return;
  for (const Item& item : items_) {
    if (!item.ended) return;
  }
  if (held_abort_) {
    held_abort_ = false;
    FinishAborted();
    return;
  }
  const absl::Status status = *std::move(held_error_);
  held_error_.reset();
  if (held_from_admission_ && status.code() == absl::StatusCode::kDeadlineExceeded) {
    // The admission queue's timeout: the client's 408, not a gateway timeout.
    HttpResponse r = HttpResponse::Error(408, std::string(status.message()));
    r.headers = headers_;
    if (responder_) {
      responder_->Send(std::move(r));
      responder_.reset();
    }
    Count(408, status);
  } else {
    SendError(status);
  }
}

void ClientCall::CompleteLocked() {
  done_ = true;
  ReleaseRids();
  const absl::Time now = absl::Now();
  server_->router_metrics_->ObserveDuration(route_, ToSec(now - received_));
  // A non-streamed response has one event: no per-token timing to report.
  if (stream_requested_ && first_token_ && completion_tokens_ > 1) {
    server_->router_metrics_->tpot.Observe(ToSec(now - *first_token_) /
                                           static_cast<double>(completion_tokens_ - 1));
  }
  std::vector<const ResponseShaper*> shapers;
  for (const Item& item : items_) shapers.push_back(item.shaper.get());
  if (stream_requested_) {
    // A stream with no event before its end (cannot normally happen): still well-formed.
    if (!stream_) {
      stream_ = responder_->StartStream(200, "text/event-stream", headers_);
      responder_.reset();
    }
    if (!single_) stream_->Write(ResponseShaper::BatchStreamUsage(shapers, n_));
    stream_->Write(items_.front().shaper->StreamDone());
    Count(200, absl::OkStatus());  // before the client can see the end
    stream_->Finish();
    return;
  }
  const double e2e = ToSec(now - received_);
  HttpResponse r = HttpResponse::Json(200, single_ ? items_.front().shaper->Body(e2e)
                                                   : ResponseShaper::BatchBody(shapers, n_, e2e));
  if (single_) server_->StoreResponse(*items_.front().shaper);
  r.headers = headers_;
  Count(200, absl::OkStatus());  // before the client can have the answer
  responder_->Send(std::move(r));
  responder_.reset();
}

void ClientCall::SendError(const absl::Status& status) {
  HttpResponse r = status.code() == absl::StatusCode::kDeadlineExceeded
                       ? HttpResponse::Error(504, std::string(status.message()))
                       : ErrorResponse(status);
  r.headers.insert(r.headers.end(), headers_.begin(), headers_.end());
  AddRetryAfter(&r);
  Count(r.status, status);  // before the client can have the answer
  if (responder_) {
    responder_->Send(std::move(r));
    responder_.reset();
  }
}

void ClientCall::Count(int status, const absl::Status& error) {
  server_->router_metrics_->CountRequest(route_, status);
  if (!error.ok()) server_->router_metrics_->CountError(route_, ErrorKind(error));
}

}  // namespace tandem::router

#include "router/router_server.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/http_tls.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/version.h"
#include "engine/model_config.h"
#include "nlohmann/json.hpp"
#include "router/api/response.h"
#include "router/api/tokenize.h"
#include "router/request_headers.h"

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

// The model's context length (max_position_embeddings of its config.json in `dir`); 0 with a
// warning when the config cannot be read, and the router then leaves the check to the workers.
int ReadContextLength(const std::string& dir) {
  absl::StatusOr<engine::ModelConfig> config =
      engine::ModelConfig::FromFile((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) {
    spdlog::warn("{}; prompts are checked against the context length by the workers only",
                 std::string(config.status().message()));
    return 0;
  }
  return static_cast<int>(
      std::min<int64_t>(config->max_position_embeddings, std::numeric_limits<int>::max()));
}

// Bytes of the longest token `tokenizer` can produce (special tokens included), for the early
// prompt-length bound (router/api/request.h).
int LongestTokenBytes(const engine::Tokenizer& tokenizer) {
  size_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.TokenBytes(id, /*skip_special_tokens=*/false).size());
  }
  return static_cast<int>(std::min<size_t>(longest, std::numeric_limits<int>::max()));
}

// Retry-After of a 429: a second, about what a short request takes to end and free its claim.
constexpr int kRetryAfterSecs = 1;

// What a request may claim of a worker's KV, for admission: its prompt and every token it may
// generate. Nothing is taken off for a prefix the worker may have cached (a plain worker's radix
// cache) or for an early stop: the estimate errs toward refusing, never toward preempting.
int64_t KvNeedTokens(const RoutedRequest& request) {
  return static_cast<int64_t>(request.input_ids.size()) +
         std::max<int64_t>(0, request.sampling.max_new_tokens());
}

// A 429 (the queue is full, or the workers' KV is) tells the client when to try again.
void AddRetryAfter(HttpResponse* r) {
  if (r->status == 429) r->headers.emplace_back("retry-after", std::to_string(kRetryAfterSecs));
}

}  // namespace

// One client inference request from admission to its last byte: one item per choice
// (RoutedBatch; one for most requests), each admitted (one slot each) and dispatched on its own,
// their answers merged into the one response. The first item that fails fails the request and
// cancels the others (queued, waiting for their leader or running); every item's slot is given
// back when its run ends.
//
// Shared prompts (n > 1, MaySharePrompt): a prompt's choice 0 is its leader, dispatched as any
// item; choices 1..n-1 are its siblings. An admitted sibling starts pinned to where the leader's
// current attempt sent its leg (StartOptions::share_with), waiting for that while the leader has
// no routed leg yet (it is queued for admission or between attempts); once the leader's run has
// ended, siblings still to start go the ordinary way.
// Shared by the HTTP callbacks and the dispatcher's callbacks; `mu_` guards the answer side.
class ClientCall : public std::enable_shared_from_this<ClientCall> {
 public:
  // The caller has claimed every item's rid (RouterServer::ClaimRid); the call releases them.
  ClientCall(RouterServer* server, std::string route, RoutedBatch batch, HttpResponder responder)
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
  ~ClientCall() { ReleaseRids(); }

  void Begin();
  // /abort_request: cancels the legs as ClientGone does (the room aborted on both workers) and
  // answers the client with the abort: a last stream chunk with finish_reason "abort", or a 503
  // saying so. Nothing happens once the call has finished. Not from inside an event delivery.
  void Abort();

 private:
  struct Item {
    std::shared_ptr<const RoutedRequest> request;
    std::unique_ptr<ResponseShaper> shaper;
    std::shared_ptr<DispatchRun> run;
    uint64_t ticket = 0;    // while it waits for admission
    bool ended = false;     // its run ended, or it will never run
    bool finished = false;  // its final event reached the shaper
    // Streamed with sampling.stream_interval > 1: the events not yet written, merged, and
    // whether a chunk went out already (the first token goes at once).
    proto::DecodeEvent pending;
    int pending_tokens = 0;
    bool streamed = false;
    // A sibling: its leader's index; -1 for a leader or an independent item.
    int leader = -1;
    bool waits_for_leader = false;  // admitted (holds a slot), not started: no routed leader leg
    // A leader with siblings: where its latest attempt's leg is (unset while it has none), and
    // the attempt the latest news was about (LegPlace ordering, dispatcher.h).
    bool has_siblings = false;
    std::optional<LegPlace> place;
    int place_attempt = -1;
  };

  static std::vector<int64_t> KvNeedsOf(const RoutedBatch& batch) {
    std::vector<int64_t> needs;
    for (const RoutedRequest& item : batch.items) needs.push_back(KvNeedTokens(item));
    return needs;
  }
  static std::vector<std::string> RidsOf(const RoutedBatch& batch) {
    std::vector<std::string> rids;
    for (const RoutedRequest& item : batch.items) rids.push_back(item.rid);
    return rids;
  }

  // Frees the rids for new requests. Called before the final answer goes out (a client may
  // reuse a rid the moment it has read the answer); idempotent.
  void ReleaseRids() {
    if (!rids_held_.exchange(false)) return;
    for (const std::string& rid : rids_) server_->ReleaseRid(rid);
  }
  // Gives back admitted item `i`'s slot and its KV claim.
  void ReleaseSlot(size_t i) {
    server_->router_metrics_->inflight.Decrement();
    server_->admission_->Release(kv_needs_[i]);
    server_->router_metrics_->queue_depth.Set(static_cast<double>(server_->admission_->queued()));
  }

  void Admitted(size_t i, absl::Status status);
  // Dispatches admitted item `i` (a sibling pinned to `share_with` when set).
  void StartItem(size_t i, std::optional<LegPlace> share_with);
  // Leader `i`'s run reported where its leg is (or that it is gone): starts its waiting siblings.
  void OnLeaderRouted(size_t i, const LegPlace& place);
  // Under mu_: the siblings of `leader` waiting for it, no longer waiting.
  std::vector<size_t> TakeWaitingSiblingsLocked(size_t leader) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClientGone();
  void OnEvent(size_t i, const proto::DecodeEvent& e);
  void OnDone(size_t i, absl::Status status);
  // Ends the request with `status` unless it already ended: the error goes to the client (in the
  // stream once one started; a 499 count when the client is gone), and every other item is
  // stopped (CancelOthers, after mu_ is released). `from_admission`: the admission queue's
  // answer (its timeout is a 408). A whole error answer waits until every item ended, so the
  // slots of the cancelled ones are free before it goes out (as a success's are).
  void FailLocked(const absl::Status& status, bool from_admission = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends the error FailLocked held, or Abort's answer, once every item ended.
  void SendHeldErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every item succeeded: the merged answer.
  void CompleteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Withdraws the queued items and cancels the running ones of a request that ended.
  void CancelOthers() ABSL_LOCKS_EXCLUDED(mu_);
  // Sends an error before anything was sent; counts it.
  void SendError(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The answer to an Abort(): an error answer when nothing was sent yet, else every open
  // choice's last chunk with finish_reason "abort" and the stream's end.
  void FinishAborted() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Count(int status, const absl::Status& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  RouterServer* const server_;
  const std::string route_;
  const absl::Time received_;
  const int n_;
  const bool single_;
  const bool stream_requested_;
  const std::vector<std::string> rids_;
  const std::vector<int64_t> kv_needs_;  // per item: its KV need for admission (KvNeedTokens)
  HttpHeaders headers_;                  // echoed on the response

  absl::Mutex mu_;
  std::vector<Item> items_ ABSL_GUARDED_BY(mu_);  // its size never changes after construction
  std::optional<HttpResponder> responder_ ABSL_GUARDED_BY(mu_);  // until answered
  HttpStreamPtr stream_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;  // answered, failed or the client is gone
  size_t succeeded_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<absl::Status> held_error_ ABSL_GUARDED_BY(mu_);
  bool held_from_admission_ ABSL_GUARDED_BY(mu_) = false;
  bool held_abort_ ABSL_GUARDED_BY(mu_) = false;  // /abort_request's answer, sent as an error is
  std::optional<absl::Time> first_token_ ABSL_GUARDED_BY(mu_);
  int64_t completion_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> rids_held_{true};
};

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
  if (cancel) server_->dispatcher_->RunAt(absl::Now(), [run] { run->Cancel(); });
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
  int code = 200;
  if (stream_requested_) {
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
    code = r.status;
    responder_->Send(std::move(r));
    responder_.reset();
  }
  // Not an error of the router's or a worker's: counted by status only.
  server_->router_metrics_->CountRequest(route_, code);
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
  for (const auto& run : runs) server_->dispatcher_->RunAt(absl::Now(), [run] { run->Cancel(); });
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
    stream_->Write(shaper.StreamEvent(*chunk));
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
  server_->router_metrics_->e2e.Observe(ToSec(now - received_));
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
    stream_->Finish();
    Count(200, absl::OkStatus());
    return;
  }
  const double e2e = ToSec(now - received_);
  HttpResponse r = HttpResponse::Json(200, single_ ? items_.front().shaper->Body(e2e)
                                                   : ResponseShaper::BatchBody(shapers, n_, e2e));
  r.headers = headers_;
  responder_->Send(std::move(r));
  responder_.reset();
  Count(200, absl::OkStatus());
}

void ClientCall::SendError(const absl::Status& status) {
  HttpResponse r = status.code() == absl::StatusCode::kDeadlineExceeded
                       ? HttpResponse::Error(504, std::string(status.message()))
                       : ErrorResponse(status);
  r.headers.insert(r.headers.end(), headers_.begin(), headers_.end());
  AddRetryAfter(&r);
  const int code = r.status;
  if (responder_) {
    responder_->Send(std::move(r));
    responder_.reset();
  }
  Count(code, status);
}

void ClientCall::Count(int status, const absl::Status& error) {
  server_->router_metrics_->CountRequest(route_, status);
  if (!error.ok()) server_->router_metrics_->CountError(ErrorKind(error));
}

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterOptions options) {
  RETURN_IF_ERROR(ValidateRouterOptions(&options));
  std::unique_ptr<RouterServer> server(new RouterServer(std::move(options)));
  RouterServer& s = *server;
  const RouterOptions& o = s.options_;
  s.router_metrics_ = std::make_unique<RouterMetrics>(&s.metrics_);

  const std::string tokenizer_dir = !o.tokenizer_path.empty() ? o.tokenizer_path : o.model_path;
  if (tokenizer_dir.empty()) {
    return absl::InvalidArgumentError(
        "the router needs the model directory for its tokenizer and chat template: give "
        "--model-path DIR (or --tokenizer-path DIR); nothing is downloaded");
  }
  auto tokenizer = engine::Tokenizer::FromModelDir(tokenizer_dir);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat(o.tokenizer_path.empty() ? "--model-path " : "--tokenizer-path ",
                     tokenizer_dir, ": ", tokenizer.status().message()));
  }
  s.tokenizer_ = std::move(*tokenizer);
  s.api_.tokenizer = s.tokenizer_.get();
  // The router refuses prompts over the context itself, before any leg is sent (workers would
  // refuse them too, but only after the router tokenized and shipped them).
  s.api_.context_length = ReadContextLength(!o.model_path.empty() ? o.model_path : tokenizer_dir);
  s.api_.max_token_bytes = LongestTokenBytes(*s.tokenizer_);
  s.api_.served_model_name = o.served_model_name;
  if (s.api_.served_model_name.empty()) {
    const std::string dir = !o.model_path.empty() ? o.model_path : o.tokenizer_path;
    std::filesystem::path p(dir);
    if (!p.has_filename()) p = p.parent_path();
    s.api_.served_model_name = p.filename().string();
  }
  s.created_ = absl::ToUnixSeconds(absl::Now());

  RegistryOptions ro;
  ASSIGN_OR_RETURN(ro.cluster_secret, LoadRouterClusterSecret(o));
  if (ro.cluster_secret.empty() && o.pd_disaggregation) {
    spdlog::warn(
        "no cluster secret (--cluster-secret-file): workers that require it will refuse "
        "this router's calls (UNAUTHENTICATED)");
  }
  ro.health_failure_threshold = o.health_failure_threshold;
  ro.health_success_threshold = o.health_success_threshold;
  ro.health_check_timeout_secs = o.health_check_timeout_secs;
  ro.health_check_interval_secs = o.health_check_interval_secs;
  ro.cb_failure_threshold = o.cb_failure_threshold;
  ro.cb_success_threshold = o.cb_success_threshold;
  ro.cb_timeout_duration_secs = o.cb_timeout_duration_secs;
  ro.cb_window_duration_secs = o.cb_window_duration_secs;
  ro.disable_circuit_breaker = o.disable_circuit_breaker;
  ro.worker_load_check_interval = o.worker_load_check_interval;
  s.registry_ = std::make_unique<WorkerRegistry>(ro, &s.metrics_);

  PolicyOptions po;
  po.cache_threshold = o.cache_threshold;
  po.balance_abs_threshold = o.balance_abs_threshold;
  po.balance_rel_threshold = o.balance_rel_threshold;
  po.max_tree_size = o.max_tree_size;
  po.eviction_interval_secs = o.eviction_interval_secs;
  ASSIGN_OR_RETURN(s.prefill_policy_, MakePolicy(o.prefill_policy, po, &s.metrics_),
                   "--prefill-policy: ");
  ASSIGN_OR_RETURN(s.decode_policy_,
                   MakePolicy(o.pd_disaggregation ? o.decode_policy : o.policy, po, &s.metrics_),
                   o.pd_disaggregation ? "--decode-policy: " : "--policy: ");

  if (o.pd_disaggregation) {
    for (const PrefillEndpoint& p : o.prefill) {
      RETURN_IF_ERROR(s.registry_->Add(p.url, WorkerType::kPrefill, p.bootstrap_port).status(),
                      "--prefill: ");
    }
    for (const std::string& url : o.decode_urls) {
      RETURN_IF_ERROR(s.registry_->Add(url, WorkerType::kDecode, std::nullopt).status(),
                      "--decode: ");
    }
  } else {
    for (const std::string& url : o.worker_urls) {
      RETURN_IF_ERROR(s.registry_->Add(url, WorkerType::kRegular, std::nullopt).status(),
                      "--worker-urls: ");
    }
  }

  AdmissionQueue::KvPoolFn kv_pool;
  if (!o.disable_kv_admission) {
    WorkerRegistry* registry = s.registry_.get();
    const WorkerType kv_holder = o.pd_disaggregation ? WorkerType::kDecode : WorkerType::kRegular;
    kv_pool = [registry, kv_holder] {
      KvPool pool;
      for (const WorkerPtr& worker : registry->Available(kv_holder)) {
        const proto::LoadReport load = worker->load();
        pool.total_blocks += std::max<int64_t>(0, load.total_kv_blocks());
        pool.block_size = std::max(pool.block_size, load.kv_block_size());
      }
      return pool;
    };
  }
  s.admission_ =
      std::make_unique<AdmissionQueue>(o.max_concurrent_requests, o.queue_size,
                                       absl::Seconds(o.queue_timeout_secs), std::move(kv_pool));
  DispatchOptions dop;
  dop.pd_mode = o.pd_disaggregation;
  dop.backoff.max_retries = o.disable_retries ? 0 : o.retry_max_retries;
  dop.backoff.initial_backoff_ms = o.retry_initial_backoff_ms;
  dop.backoff.max_backoff_ms = o.retry_max_backoff_ms;
  dop.backoff.multiplier = o.retry_backoff_multiplier;
  dop.backoff.jitter_factor = o.retry_jitter_factor;
  dop.request_timeout = absl::Seconds(o.request_timeout_secs);
  dop.stall_timeout = absl::Seconds(o.stall_timeout_secs);
  s.dispatcher_ = std::make_unique<Dispatcher>(dop, s.registry_.get(), s.prefill_policy_.get(),
                                               s.decode_policy_.get(), s.router_metrics_.get());
  s.registry_->Start();

  HttpServerOptions http;
  http.host = o.host;
  http.port = static_cast<uint16_t>(o.port);
  http.threads = o.http_threads;
  http.max_body_bytes = static_cast<size_t>(o.max_payload_size);
  http.read_timeout = std::chrono::seconds(o.http_read_timeout_secs);
  http.idle_timeout = std::chrono::seconds(o.http_idle_timeout_secs);
  http.max_connections = o.http_max_connections;
  http.tls_cert_file = o.tls_cert_file;
  http.tls_key_file = o.tls_key_file;
  if (!o.tls_cert_file.empty()) {
    RETURN_IF_ERROR(CheckTlsFiles(o.tls_cert_file, o.tls_key_file),
                    "--tls-cert-file/--tls-key-file: ");
  }
  s.http_ = std::make_unique<HttpServer>(http);
  s.AddRoutes();
  if (o.disable_admin_auth) {
    spdlog::warn(
        "--disable-admin-auth: the admin API (add/remove/drain workers, flush cache) takes no "
        "key; anyone who can reach {}:{} can point this router at a worker of their own and "
        "receive its clients' prompts",
        o.host, o.port);
  } else if (o.admin_key.empty()) {
    spdlog::info(
        "no admin key: the admin API answers 403 (give --admin-key-file to use it, e.g. with "
        "tandemctl)");
  }
  RETURN_IF_ERROR(s.http_->Start(), "--host/--port: ");
  spdlog::info(
      "tandem-router {} on {}:{} ({} mode, {} prefill, {} decode, {} plain workers; policy "
      "{}/{}; model '{}')",
      kTandemVersion, o.host, s.http_->port(), o.pd_disaggregation ? "pd" : "plain",
      o.prefill.size(), o.decode_urls.size(), o.worker_urls.size(), o.prefill_policy,
      o.decode_policy, s.api_.served_model_name);
  return server;
}

RouterServer::~RouterServer() { Shutdown(); }

void RouterServer::Shutdown() {
  if (http_) http_->Stop();
  if (registry_) registry_->Stop();
}

void RouterServer::Answer(const std::string& route, HttpResponder& responder,
                          HttpResponse response) {
  router_metrics_->CountRequest(route, response.status);
  responder.Send(std::move(response));
}

HttpHandler RouterServer::Guarded(const std::string& route, const std::string* key,
                                  const std::string& what, HttpHandler handler) {
  return [this, route, key, what, handler = std::move(handler)](HttpRequest request,
                                                                HttpResponder responder) {
    if (key != nullptr) {
      if (absl::Status s = CheckBearer(request, *key, what); !s.ok()) {
        router_metrics_->CountError("unauthorized");
        Answer(route, responder, ErrorResponse(s));
        return;
      }
    }
    handler(std::move(request), std::move(responder));
  };
}

HttpHandler RouterServer::AdminDisabled(const std::string& route) {
  return [this, route](HttpRequest, HttpResponder responder) {
    router_metrics_->CountError("unauthorized");
    Answer(route, responder,
           ErrorResponse(absl::PermissionDeniedError(
               "the admin API is disabled: this router was started without an admin key; start "
               "it with --admin-key-file FILE (or --admin-key KEY) and send 'Authorization: "
               "Bearer KEY', or pass --disable-admin-auth to leave the admin API open to anyone "
               "who can reach this port")));
  };
}

void RouterServer::HandleInference(const std::string& route, ApiKind kind, HttpRequest request,
                                   HttpResponder responder) {
  auto parsed = ParseBatch(kind, request.body, api_);
  if (!parsed.ok()) {
    router_metrics_->CountError("bad_request");
    HttpResponse r = ErrorResponse(parsed.status());
    Answer(route, responder, std::move(r));
    return;
  }
  RoutedBatch batch = std::move(*parsed);
  const std::vector<std::string>& id_headers =
      options_.request_id_headers.empty() ? DefaultRequestIdHeaders() : options_.request_id_headers;
  absl::StatusOr<std::optional<std::string>> id = ClientRequestId(request, id_headers);
  if (!id.ok()) {
    router_metrics_->CountError("bad_request");
    Answer(route, responder, ErrorResponse(id.status()));
    return;
  }
  if (id->has_value()) SetBatchRid(**id, &batch);
  // Workers key their state by rid: every item's must be free.
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (ClaimRid(batch.items[i].rid)) continue;
    for (size_t k = 0; k < i; ++k) ReleaseRid(batch.items[k].rid);
    const absl::Status duplicate = absl::AlreadyExistsError(absl::StrCat(
        "rid '", batch.items[i].rid,
        "' is already used by a request in progress; give each request its own rid (or "
        "request-id header)"));
    router_metrics_->CountError("bad_request");
    Answer(route, responder, ErrorResponse(duplicate));
    return;
  }
  std::vector<std::string> rids;
  for (const RoutedRequest& item : batch.items) rids.push_back(item.rid);
  auto call = std::make_shared<ClientCall>(this, route, std::move(batch), std::move(responder));
  for (const std::string& rid : rids) BindRid(rid, call);
  call->Begin();
}

bool RouterServer::ClaimRid(const std::string& rid) {
  absl::MutexLock lock(&rids_mu_);
  return live_rids_.try_emplace(rid).second;
}

void RouterServer::BindRid(const std::string& rid, std::weak_ptr<ClientCall> call) {
  absl::MutexLock lock(&rids_mu_);
  auto it = live_rids_.find(rid);
  if (it != live_rids_.end()) it->second = std::move(call);
}

size_t RouterServer::AbortCalls(const std::string* rid) {
  std::vector<std::shared_ptr<ClientCall>> calls;
  {
    absl::MutexLock lock(&rids_mu_);
    if (rid != nullptr) {
      auto it = live_rids_.find(*rid);
      if (it != live_rids_.end()) {
        if (auto call = it->second.lock()) calls.push_back(std::move(call));
      }
    } else {
      for (auto& [id, weak] : live_rids_) {
        if (auto call = weak.lock()) calls.push_back(std::move(call));
      }
    }
  }
  // A batch holds one rid per choice: each call once.
  std::sort(calls.begin(), calls.end());
  calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
  // Outside rids_mu_: an abort may end the call, which releases its rid.
  for (const auto& call : calls) call->Abort();
  return calls.size();
}

void RouterServer::ReleaseRid(const std::string& rid) {
  absl::MutexLock lock(&rids_mu_);
  live_rids_.erase(rid);
}

void RouterServer::HandleHealthGenerate(HttpResponder responder) {
  // A real leg costs the workers what a request does: it waits for a slot like one.
  auto holder = std::make_shared<HttpResponder>(std::move(responder));
  admission_->Acquire([this, holder](absl::Status admitted) {
    if (!admitted.ok()) {
      router_metrics_->CountError(ErrorKind(admitted));
      HttpResponse r = ErrorResponse(admitted);
      AddRetryAfter(&r);
      Answer("/health_generate", *holder, std::move(r));
      return;
    }
    StartHealthGenerate(holder);
  });
}

void RouterServer::StartHealthGenerate(const std::shared_ptr<HttpResponder>& holder) {
  auto request = std::make_shared<RoutedRequest>();
  request->rid = absl::StrCat("health-generate-", NewBootstrapRoom());
  request->input_ids = tokenizer_->Encode("ping");
  if (request->input_ids.empty()) request->input_ids.push_back(0);
  request->sampling.set_max_new_tokens(1);
  request->sampling.set_temperature(0);
  request->sampling.set_skip_special_tokens(true);
  dispatcher_->Start(
      request, [](const proto::DecodeEvent&) {},
      [this, holder](absl::Status s) {
        admission_->Release();
        if (s.ok()) {
          Answer("/health_generate", *holder, HttpResponse::Json(200, R"({"status":"ok"})"));
        } else {
          Answer("/health_generate", *holder,
                 HttpResponse::Error(503, absl::StrCat("health_generate failed: ", s.message())));
        }
      });
}

void RouterServer::AddRoutes() {
  HttpServer& h = *http_;
  const std::string* api_key = options_.api_key.empty() ? nullptr : &options_.api_key;
  const std::string* admin_key = options_.admin_key.empty() ? nullptr : &options_.admin_key;
  auto inference = [this, api_key](const std::string& method, const std::string& path,
                                   ApiKind kind) {
    http_->Handle(method, path,
                  Guarded(path, api_key, "API key",
                          [this, path, kind](HttpRequest r, HttpResponder responder) {
                            HandleInference(path, kind, std::move(r), std::move(responder));
                          }));
  };
  // SGLang serves /generate on PUT as well as POST.
  inference("POST", "/generate", ApiKind::kGenerate);
  inference("PUT", "/generate", ApiKind::kGenerate);
  inference("POST", "/v1/completions", ApiKind::kCompletions);
  inference("POST", "/v1/chat/completions", ApiKind::kChatCompletions);
  h.Handle("POST", "/abort_request",
           [this](HttpRequest q, HttpResponder r) { HandleAbortRequest(q, std::move(r)); });
  h.Handle("GET", "/v1/models",
           Guarded("/v1/models", api_key, "API key", [this](HttpRequest, HttpResponder r) {
             Answer("/v1/models", r,
                    HttpResponse::Json(200, ModelsBody(api_.served_model_name, created_)));
           }));

  // SGLang's tokenizer routes (router/api/tokenize.h): the router's own tokenizer answers.
  for (const char* path : {"/tokenize", "/v1/tokenize", "/detokenize", "/v1/detokenize"}) {
    const std::string route = path;
    const bool detokenize = route.find("detokenize") != std::string::npos;
    h.Handle("POST", route,
             Guarded(route, api_key, "API key",
                     [this, route, detokenize](HttpRequest q, HttpResponder r) {
                       absl::StatusOr<std::string> body =
                           detokenize ? DetokenizeBody(q.body, *tokenizer_)
                                      : TokenizeBody(q.body, *tokenizer_, api_.context_length);
                       if (!body.ok()) router_metrics_->CountError("bad_request");
                       Answer(route, r,
                              body.ok() ? HttpResponse::Json(200, *std::move(body))
                                        : ErrorResponse(body.status()));
                     }));
  }

  // OpenAI's "retrieve model" for the one model served (any other name is the 404 of an unknown
  // path): the card /v1/models lists.
  const std::string model_path = "/v1/models/" + api_.served_model_name;
  h.Handle(
      "GET", model_path,
      Guarded(model_path, api_key, "API key", [this, model_path](HttpRequest, HttpResponder r) {
        const nlohmann::json list =
            nlohmann::json::parse(ModelsBody(api_.served_model_name, created_));
        Answer(model_path, r, HttpResponse::Json(200, list["data"][0].dump()));
      }));

  h.Handle("GET", "/health", [this](HttpRequest, HttpResponder r) {
    absl::Status s = dispatcher_->CanRoute();
    Answer("/health", r,
           s.ok() ? HttpResponse::Json(200, R"({"status":"ok"})")
                  : HttpResponse::Error(503, std::string(s.message())));
  });
  // sgl-router's liveness: the process answers; says nothing about the workers (/health does).
  h.Handle("GET", "/liveness", [this](HttpRequest, HttpResponder r) {
    Answer("/liveness", r, HttpResponse::Text(200, "OK"));
  });
  h.Handle("GET", "/readiness", [this](HttpRequest, HttpResponder r) {
    absl::Status s = dispatcher_->CanRoute();
    nlohmann::json j;
    j["ready"] = s.ok();
    int64_t healthy = 0, total = 0;
    for (const WorkerState& w : registry_->Snapshot()) {
      ++total;
      healthy += w.healthy ? 1 : 0;
    }
    j["healthy_workers"] = healthy;
    j["total_workers"] = total;
    if (!s.ok()) j["error"] = std::string(s.message());
    Answer("/readiness", r, HttpResponse::Json(s.ok() ? 200 : 503, j.dump()));
  });
  h.Handle("GET", "/health_generate",
           Guarded("/health_generate", api_key, "API key",
                   [this](HttpRequest, HttpResponder r) { HandleHealthGenerate(std::move(r)); }));
  h.Handle("GET", "/metrics", [this](HttpRequest, HttpResponder r) {
    HttpResponse resp = HttpResponse::Text(200, metrics_.Render());
    resp.content_type = "text/plain; version=0.0.4";
    r.Send(std::move(resp));
  });

  // /server_info is the newer SGLang's name for it.
  for (const char* path : {"/get_server_info", "/server_info"}) {
    const std::string route = path;
    h.Handle("GET", route,
             Guarded(route, api_key, "API key", [this, route](HttpRequest, HttpResponder r) {
               HandleServerInfo(std::move(r), route);
             }));
  }
  h.Handle("GET", "/get_model_info",
           Guarded("/get_model_info", api_key, "API key",
                   [this](HttpRequest, HttpResponder r) { HandleModelInfo(std::move(r)); }));
  h.Handle("GET", "/get_load",
           Guarded("/get_load", api_key, "API key",
                   [this](HttpRequest, HttpResponder r) { HandleGetLoad(std::move(r)); }));
  h.Handle("GET", "/version",
           Guarded("/version", api_key, "API key", [this](HttpRequest, HttpResponder r) {
             Answer("/version", r,
                    HttpResponse::Json(200, nlohmann::json({{"version", kTandemVersion}}).dump()));
           }));
  h.Handle("GET", "/get_loads",
           Guarded("/get_loads", api_key, "API key",
                   [this](HttpRequest, HttpResponder r) { HandleGetLoads(std::move(r)); }));

  const bool admin_closed = admin_key == nullptr && !options_.disable_admin_auth;
  auto admin = [this, admin_key, admin_closed](const std::string& method, const std::string& path,
                                               HttpHandler handler) {
    http_->Handle(method, path,
                  admin_closed ? AdminDisabled(path)
                               : Guarded(path, admin_key, "admin key", std::move(handler)));
  };
  // SGLang serves GET too; both keep the admin key (a flush reaches every worker).
  admin("POST", "/flush_cache",
        [this](HttpRequest, HttpResponder r) { HandleFlushCache(std::move(r)); });
  admin("GET", "/flush_cache",
        [this](HttpRequest, HttpResponder r) { HandleFlushCache(std::move(r)); });
  admin("GET", "/workers",
        [this](HttpRequest, HttpResponder r) { HandleListWorkers(std::move(r), false); });
  admin("GET", "/list_workers",
        [this](HttpRequest, HttpResponder r) { HandleListWorkers(std::move(r), true); });
  admin("POST", "/workers",
        [this](HttpRequest q, HttpResponder r) { HandleAddWorker(q, std::move(r), false); });
  admin("POST", "/add_worker",
        [this](HttpRequest q, HttpResponder r) { HandleAddWorker(q, std::move(r), true); });
  admin("DELETE", "/workers", [this](HttpRequest q, HttpResponder r) {
    HandleRemoveWorker(q, std::move(r), q.body.empty());
  });
  admin("POST", "/remove_worker",
        [this](HttpRequest q, HttpResponder r) { HandleRemoveWorker(q, std::move(r), true); });
  admin("POST", "/workers/drain",
        [this](HttpRequest q, HttpResponder r) { HandleDrainWorker(q, std::move(r)); });
}

}  // namespace tandem::router

// ClientCall: one client inference request inside tandem-router, from admission to the last byte
// of its answer (the items of a batch, shared prompts, aborts, the merged response). Internal to
// the router module: RouterServer (router_server.cc) creates one per accepted request, and
// ClientCall, its friend, takes admission slots, rids, the dispatcher and metrics from it.
#ifndef TANDEM_ROUTER_CLIENT_CALL_H_
#define TANDEM_ROUTER_CLIENT_CALL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/http_server.h"
#include "proto/worker.pb.h"
#include "router/api/request.h"
#include "router/api/response.h"
#include "router/dispatcher.h"

namespace tandem::router {

class RouterServer;

// The error kind label of tandem_router_errors_total for a failed request.
std::string ErrorKind(const absl::Status& s);

// Adds Retry-After to a 429 (the queue is full, or the workers' KV is): when to try again.
void AddRetryAfter(HttpResponse* r);

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
  ClientCall(RouterServer* server, std::string route, RoutedBatch batch, HttpResponder responder);
  ~ClientCall();

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

  static std::vector<int64_t> KvNeedsOf(const RoutedBatch& batch);
  static std::vector<std::string> RidsOf(const RoutedBatch& batch) {
    std::vector<std::string> rids;
    for (const RoutedRequest& item : batch.items) rids.push_back(item.rid);
    return rids;
  }

  // Frees the rids for new requests. Called before the final answer goes out (a client may
  // reuse a rid the moment it has read the answer); idempotent.
  void ReleaseRids();
  // Gives back admitted item `i`'s slot and its KV claim.
  void ReleaseSlot(size_t i);

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

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_CLIENT_CALL_H_

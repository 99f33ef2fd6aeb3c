// WorkerLink: the router's end of one link to a worker, a session in proto/worker.proto's terms,
// carrying the prefill and decode legs of many requests on rpc Session or on the worker's
// session socket; LegStream: one leg on it (a Leg, router/workers/leg.h). Used by WorkerClient,
// which opens a link on first use and again after one ends:
//
//   auto link = OpenSocketLink(host, session_port, url, secret, audience, on_connect_failed);
//   // or OpenGrpcLink(channel, stub, url)
//   std::shared_ptr<LegStream> call = NewDecodeLegStream(on_event, done);
//   if (!link->Send(call, &message, bytes, deadline)) { /* closing: open another */ }
//   call->Cancel();                        // any time, any thread
//
// Calls are written in batches (at most kSessionBatchBytes, a larger call alone): what is sent
// while a write is in flight goes out with the next one. Replies are matched to calls by id. A
// call's deadline and cancellation are enforced here, on a process-wide timer thread: the call
// ends DEADLINE_EXCEEDED / CANCELLED at once and a cancel is sent to the worker. A link that
// ends (the worker closed it, the connection broke, or it was retired and its last call ended)
// fails its live calls with its status (UNAVAILABLE when the worker ended it cleanly).
//
// Thread-safety: thread-safe. Callbacks run on the transport's threads (gRPC's, or the session
// socket's I/O thread) or the timer thread and must not block; a call's events and `done` never
// overlap, and none follows `done`.
#ifndef TANDEM_ROUTER_WORKERS_WORKER_SESSION_H_
#define TANDEM_ROUTER_WORKERS_WORKER_SESSION_H_

#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/timer_queue.h"
#include "proto/worker.grpc.pb.h"
#include "proto/worker.pb.h"
#include "router/workers/leg.h"

namespace tandem::router {

// A session message holds several calls up to this size; a single larger call goes alone.
inline constexpr size_t kSessionBatchBytes = 1 << 20;
// The largest call a worker accepts (its 64 MiB message limit, less framing slack).
inline constexpr size_t kMaxSessionCallBytes = (64 << 20) - 1024;

class WorkerLink;

// The timer thread of session calls: deadlines, and the `done` of cancelled calls. Never
// destroyed, so that no exit-time destructor races a gRPC thread still completing a call.
TimerQueue& LegTimers();

// The one mapping of statuses into legs: a wire status code (gRPC's numbering, which
// absl::StatusCode shares) with its message; a code outside 1..16 becomes `invalid` (with the
// code named in the message).
absl::Status LegStatusFromWire(int code, std::string message, absl::StatusCode invalid);
// A gRPC stream's end as a leg's status (the same codes and message).
absl::Status LegStatusFromGrpc(const grpc::Status& status);

// One leg on a WorkerLink (router/workers/leg.h for the contract and its states). Replies
// arrive in order from the session's reader; a failure (Cancel, deadline, the session ending)
// may come from any thread. The state moves under mu_; callbacks run outside it: a failure that
// arrives while an event is being delivered is handed to the delivering thread, which ends the
// leg after the event, so nothing overtakes or follows `done`.
class LegStream : public Leg {
 public:
  // `answer`: the reply body that carries this kind of leg's results (anything else but an
  // error ends it INTERNAL); `kind`: "decode" or "prefill", for that message.
  LegStream(proto::SessionReply::BodyCase answer, const char* kind)
      : answer_(answer), kind_(kind) {}
  void Cancel() override;
  LegState state() const override;
  // The reader thread: one reply for this call; ends the call when the reply does.
  void OnReply(const proto::SessionReply& reply) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call with `status` unless it has ended. Any thread.
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // Fail(status) on the timer thread.
  static void FailLater(std::shared_ptr<LegStream> call, absl::Status status);
  // Whether `reply` is this call's last: anything but an unfinished event of a leg whose answer
  // is events (a prefill leg sent an event ends INTERNAL, as OnReply does). Any thread.
  bool Ends(const proto::SessionReply& reply) const;

  // Set by WorkerLink::Send before the call is written.
  void Attach(std::weak_ptr<WorkerLink> link, uint64_t id);
  void SetTimer(TimerQueue::Id timer) ABSL_LOCKS_EXCLUDED(mu_);

 protected:
  // Passes on an event that is not the leg's last. No lock held.
  virtual void DeliverEvent(const proto::SessionReply& reply) = 0;
  // Ends the leg: `status`, and when it is OK the reply that answered it. No lock held; runs
  // once.
  virtual void Finish(absl::Status status, const proto::SessionReply* answer) = 0;

 private:
  // Under mu_: enters kEnded; returns the deadline timer to cancel (0: none).
  TimerQueue::Id EndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const proto::SessionReply::BodyCase answer_;
  const char* const kind_;
  mutable absl::Mutex mu_;
  LegState state_ ABSL_GUARDED_BY(mu_) = LegState::kSent;
  // An event is being delivered (outside mu_); a failure meanwhile waits in failed_.
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  TimerQueue::Id timer_ ABSL_GUARDED_BY(mu_) = 0;  // the deadline
  // Written once by Attach, before the call can be cancelled or answered.
  std::weak_ptr<WorkerLink> link_;
  uint64_t id_ = 0;
};

// A decode leg: `on_event` for each event, then `done` once.
std::shared_ptr<LegStream> NewDecodeLegStream(LegEventFn on_event, LegDoneFn done);
// A prefill leg: `done` once, with the answer when the status is OK.
std::shared_ptr<LegStream> NewPrefillLegStream(PrefillDoneFn done);

// The router's end of one session with a worker: the calls live on it, the batching of their
// writes, and the matching of replies to calls. Its transport (rpc Session, or the session
// socket) is a subclass. The WorkerClient holds the current one; the transport keeps it alive
// while its stream or connection runs.
class WorkerLink : public std::enable_shared_from_this<WorkerLink> {
 public:
  virtual ~WorkerLink() = default;
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  // False when the session takes no more calls (the caller opens another); `message` is then
  // untouched. Otherwise `call` is live and `message` sent (moved from). `bytes`: its
  // ByteSizeLong(), which the caller has already computed.
  bool Send(const std::shared_ptr<LegStream>& call, proto::SessionCall* message, size_t bytes,
            Deadline deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends call `id` with `status` (nothing if it has ended) and tells the worker to abort the
  // leg. With `post` the call's `done` runs on the timer thread, else here.
  void Cancel(uint64_t id, absl::Status status, bool post) ABSL_LOCKS_EXCLUDED(mu_);
  // The WorkerClient let go: the session ends once its last call has.
  void Retire();
  bool closing();

 protected:
  // `hold_writes`: nothing is written until ReleaseWrites() (a handshake comes first).
  WorkerLink(std::string url, bool hold_writes) : url_(std::move(url)), writing_(hold_writes) {}

  // Starts writing `batch` (owned by the session until WriteDone); any thread, one at a time.
  virtual void WriteBatch(const proto::SessionUp* batch) = 0;
  // Ends the stream or connection; the transport then fails what is left (FailAll). Any thread.
  virtual void CloseTransport() = 0;

  // The write WriteBatch started is over (`ok`: it was sent); starts the next batch, if any.
  void WriteDone(bool ok);
  // The handshake is over: the calls queued meanwhile are written.
  void ReleaseWrites();
  // Passes each reply to its call; closes the transport when a retired session has no calls.
  void OnReplies(const proto::SessionDown& down);
  // The stream cannot carry writes or replies any more: no new calls.
  void Broken();
  // The stream has ended: fails every call still live with `status`, or UNAVAILABLE when it is
  // OK (the worker ended the session cleanly).
  void FailAll(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string url_;

 private:
  // Under mu_: when no write is in flight, moves the next batch of pending calls into
  // in_flight_; true when the caller must WriteBatch it.
  bool TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The write in flight (while writing_): filled under mu_ by TakeBatchLocked, then owned by the
  // one writer until WriteDone.
  proto::SessionUp in_flight_;
  absl::Mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<LegStream>> calls_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<size_t, proto::SessionCall>> pending_ ABSL_GUARDED_BY(mu_);  // bytes, call
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool writing_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // takes no new calls
  bool broken_ ABSL_GUARDED_BY(mu_) = false;   // the stream cannot carry writes any more
  bool retired_ ABSL_GUARDED_BY(mu_) = false;  // the WorkerClient let go
};

// A session on rpc Session over `channel`.
std::shared_ptr<WorkerLink> OpenGrpcLink(std::shared_ptr<grpc::Channel> channel,
                                         proto::Worker::Stub* stub, const std::string& url);

// A session on the worker's session socket (proto/worker.proto) at host:port, answering its
// challenge with a token made from `cluster_secret` for the worker whose instance id is
// `audience` (no token when either is empty). Connects, reads and
// completes partial writes on one process-wide I/O thread, so replies (and the callbacks they
// run) arrive there; a batch is written from the thread that queued it when the socket takes it
// whole. A connection not established within 5 s, or refused, fails the session's calls
// UNAVAILABLE naming the address, and `on_connect_failed` runs (any thread) with that status.
// A peer whose host vanished fails the calls within about 25 s (SetUpClusterSocket).
std::shared_ptr<WorkerLink> OpenSocketLink(
    const std::string& host, int port, const std::string& url, const std::string& cluster_secret,
    const std::string& audience, std::function<void(const absl::Status&)> on_connect_failed);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_WORKER_SESSION_H_

// Leg: one request's prefill or decode leg on one worker, whatever carries it; WorkerLegs: a
// worker's end of the legs, which starts them and aborts rooms. The Dispatcher sees only these.
//
//   LegPtr leg = worker->legs().StartDecode(request, deadline,
//       [](const proto::DecodeEvent& e) { ... },   // each event, in order
//       [](absl::Status s) { ... });               // exactly once, last
//   leg->Cancel();                                 // any time, any thread
//
// Implementations: WorkerClient (router/workers/worker_client.h), which carries legs as
// LegStreams on a WorkerLink to the worker, over rpc Session or the worker's session socket
// (router/workers/worker_session.h); tests use in-memory ones.
//
// A leg's state (LegState):
//
//   kSent --an event that is not the last (decode legs)--> kStreaming
//   kSent | kStreaming --its answer or last event, an error, its deadline, Cancel()--> kEnded
//
// kEnded is final: `done` runs exactly once, on entering it, and nothing is delivered after.
// Statuses are the worker's (the wire carries gRPC's codes, which absl::StatusCode shares) or
// the transport's: UNAVAILABLE when the worker or the link to it went away, DEADLINE_EXCEEDED at
// the deadline, CANCELLED after Cancel(), RESOURCE_EXHAUSTED for a leg over the workers' message
// limit (never sent), INTERNAL for an answer that makes no sense.
//
// Callbacks run on the transport's threads or a timer thread, never inside StartPrefill/
// StartDecode and never while the leg holds a lock; they must not block. A leg's events and its
// `done` never overlap.
//
// Thread-safety: thread-safe. Ownership: a Leg is shared by its caller and its transport, which
// keeps it alive until `done` ran; dropping the caller's reference does not cancel it.
#ifndef TANDEM_ROUTER_WORKERS_LEG_H_
#define TANDEM_ROUTER_WORKERS_LEG_H_

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "common/clock.h"
#include "proto/worker.pb.h"

namespace tandem::router {

enum class LegState { kSent, kStreaming, kEnded };

// "sent" | "streaming" | "ended".
const char* LegStateName(LegState state);

class Leg {
 public:
  virtual ~Leg() = default;
  // Ends the leg CANCELLED unless it already ended, and tells the worker to drop it. Safe at any
  // time, from any thread, any number of times; `done` runs on another thread's frame.
  virtual void Cancel() = 0;
  virtual LegState state() const = 0;
};
using LegPtr = std::shared_ptr<Leg>;

using PrefillDoneFn = std::function<void(absl::Status, proto::PrefillResponse)>;
using LegEventFn = std::function<void(const proto::DecodeEvent&)>;
using LegDoneFn = std::function<void(absl::Status)>;

class WorkerLegs {
 public:
  virtual ~WorkerLegs() = default;

  // The prefill leg: `done` once, with the answer when the status is OK.
  virtual LegPtr StartPrefill(proto::PrefillRequest request, Deadline deadline,
                              PrefillDoneFn done) = 0;
  // The decode leg: `on_event` for each event (the last has finished set), then `done` once.
  virtual LegPtr StartDecode(proto::DecodeRequest request, Deadline deadline, LegEventFn on_event,
                             LegDoneFn done) = 0;
  // Asks the worker to drop the room or rid `request` names, whatever state it is in; best
  // effort, nothing reports back.
  virtual void AbortLegs(proto::AbortRequest request, Deadline deadline) = 0;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_LEG_H_

// PrefillLegMachine: the failure rules of one prefill leg (worker/handoff/prefill_handoff.h), as
// a state machine that does no I/O. PrefillHandoff feeds it every event of the leg and carries out
// the actions it returns, after releasing its lock; unit tests drive it with a fake clock.
//
// States and transitions (anything not listed leaves the state as it is and returns no action,
// so duplicate and late events are ignored):
//
//   kAwaitingRoom --RoomRegistered--> kPrefilling        start_prefill
//   kPrefilling   --FirstToken / WriteDone(ok), once the first token is known and no write is
//                   pending--> kNotifying                 send_notice
//   kNotifying    --NoticeDelivered(ok)--> kSucceeded    finish
//   kPrefillOnly  --PrefillOnlyDone--> kSucceeded         finish
//   any live state --Failure, WriteDone(error), NoticeDelivered(error), Tick past a deadline-->
//                   kFailed                               fail (+ cancel, notify_decode)
//
// Deadlines (monotonic): in kAwaitingRoom, --bootstrap-timeout from the leg's arrival; from the
// first LayerComputed on, --transfer-timeout (kPrefilling and kNotifying). kSucceeded and kFailed
// are terminal: exactly one event leads to them, so the leg is answered exactly once.
//
// Not thread-safe: the owner serialises Apply (PrefillHandoff holds the leg's mutex).
#ifndef TANDEM_WORKER_HANDOFF_PREFILL_LEG_H_
#define TANDEM_WORKER_HANDOFF_PREFILL_LEG_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::worker {

enum class PrefillLegState {
  kAwaitingRoom,  // the decode worker has not registered the room yet
  kPrefillOnly,   // max_new_tokens 0: computing the prompt, no room and no decode leg
  kPrefilling,    // computing the prompt and writing each layer's K/V into the room
  kNotifying,     // every write acknowledged; the CompletionNotice is on its way
  kSucceeded,     // the notice was delivered (or the prefill-only leg ended): answered OK
  kFailed,        // given up: answered with the error
};
const char* PrefillLegStateName(PrefillLegState state);

struct PrefillLegEvent {
  enum class Kind {
    kRoomRegistered,   // decode_id: the decode worker that registered the room
    kLayerComputed,    // now: a layer's K/V is ready (starts the transfer deadline)
    kWriteStarting,    // a write is about to be submitted (counted as pending)
    kWriteSubmitted,   // batch: the transfer engine took it
    kWriteDone,        // batch, status: acknowledged (OK) or failed/timed out/cancelled
    kFirstToken,       // the prefill computed the first token
    kPrefillOnlyDone,  // a prefill-only leg's request ended normally
    kNoticeDelivered,  // status: the CompletionNotice's delivery
    kFailure,          // status: the engine, the router, the decode worker or shutdown
    kTick,             // now: check the deadlines
  };
  Kind kind;
  std::string decode_id;
  kv::BatchId batch = 0;
  absl::Status status;
  MonoClock::time_point now;
};

// What the owner does after Apply, in this order: cancel the batches, send the failure notice,
// abort the engine request and answer (fail); or start / notify / release and answer.
struct PrefillLegActions {
  bool start_prefill = false;        // submit the engine request for the prompt
  bool send_notice = false;          // send the CompletionNotice(ok) through the transfer engine
  bool finish = false;               // release the held blocks and answer with the first token
  std::optional<absl::Status> fail;  // answer with this error (and abort the engine request)
  std::vector<kv::BatchId> cancel;   // writes to cancel
  bool notify_decode = false;        // with fail: tell the decode worker (CompletionNotice !ok)

  bool empty() const {
    return !start_prefill && !send_notice && !finish && !fail && cancel.empty();
  }
};

class PrefillLegMachine {
 public:
  // `room` names the leg in messages. A leg with a room starts in kAwaitingRoom, one without
  // (prefill-only) in kPrefillOnly.
  PrefillLegMachine(uint64_t room, bool prefill_only, Deadline bootstrap_deadline,
                    absl::Duration bootstrap_timeout, absl::Duration transfer_timeout);

  PrefillLegActions Apply(const PrefillLegEvent& event);

  PrefillLegState state() const { return state_; }
  bool terminal() const {
    return state_ == PrefillLegState::kSucceeded || state_ == PrefillLegState::kFailed;
  }
  // Whether a computed layer's K/V should be written now.
  bool writing() const { return state_ == PrefillLegState::kPrefilling; }
  int pending_writes() const { return pending_; }
  // The writes' and the notice's deadline: Never() until the first LayerComputed.
  Deadline transfer_deadline() const { return transfer_deadline_; }

 private:
  PrefillLegActions Fail(absl::Status status);
  PrefillLegActions MaybeNotify();

  const uint64_t room_;
  const absl::Duration bootstrap_timeout_;
  const absl::Duration transfer_timeout_;
  PrefillLegState state_;
  Deadline bootstrap_deadline_;
  Deadline transfer_deadline_ = Deadline::Never();  // from the first computed layer
  std::string decode_id_;
  bool first_token_ = false;
  int pending_ = 0;               // writes started and not yet done
  std::set<kv::BatchId> writes_;  // submitted and not yet done (cancelled on failure)
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_PREFILL_LEG_H_

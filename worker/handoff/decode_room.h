// DecodeRoomMachine: the failure rules of one room on the decode worker (the decode leg's side
// of the KV handoff, worker/handoff/decode_handoff.h), as a state machine that does no I/O.
// DecodeHandoff applies every event of the room under its mutex and carries out the actions
// after releasing it; unit tests drive it with a fake clock.
//
// States and transitions (anything not listed leaves the state as it is and returns no action,
// so duplicate and late messages are ignored):
//
//   kAwaitingBlocks --BlocksReserved--> kRegistered   send_registration
//   kRegistered     --RegisterAgain (first one)-->      send_registration again (behind a
//                                                       RegisterPeer the owner sends)
//   kRegistered     --Notice(ok)--> kKvArrived          complete_transfer (the budget ends: the
//                                                       KV is here, decoding may take long)
//   kRegistered     --Notice(!ok)--> kFailed            abort_engine, forget
//   kAwaitingBlocks|kRegistered --PeerRefused--> kFailed                  abort_engine, forget
//   kAwaitingBlocks|kRegistered --Tick past the budget--> kExpired        abort_engine,
//                                                                send_room_abort, forget
//   any state but kEnded --RequestEnded--> kEnded                        forget
//
// The budget (--bootstrap-timeout + --transfer-timeout from the leg's start) is monotonic, and
// the registration carries what is left of it (RoomRegistration.budget_ms), never an instant.
// kFailed, kExpired and kEnded are final; a forgotten room hears nothing more (a late notice
// or the engine's last output finds no room).
//
// Not thread-safe: the owner serialises Apply.
#ifndef TANDEM_WORKER_HANDOFF_DECODE_ROOM_H_
#define TANDEM_WORKER_HANDOFF_DECODE_ROOM_H_

#include <cstdint>
#include <optional>
#include <string>

#include "common/clock.h"

namespace tandem::worker {

enum class DecodeRoomState {
  kAwaitingBlocks,  // the engine has not reserved the room's blocks yet
  kRegistered,      // RoomRegistration sent; waiting for the prefill worker's notice
  kKvArrived,       // the KV and the first token are here; the engine decodes
  kFailed,          // the prefill side failed or refused us; the engine request is aborted
  kExpired,         // the budget ran out; aborted here and on the prefill worker
  kEnded,           // the engine request ended: forgotten
};
const char* DecodeRoomStateName(DecodeRoomState state);

struct DecodeRoomEvent {
  enum class Kind {
    kBlocksReserved,  // registration: the sealed RoomRegistration for these blocks
    kRegisterAgain,   // the prefill worker dropped the registration: resend it (once)
    kNotice,          // ok, reason: the prefill worker's CompletionNotice
    kPeerRefused,     // reason: the prefill worker refused this decode worker's registration
    kTick,            // now: check the budget
    kRequestEnded,    // the engine request's last output
  };
  Kind kind;
  MonoClock::time_point now;
  bool ok = false;
  std::string reason;
  std::string registration;
};

struct DecodeRoomActions {
  std::optional<std::string> send_registration;  // sealed RoomRegistration to send
  bool complete_transfer = false;                // hand the notice's first token to the engine
  std::optional<std::string> abort_engine;       // abort the engine request with this reason
  bool send_room_abort = false;                  // tell the prefill worker (with abort_engine)
  bool forget = false;                           // drop the room (it is final)
};

class DecodeRoomMachine {
 public:
  explicit DecodeRoomMachine(Deadline budget) : budget_(budget) {}

  DecodeRoomActions Apply(const DecodeRoomEvent& event);

  DecodeRoomState state() const { return state_; }
  // Waiting for the KV (counted by DecodeHandoff::inflight()).
  bool waiting() const {
    return state_ == DecodeRoomState::kAwaitingBlocks || state_ == DecodeRoomState::kRegistered;
  }
  const Deadline& budget() const { return budget_; }

 private:
  DecodeRoomState state_ = DecodeRoomState::kAwaitingBlocks;
  Deadline budget_;
  std::string registration_;  // sealed, once the blocks are reserved
  bool resent_ = false;       // sent again after a RegisterAgain (once at most)
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_DECODE_ROOM_H_

#include "worker/handoff/decode_room.h"

#include "worker/handoff/handoff_clock.h"

namespace tandem::worker {

const char* DecodeRoomStateName(DecodeRoomState state) {
  switch (state) {
    case DecodeRoomState::kAwaitingBlocks:
      return "awaiting-blocks";
    case DecodeRoomState::kRegistered:
      return "registered";
    case DecodeRoomState::kKvArrived:
      return "kv-arrived";
    case DecodeRoomState::kFailed:
      return "failed";
    case DecodeRoomState::kExpired:
      return "expired";
    case DecodeRoomState::kEnded:
      return "ended";
  }
  return "?";
}

DecodeRoomActions DecodeRoomMachine::Apply(const DecodeRoomEvent& e) {
  using Kind = DecodeRoomEvent::Kind;
  DecodeRoomActions actions;
  switch (e.kind) {
    case Kind::kBlocksReserved:
      if (state_ != DecodeRoomState::kAwaitingBlocks) return actions;
      state_ = DecodeRoomState::kRegistered;
      registration_ = e.registration;
      actions.send_registration = registration_;
      return actions;
    case Kind::kRegisterAgain:
      if (state_ != DecodeRoomState::kRegistered || resent_) return actions;
      resent_ = true;
      actions.send_registration = registration_;
      return actions;
    case Kind::kNotice:
      // A notice before the registration was sent cannot be for this room's blocks.
      if (state_ != DecodeRoomState::kRegistered) return actions;
      if (e.ok) {
        state_ = DecodeRoomState::kKvArrived;
        budget_ = Deadline::Never();
        actions.complete_transfer = true;
      } else {
        state_ = DecodeRoomState::kFailed;
        actions.abort_engine = e.reason;
        actions.forget = true;
      }
      return actions;
    case Kind::kPeerRefused:
      if (!waiting()) return actions;
      state_ = DecodeRoomState::kFailed;
      actions.abort_engine = e.reason;
      actions.forget = true;
      return actions;
    case Kind::kTick:
      if (!waiting() || !Passed(budget_, e.now)) return actions;
      state_ = DecodeRoomState::kExpired;
      actions.abort_engine = e.reason;
      actions.send_room_abort = true;
      actions.forget = true;
      return actions;
    case Kind::kRequestEnded:
      if (state_ == DecodeRoomState::kEnded) return actions;
      state_ = DecodeRoomState::kEnded;
      actions.forget = true;
      return actions;
  }
  return actions;
}

}  // namespace tandem::worker

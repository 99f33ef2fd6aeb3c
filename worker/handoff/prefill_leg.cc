#include "worker/handoff/prefill_leg.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/handoff/handoff_clock.h"

namespace tandem::worker {

const char* PrefillLegStateName(PrefillLegState state) {
  switch (state) {
    case PrefillLegState::kAwaitingRoom:
      return "awaiting-room";
    case PrefillLegState::kPrefillOnly:
      return "prefill-only";
    case PrefillLegState::kPrefilling:
      return "prefilling";
    case PrefillLegState::kNotifying:
      return "notifying";
    case PrefillLegState::kSucceeded:
      return "succeeded";
    case PrefillLegState::kFailed:
      return "failed";
  }
  return "?";
}

PrefillLegMachine::PrefillLegMachine(uint64_t room, bool prefill_only, Deadline bootstrap_deadline,
                                     absl::Duration bootstrap_timeout,
                                     absl::Duration transfer_timeout)
    : room_(room),
      bootstrap_timeout_(bootstrap_timeout),
      transfer_timeout_(transfer_timeout),
      state_(prefill_only ? PrefillLegState::kPrefillOnly : PrefillLegState::kAwaitingRoom),
      bootstrap_deadline_(prefill_only ? Deadline::Never() : bootstrap_deadline) {}

PrefillLegActions PrefillLegMachine::Apply(const PrefillLegEvent& e) {
  using Kind = PrefillLegEvent::Kind;
  PrefillLegActions none;
  switch (e.kind) {
    case Kind::kRoomRegistered:
      if (state_ != PrefillLegState::kAwaitingRoom) return none;  // a duplicate registration
      state_ = PrefillLegState::kPrefilling;
      decode_id_ = e.decode_id;
      none.start_prefill = true;
      return none;
    case Kind::kLayerComputed:
      // --transfer-timeout counts from the moment the prefill starts computing, not while the
      // request waits in this worker's queue behind others.
      if (state_ == PrefillLegState::kPrefilling && transfer_deadline_.is_never()) {
        transfer_deadline_ = Deadline::At(e.now + ToMono(transfer_timeout_));
      }
      return none;
    case Kind::kWriteStarting:
      ++pending_;
      return none;
    case Kind::kWriteSubmitted:
      if (terminal()) {
        none.cancel.push_back(e.batch);
        return none;
      }
      writes_.insert(e.batch);
      return none;
    case Kind::kWriteDone:
      --pending_;
      writes_.erase(e.batch);
      if (terminal()) return none;
      if (!e.status.ok()) return Fail(e.status);
      return MaybeNotify();
    case Kind::kFirstToken:
      if (state_ != PrefillLegState::kPrefilling) return none;
      first_token_ = true;
      return MaybeNotify();
    case Kind::kPrefillOnlyDone:
      if (state_ != PrefillLegState::kPrefillOnly) return none;
      state_ = PrefillLegState::kSucceeded;
      none.finish = true;
      return none;
    case Kind::kNoticeDelivered:
      if (state_ != PrefillLegState::kNotifying) return none;
      if (!e.status.ok()) return Fail(e.status);
      state_ = PrefillLegState::kSucceeded;
      none.finish = true;
      return none;
    case Kind::kFailure:
      if (terminal()) return none;
      return Fail(e.status);
    case Kind::kTick:
      if (state_ == PrefillLegState::kAwaitingRoom && Passed(bootstrap_deadline_, e.now)) {
        return Fail(absl::DeadlineExceededError(
            absl::StrCat("no decode worker registered room ", room_, " within ",
                         absl::FormatDuration(bootstrap_timeout_), " (--bootstrap-timeout)")));
      }
      if ((state_ == PrefillLegState::kPrefilling || state_ == PrefillLegState::kNotifying) &&
          Passed(transfer_deadline_, e.now)) {
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            "room ", room_, ": the KV did not reach decode worker ", decode_id_, " within ",
            absl::FormatDuration(transfer_timeout_), " (--transfer-timeout)")));
      }
      return none;
  }
  return none;
}

PrefillLegActions PrefillLegMachine::MaybeNotify() {
  PrefillLegActions actions;
  if (state_ != PrefillLegState::kPrefilling || !first_token_ || pending_ > 0) return actions;
  state_ = PrefillLegState::kNotifying;
  actions.send_notice = true;
  return actions;
}

PrefillLegActions PrefillLegMachine::Fail(absl::Status status) {
  PrefillLegActions actions;
  // Only a room the decode worker registered has anyone to tell; its blocks are freed there once
  // the notice arrives, after every write that reached the network.
  actions.notify_decode =
      state_ == PrefillLegState::kPrefilling || state_ == PrefillLegState::kNotifying;
  state_ = PrefillLegState::kFailed;
  actions.cancel.assign(writes_.begin(), writes_.end());
  actions.fail = std::move(status);
  return actions;
}

}  // namespace tandem::worker

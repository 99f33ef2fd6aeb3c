// The KV handoff's failure rules, deterministically: the prefill leg's and the decode room's
// state machines (worker/handoff/prefill_leg.h, worker/handoff/decode_room.h) and the budget
// arithmetic (worker/handoff/handoff_clock.h), driven by a fake clock. A small pair harness
// carries out their actions the way PrefillHandoff and DecodeHandoff do, over a fake control
// channel and two fake KV pools, so each scenario also checks that every block is freed on both
// sides. No sockets, no threads, no sleeps.
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "worker/handoff/decode_room.h"
#include "worker/handoff/handoff_clock.h"
#include "worker/handoff/prefill_leg.h"

namespace tandem::worker {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using PKind = PrefillLegEvent::Kind;
using DKind = DecodeRoomEvent::Kind;

constexpr absl::Duration kBootstrapTimeout = absl::Seconds(3);
constexpr absl::Duration kTransferTimeout = absl::Seconds(6);
// Any fixed point: steady clocks have no common epoch across hosts.
const MonoClock::time_point kT0 = MonoClock::time_point(std::chrono::hours(1000));

PrefillLegMachine NewLeg(MonoClock::time_point start = kT0, bool prefill_only = false) {
  return PrefillLegMachine(7, prefill_only, Deadline::At(start + ToMono(kBootstrapTimeout)),
                           kBootstrapTimeout, kTransferTimeout);
}

PrefillLegEvent P(PKind kind, MonoClock::time_point now = kT0, kv::BatchId batch = 0,
                  absl::Status status = absl::OkStatus()) {
  return {kind, "decode-0", batch, std::move(status), now};
}

DecodeRoomEvent D(DKind kind, MonoClock::time_point now = kT0, bool ok = false,
                  std::string reason = "", std::string registration = "") {
  DecodeRoomEvent e{kind, now};
  e.ok = ok;
  e.reason = std::move(reason);
  e.registration = std::move(registration);
  return e;
}

// ---- the prefill leg ----------------------------------------------------------------------

TEST(PrefillLegMachineTest, RegisteredRoomNotifiesOnlyAfterTheFirstTokenAndTheLastWrite) {
  PrefillLegMachine leg = NewLeg();
  EXPECT_EQ(leg.state(), PrefillLegState::kAwaitingRoom);
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).start_prefill);
  EXPECT_EQ(leg.state(), PrefillLegState::kPrefilling);
  EXPECT_TRUE(leg.Apply(P(PKind::kLayerComputed, kT0 + seconds(1))).empty());
  for (kv::BatchId id : {1, 2}) {
    EXPECT_TRUE(leg.Apply(P(PKind::kWriteStarting)).empty());
    EXPECT_TRUE(leg.Apply(P(PKind::kWriteSubmitted, kT0, id)).empty());
  }
  EXPECT_FALSE(leg.Apply(P(PKind::kFirstToken)).send_notice);  // two writes pending
  EXPECT_FALSE(leg.Apply(P(PKind::kWriteDone, kT0, 1)).send_notice);
  EXPECT_TRUE(leg.Apply(P(PKind::kWriteDone, kT0, 2)).send_notice);
  EXPECT_EQ(leg.state(), PrefillLegState::kNotifying);
  EXPECT_EQ(leg.pending_writes(), 0);
  EXPECT_TRUE(leg.Apply(P(PKind::kNoticeDelivered)).finish);
  EXPECT_EQ(leg.state(), PrefillLegState::kSucceeded);
  // Answered once: whatever comes late changes nothing.
  EXPECT_TRUE(leg.Apply(P(PKind::kFailure, kT0, 0, absl::AbortedError("late"))).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kNoticeDelivered)).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kTick, kT0 + std::chrono::hours(1))).empty());
  EXPECT_EQ(leg.state(), PrefillLegState::kSucceeded);
}

TEST(PrefillLegMachineTest, NoRegistrationFailsAtBootstrapTimeoutWithNobodyToTell) {
  PrefillLegMachine leg = NewLeg();
  EXPECT_TRUE(leg.Apply(P(PKind::kTick, kT0 + seconds(3) - milliseconds(1))).empty());
  PrefillLegActions a = leg.Apply(P(PKind::kTick, kT0 + seconds(3)));
  ASSERT_TRUE(a.fail.has_value());
  EXPECT_EQ(a.fail->code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(a.fail->message().find("--bootstrap-timeout"), std::string::npos) << *a.fail;
  EXPECT_FALSE(a.notify_decode);
  EXPECT_EQ(leg.state(), PrefillLegState::kFailed);
  // A registration arriving after that starts nothing.
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).empty());
}

TEST(PrefillLegMachineTest, TransferTimeoutCountsFromTheFirstComputedLayer) {
  PrefillLegMachine leg = NewLeg();
  ASSERT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).start_prefill);
  // Queued behind other requests for a long time: no transfer deadline yet.
  EXPECT_TRUE(leg.Apply(P(PKind::kTick, kT0 + seconds(60))).empty());
  const MonoClock::time_point t1 = kT0 + seconds(61);
  leg.Apply(P(PKind::kLayerComputed, t1));
  leg.Apply(P(PKind::kLayerComputed, t1 + seconds(2)));  // does not move it
  leg.Apply(P(PKind::kWriteStarting, t1));
  leg.Apply(P(PKind::kWriteSubmitted, t1, 5));
  EXPECT_TRUE(leg.Apply(P(PKind::kTick, t1 + seconds(6) - milliseconds(1))).empty());
  PrefillLegActions a = leg.Apply(P(PKind::kTick, t1 + seconds(6)));
  ASSERT_TRUE(a.fail.has_value());
  EXPECT_NE(a.fail->message().find("--transfer-timeout"), std::string::npos) << *a.fail;
  EXPECT_NE(a.fail->message().find("decode-0"), std::string::npos) << *a.fail;
  EXPECT_TRUE(a.notify_decode);
  EXPECT_EQ(a.cancel, std::vector<kv::BatchId>{5});
}

TEST(PrefillLegMachineTest, FailedWriteFailsTheLegAndCancelsTheOthers) {
  PrefillLegMachine leg = NewLeg();
  leg.Apply(P(PKind::kRoomRegistered));
  for (kv::BatchId id : {1, 2, 3}) {
    leg.Apply(P(PKind::kWriteStarting));
    leg.Apply(P(PKind::kWriteSubmitted, kT0, id));
  }
  PrefillLegActions a =
      leg.Apply(P(PKind::kWriteDone, kT0, 2, absl::UnavailableError("peer gone")));
  ASSERT_TRUE(a.fail.has_value());
  EXPECT_EQ(a.fail->message(), "peer gone");
  EXPECT_EQ(a.cancel, (std::vector<kv::BatchId>{1, 3}));
  EXPECT_TRUE(a.notify_decode);
  // The cancelled writes finish later: nothing more to do.
  EXPECT_TRUE(leg.Apply(P(PKind::kWriteDone, kT0, 1, absl::CancelledError("c"))).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kFirstToken)).empty());
}

TEST(PrefillLegMachineTest, WriteSubmittedAfterTheLegFailedIsCancelled) {
  PrefillLegMachine leg = NewLeg();
  leg.Apply(P(PKind::kRoomRegistered));
  leg.Apply(P(PKind::kWriteStarting));
  ASSERT_TRUE(leg.Apply(P(PKind::kFailure, kT0, 0, absl::AbortedError("router"))).fail);
  EXPECT_FALSE(leg.writing());
  EXPECT_EQ(leg.Apply(P(PKind::kWriteSubmitted, kT0, 9)).cancel, std::vector<kv::BatchId>{9});
}

TEST(PrefillLegMachineTest, DuplicateRegistrationStartsThePrefillOnce) {
  PrefillLegMachine leg = NewLeg();
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).start_prefill);
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).empty());
}

TEST(PrefillLegMachineTest, UndeliveredNoticeFailsTheLegAndTellsTheDecodeWorker) {
  PrefillLegMachine leg = NewLeg();
  leg.Apply(P(PKind::kRoomRegistered));
  ASSERT_TRUE(leg.Apply(P(PKind::kFirstToken)).send_notice);  // nothing to write
  PrefillLegActions a =
      leg.Apply(P(PKind::kNoticeDelivered, kT0, 0, absl::UnavailableError("timed out")));
  ASSERT_TRUE(a.fail.has_value());
  EXPECT_TRUE(a.notify_decode);
  EXPECT_EQ(leg.state(), PrefillLegState::kFailed);
}

TEST(PrefillLegMachineTest, PrefillOnlyLegHasNoRoomAndNoDeadline) {
  PrefillLegMachine leg = NewLeg(kT0, /*prefill_only=*/true);
  EXPECT_EQ(leg.state(), PrefillLegState::kPrefillOnly);
  EXPECT_TRUE(leg.Apply(P(PKind::kTick, kT0 + std::chrono::hours(1))).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kRoomRegistered)).empty());
  EXPECT_TRUE(leg.Apply(P(PKind::kPrefillOnlyDone)).finish);
  EXPECT_TRUE(leg.Apply(P(PKind::kPrefillOnlyDone)).empty());
}

// ---- the decode room ----------------------------------------------------------------------

TEST(DecodeRoomMachineTest, NoticeHandsTheFirstTokenOverAndEndsTheBudget) {
  DecodeRoomMachine room(Deadline::At(kT0 + seconds(9)));
  EXPECT_TRUE(room.waiting());
  EXPECT_EQ(room.Apply(D(DKind::kBlocksReserved, kT0, false, "", "reg")).send_registration,
            std::optional<std::string>("reg"));
  EXPECT_TRUE(room.Apply(D(DKind::kNotice, kT0 + seconds(1), true)).complete_transfer);
  EXPECT_EQ(room.state(), DecodeRoomState::kKvArrived);
  // Decoding may take far longer than the budget.
  DecodeRoomActions late = room.Apply(D(DKind::kTick, kT0 + std::chrono::hours(1)));
  EXPECT_FALSE(late.abort_engine.has_value());
  // A duplicate notice is ignored; the request's end forgets the room.
  EXPECT_FALSE(room.Apply(D(DKind::kNotice, kT0, true)).complete_transfer);
  EXPECT_TRUE(room.Apply(D(DKind::kRequestEnded)).forget);
  EXPECT_FALSE(room.Apply(D(DKind::kRequestEnded)).forget);
}

TEST(DecodeRoomMachineTest, GivesUpAtItsBudgetAndAbortsThePrefillSide) {
  DecodeRoomMachine room(Deadline::At(kT0 + seconds(9)));
  room.Apply(D(DKind::kBlocksReserved, kT0, false, "", "reg"));
  EXPECT_FALSE(room.Apply(D(DKind::kTick, kT0 + seconds(9) - milliseconds(1))).forget);
  DecodeRoomActions a = room.Apply(D(DKind::kTick, kT0 + seconds(9), false, "no KV cache"));
  EXPECT_EQ(a.abort_engine, std::optional<std::string>("no KV cache"));
  EXPECT_TRUE(a.send_room_abort);
  EXPECT_TRUE(a.forget);
  EXPECT_EQ(room.state(), DecodeRoomState::kExpired);
  // The notice that comes after that finds the room given up.
  EXPECT_FALSE(room.Apply(D(DKind::kNotice, kT0 + seconds(10), true)).complete_transfer);
}

TEST(DecodeRoomMachineTest, PrefillFailureAbortsTheRequestWithTheReason) {
  DecodeRoomMachine room(Deadline::At(kT0 + seconds(9)));
  room.Apply(D(DKind::kBlocksReserved, kT0, false, "", "reg"));
  DecodeRoomActions a = room.Apply(D(DKind::kNotice, kT0, false, "prefill worker p: boom"));
  EXPECT_EQ(a.abort_engine, std::optional<std::string>("prefill worker p: boom"));
  EXPECT_FALSE(a.send_room_abort);  // the prefill side is the one that failed
  EXPECT_TRUE(a.forget);
}

TEST(DecodeRoomMachineTest, RegisterAgainResendsTheRegistrationOnceAndOnlyOnceItExists) {
  DecodeRoomMachine room(Deadline::At(kT0 + seconds(9)));
  EXPECT_FALSE(room.Apply(D(DKind::kRegisterAgain)).send_registration);      // no blocks yet
  EXPECT_FALSE(room.Apply(D(DKind::kNotice, kT0, true)).complete_transfer);  // not registered
  room.Apply(D(DKind::kBlocksReserved, kT0, false, "", "reg"));
  EXPECT_EQ(room.Apply(D(DKind::kRegisterAgain)).send_registration,
            std::optional<std::string>("reg"));
  EXPECT_FALSE(room.Apply(D(DKind::kRegisterAgain)).send_registration);
  EXPECT_FALSE(room.Apply(D(DKind::kBlocksReserved, kT0, false, "", "x")).send_registration);
}

TEST(DecodeRoomMachineTest, RefusalByThePrefillWorkerEndsAWaitingRoom) {
  DecodeRoomMachine room(Deadline::At(kT0 + seconds(9)));
  DecodeRoomActions a = room.Apply(D(DKind::kPeerRefused, kT0, false, "another model"));
  EXPECT_EQ(a.abort_engine, std::optional<std::string>("another model"));
  EXPECT_EQ(room.state(), DecodeRoomState::kFailed);
}

// ---- budgets across hosts -----------------------------------------------------------------

TEST(HandoffClockTest, BudgetIsTheTimeLeftAndBecomesALocalDeadlineOnArrival) {
  const Deadline decode_budget = Deadline::At(kT0 + seconds(9));
  const int64_t sent = BudgetMs(decode_budget, kT0 + seconds(2));
  EXPECT_EQ(sent, 7000);
  // The prefill worker's monotonic clock has another origin altogether; 40 ms on the wire.
  const MonoClock::time_point arrival = MonoClock::time_point(std::chrono::hours(5)) + seconds(40);
  const Deadline here = DeadlineFromBudget(sent, arrival, absl::Seconds(90));
  EXPECT_EQ(here.when(), arrival + seconds(7));
  EXPECT_EQ(BudgetMs(decode_budget, kT0 + seconds(20)), 1);  // spent: the least non-zero value
  EXPECT_EQ(BudgetMs(Deadline::Never(), kT0), 24 * 3600 * 1000);
}

TEST(HandoffClockTest, UntrustedBudgetsAreBoundedAndZeroMeansTheLocalDefault) {
  EXPECT_EQ(DeadlineFromBudget(0, kT0, absl::Seconds(9)).when(), kT0 + seconds(9));
  EXPECT_EQ(DeadlineFromBudget(-5, kT0, absl::Seconds(9)).when(), kT0 + seconds(9));
  EXPECT_EQ(DeadlineFromBudget(INT64_MAX, kT0, absl::Seconds(9)).when(), kT0 + kMaxRoomBudget);
  EXPECT_EQ(DeadlineFromBudget(0, kT0, absl::InfiniteDuration()).when(), kT0 + kMaxRoomBudget);
}

TEST(HandoffClockTest, TransferDeadlineIsTheTimeLeftFromNow) {
  EXPECT_EQ(TransferDeadline(Deadline::Never(), kT0), absl::InfiniteFuture());
  const absl::Time before = absl::Now();
  const absl::Time t = TransferDeadline(Deadline::At(kT0 + seconds(5)), kT0);
  EXPECT_GE(t, before + absl::Seconds(5));
  EXPECT_LE(t, absl::Now() + absl::Seconds(5));
  const absl::Time past = TransferDeadline(Deadline::At(kT0), kT0 + seconds(5));  // passed: now
  EXPECT_LE(past, absl::Now());
}

}  // namespace
}  // namespace tandem::worker

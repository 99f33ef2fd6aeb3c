// The handoff's failure rules across both workers, deterministically: a prefill leg's
// PrefillLegMachine and the decode room's DecodeRoomMachine, wired through a fake control
// channel (registration, notices, RoomAbort), a fake transfer engine (writes the test
// acknowledges or fails) and a fake KV pool on each side, with a fake clock. The harness carries
// out the machines' actions the way PrefillHandoff::Run and DecodeHandoff do: an aborted or
// released engine request frees its blocks, so free == total on both sides after every scenario
// shows that no rule leaks a room. No sockets, no threads, no sleeps.
#include <chrono>
#include <deque>
#include <optional>
#include <set>
#include <string>

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

constexpr int kTotalBlocks = 16;
constexpr int kRoomBlocks = 4;
constexpr absl::Duration kBootstrapTimeout = absl::Seconds(3);
constexpr absl::Duration kTransferTimeout = absl::Seconds(6);
const MonoClock::time_point kT0 = MonoClock::time_point(std::chrono::hours(1000));

// A worker's KV blocks: the engine request holding the room's blocks, or not.
struct FakePool {
  int used = 0;
  int free() const { return kTotalBlocks - used; }
};

struct Message {
  enum class Kind { kRegistration, kNotice, kRoomAbort } kind;
  bool ok = false;
  std::string reason;
};

class FakePair {
 public:
  FakePair()
      : leg_(7, false, Deadline::At(kT0 + ToMono(kBootstrapTimeout)), kBootstrapTimeout,
             kTransferTimeout),
        room_(Deadline::At(kT0 + ToMono(kBootstrapTimeout + kTransferTimeout))) {}

  // The decode engine reserves the room's blocks: the registration goes out.
  void ReserveOnDecode() {
    decode_pool_.used = kRoomBlocks;
    DecodeRoomEvent e{DKind::kBlocksReserved, now_};
    e.registration = "sealed registration";
    RunDecode(room_.Apply(e));
  }
  // Delivers everything on the control channel, in order, until it is empty.
  void Deliver() {
    while (!channel_.empty()) {
      const Message m = channel_.front();
      channel_.pop_front();
      switch (m.kind) {
        case Message::Kind::kRegistration:
          RunPrefill(leg_.Apply({PKind::kRoomRegistered, "decode-0", 0, {}, now_}));
          break;
        case Message::Kind::kNotice:
          if (room_forgotten_) break;  // DecodeHandoff finds no room
          {
            DecodeRoomEvent e{DKind::kNotice, now_};
            e.ok = m.ok;
            e.reason = m.reason;
            RunDecode(room_.Apply(e));
          }
          if (m.ok) RunPrefill(leg_.Apply({PKind::kNoticeDelivered, "", 0, {}, now_}));
          break;
        case Message::Kind::kRoomAbort:
          RunPrefill(leg_.Apply({PKind::kFailure, "", 0, absl::AbortedError(m.reason), now_}));
          break;
      }
    }
  }
  // The prefill computes `layers` layers, each written as one batch, then the first token.
  void Compute(int layers, bool first_token = true) {
    for (int i = 0; i < layers; ++i) {
      leg_.Apply({PKind::kLayerComputed, "", 0, {}, now_});
      if (!leg_.writing()) return;
      leg_.Apply({PKind::kWriteStarting, "", 0, {}, now_});
      const kv::BatchId id = next_batch_++;
      writes_.insert(id);
      RunPrefill(leg_.Apply({PKind::kWriteSubmitted, "", id, {}, now_}));
    }
    if (first_token) RunPrefill(leg_.Apply({PKind::kFirstToken, "", 0, {}, now_}));
  }
  // The transfer engine finishes every write in flight with `status`.
  void FinishWrites(absl::Status status = absl::OkStatus()) {
    while (!writes_.empty()) {
      const kv::BatchId id = *writes_.begin();
      writes_.erase(writes_.begin());
      RunPrefill(leg_.Apply({PKind::kWriteDone, "", id, status, now_}));
    }
  }
  // Both workers' deadline checks at `now`.
  void AdvanceTo(MonoClock::time_point now) {
    now_ = now;
    RunPrefill(leg_.Apply({PKind::kTick, "", 0, {}, now_}));
    DecodeRoomEvent e{DKind::kTick, now_};
    e.reason = "no KV cache from prefill worker";
    RunDecode(room_.Apply(e));
  }
  // The decode engine request ends on its own (the last token, or its client went away).
  void EndDecodeRequest() { EndDecode(); }
  // The router aborts the prefill leg.
  void AbortPrefillLeg(const std::string& reason) {
    RunPrefill(leg_.Apply({PKind::kFailure, "", 0, absl::AbortedError(reason), now_}));
  }

  const PrefillLegMachine& leg() const { return leg_; }
  const DecodeRoomMachine& room() const { return room_; }
  const FakePool& prefill_pool() const { return prefill_pool_; }
  const FakePool& decode_pool() const { return decode_pool_; }
  int prefill_answers() const { return prefill_answers_; }
  const absl::Status& prefill_answer() const { return prefill_answer_; }
  bool decode_got_first_token() const { return decode_got_first_token_; }
  const std::string& decode_abort_reason() const { return decode_abort_reason_; }
  const std::set<kv::BatchId>& writes() const { return writes_; }
  void Send(Message m) { channel_.push_back(std::move(m)); }

 private:
  // What PrefillHandoff::Run does, against the fakes.
  void RunPrefill(PrefillLegActions a) {
    for (kv::BatchId id : a.cancel) {
      if (writes_.erase(id)) {
        leg_.Apply({PKind::kWriteDone, "", id, absl::CancelledError("cancelled"), now_});
      }
    }
    if (a.fail) {
      if (a.notify_decode) channel_.push_back({Message::Kind::kNotice, false, a.fail->ToString()});
      prefill_pool_.used = 0;  // engine_->Abort
      ++prefill_answers_;
      prefill_answer_ = *a.fail;
      return;
    }
    if (a.start_prefill) prefill_pool_.used = kRoomBlocks;  // the prompt's blocks, held
    if (a.send_notice) channel_.push_back({Message::Kind::kNotice, true, ""});
    if (a.finish) {
      prefill_pool_.used = 0;  // engine_->ReleaseHeld
      ++prefill_answers_;
      prefill_answer_ = absl::OkStatus();
    }
  }
  // What DecodeHandoff does, against the fakes.
  void RunDecode(DecodeRoomActions a) {
    if (a.send_registration) channel_.push_back({Message::Kind::kRegistration, false, ""});
    if (a.complete_transfer) decode_got_first_token_ = true;
    if (a.forget) room_forgotten_ = true;
    if (a.send_room_abort) channel_.push_back({Message::Kind::kRoomAbort, false, *a.abort_engine});
    if (a.abort_engine) {
      decode_abort_reason_ = *a.abort_engine;
      EndDecode();  // the engine's abort ends the request: its last output
    }
  }
  void EndDecode() {
    decode_pool_.used = 0;
    if (room_forgotten_) return;  // the output callback finds no room
    if (room_.Apply({DKind::kRequestEnded, now_}).forget) room_forgotten_ = true;
  }

  MonoClock::time_point now_ = kT0;
  PrefillLegMachine leg_;
  DecodeRoomMachine room_;
  bool room_forgotten_ = false;
  std::deque<Message> channel_;
  std::set<kv::BatchId> writes_;
  kv::BatchId next_batch_ = 1;
  FakePool prefill_pool_;
  FakePool decode_pool_;
  int prefill_answers_ = 0;
  absl::Status prefill_answer_ = absl::UnknownError("not answered");
  bool decode_got_first_token_ = false;
  std::string decode_abort_reason_;
};

void ExpectEveryBlockFree(const FakePair& pair) {
  EXPECT_EQ(pair.prefill_pool().free(), kTotalBlocks);
  EXPECT_EQ(pair.decode_pool().free(), kTotalBlocks);
  EXPECT_TRUE(pair.writes().empty());
}

TEST(HandoffPairRulesTest, RoomRegisteredThenPrefillCompletesTransfersTheKv) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Deliver();
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kPrefilling);
  pair.Compute(3);
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kPrefilling);  // writes not acknowledged yet
  pair.FinishWrites();
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kNotifying);
  pair.Deliver();
  EXPECT_TRUE(pair.decode_got_first_token());
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kSucceeded);
  EXPECT_EQ(pair.prefill_answers(), 1);
  EXPECT_TRUE(pair.prefill_answer().ok());
  // Decoding outlives the budget.
  pair.AdvanceTo(kT0 + seconds(600));
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kKvArrived);
  pair.EndDecodeRequest();
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kEnded);
  ExpectEveryBlockFree(pair);
}

TEST(HandoffPairRulesTest, DecodeGivesUpAtItsBudgetAndThePrefillLegFollows) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Deliver();
  pair.AdvanceTo(kT0 + seconds(4));
  pair.Compute(2, /*first_token=*/false);  // the prefill stalls: writes never acknowledged
  pair.AdvanceTo(kT0 + seconds(9) - milliseconds(1));
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kRegistered);
  pair.AdvanceTo(kT0 + seconds(9));
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kExpired);
  EXPECT_NE(pair.decode_abort_reason().find("no KV cache"), std::string::npos);
  pair.Deliver();  // the RoomAbort
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kFailed);
  EXPECT_EQ(pair.prefill_answer().code(), absl::StatusCode::kAborted);
  pair.Deliver();  // the prefill's failure notice finds the room gone
  ExpectEveryBlockFree(pair);
}

TEST(HandoffPairRulesTest, AbortOnThePrefillSideReachesTheDecodeWorker) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Deliver();
  pair.Compute(2, /*first_token=*/false);
  pair.AbortPrefillLeg("the router gave the pair up");
  EXPECT_EQ(pair.prefill_answers(), 1);
  pair.Deliver();
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kFailed);
  EXPECT_NE(pair.decode_abort_reason().find("the router gave the pair up"), std::string::npos)
      << pair.decode_abort_reason();
  ExpectEveryBlockFree(pair);
}

TEST(HandoffPairRulesTest, AbortOnTheDecodeSideFreesBothSides) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Deliver();
  pair.Compute(1, /*first_token=*/false);
  pair.EndDecodeRequest();                       // its client went away
  pair.AbortPrefillLeg("the client went away");  // the router aborts the other leg at once
  pair.FinishWrites();
  pair.Deliver();
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kEnded);
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kFailed);
  EXPECT_EQ(pair.prefill_answers(), 1);
  ExpectEveryBlockFree(pair);
}

TEST(HandoffPairRulesTest, PrefillLegFailureIsReportedToTheDecodeWorker) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Deliver();
  pair.Compute(3);
  pair.FinishWrites(absl::UnavailableError("KV transfer to decode worker decode-0 failed"));
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kFailed);
  pair.Deliver();
  EXPECT_FALSE(pair.decode_got_first_token());
  EXPECT_NE(pair.decode_abort_reason().find("KV transfer to decode worker"), std::string::npos)
      << pair.decode_abort_reason();
  ExpectEveryBlockFree(pair);
}

TEST(HandoffPairRulesTest, RegistrationNeverArrivingFailsBothAtTheirDeadlines) {
  FakePair lost;
  lost.ReserveOnDecode();  // the registration is lost on the way: never delivered
  lost.AdvanceTo(kT0 + seconds(3));
  EXPECT_EQ(lost.leg().state(), PrefillLegState::kFailed);
  EXPECT_EQ(lost.prefill_answer().code(), absl::StatusCode::kDeadlineExceeded);
  lost.AdvanceTo(kT0 + seconds(9));
  EXPECT_EQ(lost.room().state(), DecodeRoomState::kExpired);
  EXPECT_EQ(lost.decode_pool().free(), kTotalBlocks);
  EXPECT_EQ(lost.prefill_pool().free(), kTotalBlocks);
}

TEST(HandoffPairRulesTest, DuplicateAndLateMessagesChangeNothing) {
  FakePair pair;
  pair.ReserveOnDecode();
  pair.Send({Message::Kind::kRegistration, false, ""});  // the registration twice
  pair.Deliver();
  pair.Compute(2);
  pair.FinishWrites();
  pair.Deliver();
  ASSERT_EQ(pair.leg().state(), PrefillLegState::kSucceeded);
  pair.Send({Message::Kind::kNotice, true, ""});
  pair.Send({Message::Kind::kNotice, false, "late failure"});
  pair.Send({Message::Kind::kRoomAbort, false, "late abort"});
  pair.Send({Message::Kind::kRegistration, false, ""});
  pair.Deliver();
  EXPECT_EQ(pair.leg().state(), PrefillLegState::kSucceeded);
  EXPECT_EQ(pair.room().state(), DecodeRoomState::kKvArrived);
  EXPECT_EQ(pair.prefill_answers(), 1);
  EXPECT_TRUE(pair.prefill_answer().ok());
  EXPECT_TRUE(pair.decode_abort_reason().empty());
  pair.EndDecodeRequest();
  ExpectEveryBlockFree(pair);
}

}  // namespace
}  // namespace tandem::worker

#include <random>
#include <string>

#include "gtest/gtest.h"
#include "proto/kv_control.pb.h"
#include "proto/worker.grpc.pb.h"
#include "proto/worker.pb.h"

namespace tandem::proto {
namespace {

TEST(KvControlTest, RoomRegistrationRoundTrips) {
  ControlMessage msg;
  msg.set_version(CONTROL_PLANE_VERSION_1);
  RoomRegistration* room = msg.mutable_room_registration();
  room->set_bootstrap_room(0x7fffffffffffffffULL);
  room->set_decode_worker_id("127.0.0.1:8001");
  for (int b : {3, 4, 5, 9}) room->add_dst_block_ids(b);
  room->set_num_tokens(61);

  std::string wire;
  ASSERT_TRUE(msg.SerializeToString(&wire));
  ControlMessage back;
  ASSERT_TRUE(back.ParseFromString(wire));
  EXPECT_EQ(back.version(), CONTROL_PLANE_VERSION_1);
  ASSERT_EQ(back.body_case(), ControlMessage::kRoomRegistration);
  EXPECT_EQ(back.room_registration().bootstrap_room(), 0x7fffffffffffffffULL);
  EXPECT_EQ(back.room_registration().dst_block_ids_size(), 4);
  EXPECT_EQ(back.room_registration().dst_block_ids(3), 9);
}

TEST(KvControlTest, GarbageIsRefusedOrParsesToSomethingHarmless) {
  // A peer that speaks garbage must never crash the parser; most random bytes are invalid wire
  // format, and whatever parses still has to pass the version and body checks of the receiver.
  std::mt19937 rng(7);
  int refused = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    ControlMessage msg;
    if (!msg.ParseFromString(bytes)) ++refused;
  }
  EXPECT_GT(refused, 1000);
}

TEST(WorkerProtoTest, FinishReasonShapes) {
  FinishReason stop;
  stop.set_type(FinishReason::STOP);
  stop.set_matched_str("\n\n");
  EXPECT_EQ(stop.matched_case(), FinishReason::kMatchedStr);
  FinishReason eos;
  eos.set_type(FinishReason::STOP);
  eos.set_matched_token(2);
  EXPECT_EQ(eos.matched_case(), FinishReason::kMatchedToken);
  // The generated service has every leg the router uses.
  using Stub = Worker::Stub;
  EXPECT_NE(&Stub::Prefill, nullptr);
  EXPECT_NE(&Stub::Decode, nullptr);
  EXPECT_NE(&Stub::Abort, nullptr);
}

}  // namespace
}  // namespace tandem::proto

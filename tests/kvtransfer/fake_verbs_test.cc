// The fake verbs layer itself: RDMA WRITE semantics the rdma backend's tests rely on.
#include "kvtransfer/rdma/fake_verbs.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace tandem::kv::rdma {
namespace {

struct Side {
  VerbsPtr v;
  Handle pd = 0, cq = 0;
  QueuePair qp;
  std::vector<uint8_t> mem;
  MemoryRegistration mr;
};

class FakeVerbsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (Side* s : {&a_, &b_}) {
      s->v = CreateFakeVerbs(fabric_, "fake0");
      s->pd = *s->v->AllocPd();
      s->cq = *s->v->CreateCq(64);
      s->qp = *s->v->CreateQp(s->pd, s->cq, 64, 8);
      s->mem.assign(4096, 0);
      s->mr = *s->v->RegisterMemory(s->pd, s->mem.data(), s->mem.size());
    }
    for (int i = 0; i < 4096; ++i) a_.mem[i] = static_cast<uint8_t>(i * 7);
    ASSERT_TRUE(a_.v->ConnectQp(a_.qp.handle, 1, {b_.qp.qp_num, 2, 0, {}, 4096}).ok());
    ASSERT_TRUE(b_.v->ConnectQp(b_.qp.handle, 2, {a_.qp.qp_num, 1, 0, {}, 4096}).ok());
  }
  SendRequest Write(uint64_t off, uint32_t len, uint64_t remote_off, bool signaled) {
    SendRequest r;
    r.wr_id = off;
    r.local_addr = reinterpret_cast<uint64_t>(a_.mem.data()) + off;
    r.length = len;
    r.lkey = a_.mr.lkey;
    r.remote_addr = reinterpret_cast<uint64_t>(b_.mem.data()) + remote_off;
    r.rkey = b_.mr.rkey;
    r.signaled = signaled;
    return r;
  }
  std::vector<WorkCompletion> Drain(Side& s) {
    WorkCompletion wc[16];
    int n = *s.v->PollCq(s.cq, absl::MakeSpan(wc));
    return {wc, wc + n};
  }

  std::shared_ptr<FakeFabric> fabric_ = std::make_shared<FakeFabric>();
  Side a_, b_;
};

TEST_F(FakeVerbsTest, WriteChainLandsAndOnlySignaledCompletes) {
  std::vector<SendRequest> chain = {Write(0, 100, 1000, false), Write(100, 200, 2000, true)};
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, chain).ok());
  EXPECT_EQ(0, std::memcmp(b_.mem.data() + 1000, a_.mem.data(), 100));
  EXPECT_EQ(0, std::memcmp(b_.mem.data() + 2000, a_.mem.data() + 100, 200));
  auto wcs = Drain(a_);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
}

TEST_F(FakeVerbsTest, BadRkeyOrBoundsIsRemoteAccessErrorAndErrorsTheQp) {
  SendRequest bad = Write(0, 100, 4000, true);  // 4000 + 100 > 4096
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&bad, 1}).ok());
  auto wcs = Drain(a_);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemoteAccessError);
  EXPECT_EQ(b_.mem[4000], 0);
  SendRequest good = Write(0, 10, 0, true);  // the qp is now in error: flushed
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&good, 1}).ok());
  wcs = Drain(a_);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kFlushed);
  EXPECT_EQ(fabric_->ErroredQps(), 2);
}

TEST_F(FakeVerbsTest, WrongRkeyAndLocalKeyAreRejected) {
  SendRequest r = Write(0, 10, 0, true);
  r.rkey = a_.mr.rkey;  // a key of the wrong device
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&r, 1}).ok());
  EXPECT_EQ(Drain(a_)[0].status, WcStatus::kRemoteAccessError);
}

TEST_F(FakeVerbsTest, SendConsumesAPostedReceive) {
  ASSERT_TRUE(b_.v->PostRecv(b_.qp.handle, 77, reinterpret_cast<uint64_t>(b_.mem.data()) + 100, 64,
                             b_.mr.lkey)
                  .ok());
  SendRequest s = Write(0, 32, 0, true);
  s.opcode = SendRequest::kSend;
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&s, 1}).ok());
  auto in = Drain(b_);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].wr_id, 77u);
  EXPECT_EQ(in[0].byte_len, 32u);
  EXPECT_EQ(0, std::memcmp(b_.mem.data() + 100, a_.mem.data(), 32));
}

TEST_F(FakeVerbsTest, InjectedDropDelayAndQpError) {
  fabric_->DropCompletions(1);
  SendRequest r = Write(0, 10, 0, true);
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&r, 1}).ok());
  EXPECT_TRUE(Drain(a_).empty());
  fabric_->DelayCompletions(absl::Milliseconds(50));
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&r, 1}).ok());
  EXPECT_TRUE(Drain(a_).empty());
  absl::SleepFor(absl::Milliseconds(60));
  EXPECT_EQ(Drain(a_).size(), 1u);
  fabric_->DelayCompletions(absl::ZeroDuration());
  fabric_->SetQpError(a_.qp.qp_num);
  ASSERT_TRUE(a_.v->PostSend(a_.qp.handle, {&r, 1}).ok());
  EXPECT_EQ(Drain(a_)[0].status, WcStatus::kFlushed);
}

}  // namespace
}  // namespace tandem::kv::rdma

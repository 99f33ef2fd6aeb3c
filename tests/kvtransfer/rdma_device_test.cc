// The rdma backend on a real device: two engines in this process over the first RDMA device.
// Skipped, with the reason, on machines without one.
#include <gtest/gtest.h>

#include "kvtransfer/factory.h"
#include "kvtransfer/rdma/verbs.h"
#include "tests/kvtransfer/test_util.h"

namespace tandem::kv {
namespace {

TEST(RdmaDeviceTest, LoopbackRoundTripOnARealDevice) {
  auto probe = rdma::CreateIbverbs();
  if (!probe.ok()) GTEST_SKIP() << "needs an RDMA NIC: " << probe.status().message();
  probe->reset();
  std::vector<uint8_t> src = testing::RandomBytes(8 << 20, 1), dst(8 << 20, 0);
  auto a = CreateTransferEngine("rdma", testing::TestOptions("rdma-a"));
  auto b = CreateTransferEngine("rdma", testing::TestOptions("rdma-b"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->RegisterRegion({1, src.data(), src.size(), false}).ok());
  ASSERT_TRUE((*b)->RegisterRegion({2, dst.data(), dst.size(), false}).ok());
  ASSERT_TRUE((*a)->Start().ok() && (*b)->Start().ok());
  auto peer = (*a)->ImportPeer(*(*b)->ExportDescriptor());
  ASSERT_TRUE(peer.ok()) << peer.status();
  auto r = (*a)->Submit(*peer, {{WriteOp{1, 0, 2, 0, src.size()}}}, {});
  ASSERT_TRUE(r.ok() && r->accepted);
  EXPECT_EQ((*a)->Wait(r->id, absl::Now() + absl::Seconds(10))->state, BatchState::kCompleted);
  EXPECT_EQ(src, dst);
}

}  // namespace
}  // namespace tandem::kv

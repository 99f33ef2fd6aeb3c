#include "common/signals.h"

#include <signal.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace tandem {
namespace {

TEST(SignalsTest, PendingSignalIsReturnedByTheWaiter) {
  BlockShutdownSignals();
  raise(SIGTERM);  // pending on this thread because it is blocked
  EXPECT_EQ(WaitForShutdownSignal(), SIGTERM);
  raise(SIGINT);
  EXPECT_EQ(WaitForShutdownSignal(), SIGINT);
}

TEST(SignalsTest, RequestShutdownReachesAProcessThatBlockedTheSignals) {
  // In a child process: other tests of this binary run threads that do not block SIGTERM.
  EXPECT_EXIT(
      {
        BlockShutdownSignals();
        RequestShutdown();
        _exit(WaitForShutdownSignal() == SIGTERM ? 0 : 1);
      },
      testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tandem

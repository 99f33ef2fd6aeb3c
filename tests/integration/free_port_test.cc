// FreePort / FreePortRange: the ports integration tests hand to daemons.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "gtest/gtest.h"
#include "tests/integration/process.h"

namespace tandem::itest {
namespace {

int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768, high = 0;
  f >> low >> high;
  return low;
}

TEST(FreePortTest, PortsLieBelowTheEphemeralRangeAndAreNeverHandedOutTwice) {
  std::set<int> seen;
  for (int i = 0; i < 50; ++i) {
    const int port = FreePort();
    ASSERT_GE(port, 10000);
    ASSERT_LT(port, EphemeralLow()) << "an outgoing connection could be given this port";
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
  }
}

TEST(FreePortTest, RangeIsConsecutiveAndReserved) {
  const int base = FreePortRange(9);
  ASSERT_NE(base, 0);
  std::set<int> later;
  for (int i = 0; i < 100; ++i) later.insert(FreePort());
  for (int p = base; p < base + 9; ++p) EXPECT_EQ(later.count(p), 0u) << "port " << p;
}

// Another test process never gets a port this one holds. With 400 of ~22,000 ports held and
// 200 picks in the child, picking without the reservation would hit one with a probability of
// about 97%.
TEST(FreePortTest, AnotherProcessNeverGetsAHeldPort) {
  const int span = 400;
  const int base = FreePortRange(span);
  ASSERT_NE(base, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    int hits = 0;
    for (int i = 0; i < 200; ++i) {
      const int p = FreePort();
      if (p == 0 || (p >= base && p < base + span)) ++hits;
    }
    const ssize_t written = write(fds[1], &hits, sizeof hits);
    _exit(written == sizeof hits ? 0 : 1);
  }
  close(fds[1]);
  int hits = -1;
  ASSERT_EQ(read(fds[0], &hits, sizeof hits), static_cast<ssize_t>(sizeof hits));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(hits, 0) << "the child was handed ports reserved here (or none at all)";
}

}  // namespace
}  // namespace tandem::itest

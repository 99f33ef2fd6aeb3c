#include "common/http_direct_answer.h"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace tandem::http_internal {
namespace {

using Result = DirectAnswer::Result;
using std::chrono::milliseconds;

// A connected pair of non-blocking stream sockets; [0] is the server's end.
class SocketPair {
 public:
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds_), 0); }
  ~SocketPair() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  SocketPair(const SocketPair&) = delete;
  SocketPair& operator=(const SocketPair&) = delete;

  int server() const { return fds_[0]; }
  // Everything the client end can read now.
  std::string Drain() const {
    std::string out;
    char buffer[65536];
    for (ssize_t n; (n = ::read(fds_[1], buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
    return out;
  }

 private:
  int fds_[2] = {-1, -1};
};

TEST(DirectAnswerTest, WritesOnlyWhenAllowedAndOnlyOnce) {
  SocketPair sockets;
  DirectAnswer direct;
  direct.SetSocket(sockets.server());
  EXPECT_EQ(direct.TrySend([] { return std::string("never"); }), Result::kNotAllowed);
  direct.Allow(true);
  EXPECT_EQ(direct.TrySend([] { return std::string("answer"); }), Result::kSent);
  EXPECT_EQ(direct.TrySend([] { return std::string("twice"); }), Result::kNotAllowed);
  EXPECT_EQ(sockets.Drain(), "answer");
  EXPECT_TRUE(direct.TakeSent());
  EXPECT_FALSE(direct.TakeSent());  // taken once
}

TEST(DirectAnswerTest, DisallowedOrClosedWritesNothing) {
  SocketPair sockets;
  DirectAnswer direct;
  direct.SetSocket(sockets.server());
  direct.Allow(true);
  direct.Allow(false);
  EXPECT_EQ(direct.TrySend([] { return std::string("a"); }), Result::kNotAllowed);
  direct.Allow(true);
  direct.Close();
  EXPECT_EQ(direct.TrySend([] { return std::string("b"); }), Result::kNotAllowed);
  EXPECT_EQ(sockets.Drain(), "");
  EXPECT_FALSE(direct.TakeSent());
}

TEST(DirectAnswerTest, WhatTheSocketDoesNotTakeIsLeftForTheStrand) {
  SocketPair sockets;
  DirectAnswer direct;
  direct.SetSocket(sockets.server());
  direct.Allow(true);
  const std::string big(8 << 20, 'z');  // far beyond a socket buffer
  EXPECT_EQ(direct.TrySend([&] { return big; }), Result::kPartial);
  EXPECT_FALSE(direct.TakeSent());  // not written whole
  const std::string written = sockets.Drain();
  const std::string rest = direct.TakeRest();
  EXPECT_GT(written.size(), 0u);
  EXPECT_EQ(written.size() + rest.size(), big.size());
  EXPECT_EQ(written + rest, big);
  EXPECT_EQ(direct.TakeRest(), "");
}

TEST(DirectAnswerTest, IdleCountsFromTheAnswerUntilTheStrandTakesIt) {
  SocketPair sockets;
  DirectAnswer direct;
  direct.SetSocket(sockets.server());
  const auto before = DirectAnswer::Clock::now();
  EXPECT_FALSE(direct.IdleSince(before + milliseconds(1000), milliseconds(10)).has_value());
  direct.Allow(true);
  ASSERT_EQ(direct.TrySend([] { return std::string("x"); }), Result::kSent);
  const auto now = DirectAnswer::Clock::now();
  EXPECT_FALSE(direct.IdleSince(now, milliseconds(1000)).has_value());  // not idle that long
  const auto at = direct.IdleSince(now + milliseconds(1000), milliseconds(1000));
  ASSERT_TRUE(at.has_value());
  EXPECT_GE(*at, before);
  EXPECT_LE(*at, now);
  EXPECT_TRUE(direct.StillIdleAfter(*at));
  EXPECT_TRUE(direct.TakeSent());  // the next request came
  EXPECT_FALSE(direct.StillIdleAfter(*at));
  EXPECT_FALSE(direct.IdleSince(now + milliseconds(5000), milliseconds(1000)).has_value());
}

TEST(DirectAnswerTest, ABrokenConnectionLeavesEverythingToTheStrand) {
  DirectAnswer direct;
  {
    SocketPair sockets;
    ::shutdown(sockets.server(), SHUT_WR);
    direct.SetSocket(sockets.server());
    direct.Allow(true);
    EXPECT_EQ(direct.TrySend([] { return std::string("late"); }), Result::kPartial);
  }
  EXPECT_EQ(direct.TakeRest(), "late");  // the strand's write then reports the error
}

}  // namespace
}  // namespace tandem::http_internal

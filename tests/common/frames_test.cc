// Length-prefixed frames (common/frames.h): round trips whatever the read sizes, a frame split
// across reads, empty frames, and a header above the limit refused naming both sizes.
#include "common/frames.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {
namespace {

// Feeds `bytes` to `reader` `chunk` bytes at a time, collecting every frame.
std::vector<std::string> Feed(FrameReader& reader, const std::string& bytes, size_t chunk) {
  std::vector<std::string> frames;
  for (size_t at = 0; at < bytes.size(); at += chunk) {
    const size_t n = std::min(chunk, bytes.size() - at);
    std::memcpy(reader.Prepare(n), bytes.data() + at, n);
    reader.Commit(n);
    for (;;) {
      auto frame = reader.Next();
      EXPECT_TRUE(frame.ok()) << frame.status();
      if (!frame.ok() || !frame->has_value()) break;
      frames.emplace_back(**frame);
    }
  }
  return frames;
}

TEST(FramesTest, RoundTripsWhateverTheReadSizes) {
  const std::vector<std::string> sent = {"a", "", std::string(70000, 'x'), "last frame"};
  std::string wire;
  for (const std::string& s : sent) AppendFrame(&wire, s);
  EXPECT_EQ(wire.size(), 4 * kFrameHeaderBytes + 1 + 70000 + 10);
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{4096}, wire.size()}) {
    FrameReader reader(1 << 20);
    EXPECT_EQ(Feed(reader, wire, chunk), sent) << "chunk " << chunk;
    EXPECT_EQ(reader.buffered(), 0u);
  }
}

TEST(FramesTest, TheHeaderIsBigEndian) {
  std::string wire;
  AppendFrameHeader(&wire, 0x01020304);
  EXPECT_EQ(wire, std::string("\x01\x02\x03\x04", 4));
}

TEST(FramesTest, AFrameAboveTheLimitIsRefusedNamingBothSizes) {
  FrameReader reader(100);
  std::string wire;
  AppendFrame(&wire, std::string(101, 'y'));
  std::memcpy(reader.Prepare(wire.size()), wire.data(), wire.size());
  reader.Commit(wire.size());
  auto frame = reader.Next();
  ASSERT_FALSE(frame.ok());
  EXPECT_EQ(frame.status().message(), "a frame of 101 bytes is larger than the limit of 100 bytes");
}

TEST(FramesTest, AnIncompleteFrameWaitsForItsBytes) {
  FrameReader reader(100);
  std::string wire;
  AppendFrame(&wire, "hello");
  std::memcpy(reader.Prepare(6), wire.data(), 6);
  reader.Commit(6);
  auto frame = reader.Next();
  ASSERT_TRUE(frame.ok());
  EXPECT_FALSE(frame->has_value());
  std::memcpy(reader.Prepare(3), wire.data() + 6, 3);
  reader.Commit(3);
  frame = reader.Next();
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(frame->has_value());
  EXPECT_EQ(**frame, "hello");
}

// A writer shaped like the session transports: one batch in flight at a time (the turn), taken
// by whichever thread queues when none is, handed on from inside the completion.
class TurnWriter {
 public:
  struct Batch {
    std::string text;
    size_t ByteSizeLong() const { return text.size(); }
    void AppendToString(std::string* out) const { out->append(text); }
  };

  explicit TurnWriter(int fd) : fd_(fd) {}

  void Queue(const std::string& message) {
    bool write;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(message);
      write = TakeLocked();
    }
    if (write) Write();
  }

 private:
  bool TakeLocked() {
    if (writing_ || pending_.empty()) return false;
    writing_ = true;
    in_flight_.text.clear();
    for (const std::string& m : pending_) in_flight_.text += m + ";";
    pending_.clear();
    return true;
  }
  void Write() {
    loop_.Run(
        fd_, &in_flight_, [this] { Done(); },
        [this](size_t offset) {  // the rest, blocking here (the daemons do it asynchronously)
          const std::string& bytes = loop_.bytes();
          while (offset < bytes.size()) {
            const ssize_t n = ::send(fd_, bytes.data() + offset, bytes.size() - offset, 0);
            ASSERT_GT(n, 0);
            offset += static_cast<size_t>(n);
          }
          Done();
        },
        [](const absl::Status& error) { FAIL() << error; });
  }
  void Done() {
    bool write;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      write = TakeLocked();
    }
    if (write) {
      Write();
    } else {
      // The turn is free: let another thread take it before this completion returns.
      std::this_thread::yield();
    }
  }

  const int fd_;
  FrameSendLoop loop_;
  std::mutex mu_;
  bool writing_ = false;
  std::deque<std::string> pending_;
  Batch in_flight_;
};

// Four threads queue messages at once on a socket with a small send buffer (frames often go out
// in part). Every message arrives once, in each thread's order: no batch handed on between
// threads is lost or sent twice.
TEST(FramesTest, BatchesHandedOnBetweenThreadsAllArriveOnce) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const int small = 4096;
  setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::string> received;
  std::thread reader([&] {
    FrameReader frames(1 << 20);
    int seen = 0;
    while (seen < kThreads * kEach) {
      const ssize_t n = recv(fds[1], frames.Prepare(65536), 65536, 0);
      if (n <= 0) return;
      frames.Commit(static_cast<size_t>(n));
      for (;;) {
        auto frame = frames.Next();
        if (!frame.ok() || !frame->has_value()) break;
        std::string_view text = **frame;
        size_t at = 0;
        while (at < text.size()) {
          const size_t end = text.find(';', at);
          received.emplace_back(text.substr(at, end - at));
          at = end + 1;
          ++seen;
        }
      }
    }
  });
  TurnWriter writer(fds[0]);
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&writer, t] {
      for (int i = 0; i < kEach; ++i) writer.Queue(std::to_string(t) + "." + std::to_string(i));
    });
  }
  for (std::thread& w : writers) w.join();
  shutdown(fds[0], SHUT_WR);  // a lost batch leaves the reader short: it ends at EOF
  reader.join();
  close(fds[0]);
  close(fds[1]);
  ASSERT_EQ(received.size(), size_t{kThreads} * kEach);
  std::vector<int> next(kThreads, 0);
  for (const std::string& m : received) {
    const int t = m[0] - '0';
    ASSERT_EQ(m, std::to_string(t) + "." + std::to_string(next[t])) << "out of order or twice";
    ++next[t];
  }
}

}  // namespace
}  // namespace tandem

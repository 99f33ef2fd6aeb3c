// Length-prefixed frames on a byte stream (a TCP connection): each frame is its payload's size
// as 4 bytes, big-endian, then the payload.
//
//   std::string out;
//   AppendFrame(&out, payload);              // send `out`
//
//   FrameReader reader(64 << 20);            // frames above 64 MiB are an error
//   size_t n = read(fd, reader.Prepare(65536), 65536);
//   reader.Commit(n);
//   while (true) {
//     absl::StatusOr<std::optional<std::string_view>> frame = reader.Next();
//     if (!frame.ok()) { /* the peer is not speaking frames: close */ }
//     if (!frame->has_value()) break;        // wait for more bytes
//     Use(**frame);                          // valid until the next Prepare()
//   }
//
// Thread-compatible: one reader per connection, used by one thread at a time.
#ifndef TANDEM_COMMON_FRAMES_H_
#define TANDEM_COMMON_FRAMES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tandem {

inline constexpr size_t kFrameHeaderBytes = 4;

// The session socket (proto/worker.proto) as both ends speak it: the worker's challenge starts
// with this protocol name and a space, and neither end accepts a frame above this size (as a gRPC
// session's message limit).
inline constexpr char kSessionSocketProtocol[] = "tandem-session-v1";
inline constexpr size_t kMaxSessionFrameBytes = 64 << 20;

// Appends the 4-byte header of a `size`-byte frame.
void AppendFrameHeader(std::string* out, uint32_t size);
// Appends a whole frame: header and `payload` (at most 4 GiB - 1 bytes).
void AppendFrame(std::string* out, std::string_view payload);

// Sets up a connected TCP socket that carries frames between cluster members: TCP_NODELAY (a
// frame is a whole message; do not hold it back), and dead-peer detection: keepalive probes
// after 10 s idle, 5 s apart, and TCP_USER_TIMEOUT 25 s for data left unacknowledged, so a peer
// whose host vanished fails the connection within about 25 s whether or not data was in flight.
void SetUpClusterSocket(int fd);

// Sends as much of `bytes` as the socket `fd` takes without blocking: the count sent (0 when it
// is full), or an error naming errno (a broken connection).
absl::StatusOr<size_t> SendNow(int fd, std::string_view bytes);

// The write side of a framed socket written from whichever thread holds the write turn: its
// owner hands out one batch at a time and may hand the next from inside the completion of the
// last (RouterLink::Written, WorkerLink::WriteDone). Run() sends each batch's frame as far
// as the socket takes it at once and, rather than recursing, loops over a batch handed during
// `complete` on the same thread. The turn may pass to another thread as soon as `complete` has
// released it, so what marks "inside the loop" and the handed batch are the thread's own. A frame
// the socket takes only in part is left to the owner's asynchronous write (`rest(offset)`:
// bytes() from offset on), which then completes it.
//
// Thread-compatible: Run() is called by the holder of the write turn only.
class FrameSendLoop {
 public:
  // `Message` has ByteSizeLong() and AppendToString() (a protobuf message).
  template <typename Message, typename Complete, typename Rest, typename Failed>
  void Run(int fd, const Message* batch, Complete complete, Rest rest, Failed failed) {
    if (running_here_ == this) {  // from `complete` below, on this thread
      next_here_ = batch;
      return;
    }
    FrameSendLoop* const outer = running_here_;
    const void* const outer_next = next_here_;
    while (batch != nullptr) {
      out_.clear();
      AppendFrameHeader(&out_, static_cast<uint32_t>(batch->ByteSizeLong()));
      batch->AppendToString(&out_);
      absl::StatusOr<size_t> sent = SendNow(fd, out_);
      if (!sent.ok()) {
        failed(sent.status());
        break;
      }
      if (*sent < out_.size()) {
        rest(*sent);
        break;
      }
      // From here on another thread may hold the turn: only this thread's own state is used.
      running_here_ = this;
      next_here_ = nullptr;
      complete();
      batch = static_cast<const Message*>(next_here_);
      running_here_ = outer;
      next_here_ = outer_next;
    }
  }
  // The frame being sent.
  const std::string& bytes() const { return out_; }

 private:
  static inline thread_local FrameSendLoop* running_here_ = nullptr;
  static inline thread_local const void* next_here_ = nullptr;
  std::string out_;
};

class FrameReader {
 public:
  explicit FrameReader(size_t max_frame) : max_frame_(max_frame) {}

  // Frames from the next Next() on are checked against `max_frame` (a connection raises its
  // limit once the peer has authenticated; bytes already buffered are kept).
  void set_max_frame(size_t max_frame) { max_frame_ = max_frame; }

  // At least `n` writable bytes at the end of the buffered input (frames returned by Next()
  // before this call become invalid).
  char* Prepare(size_t n);
  // `n` bytes were written at Prepare()'s pointer.
  void Commit(size_t n) { end_ += n; }
  // The next complete frame's payload, nullopt when the bytes buffered do not hold one yet;
  // an InvalidArgument naming both sizes when a header announces more than max_frame bytes
  // (the stream cannot be resynchronised after that).
  absl::StatusOr<std::optional<std::string_view>> Next();
  // Bytes buffered and not yet returned as frames.
  size_t buffered() const { return end_ - start_; }

 private:
  size_t max_frame_;
  std::string buf_;
  size_t start_ = 0;  // the first byte not yet returned
  size_t end_ = 0;    // one past the last byte committed
};

}  // namespace tandem

#endif  // TANDEM_COMMON_FRAMES_H_

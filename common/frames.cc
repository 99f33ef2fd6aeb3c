#include "common/frames.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem {

void AppendFrameHeader(std::string* out, uint32_t size) {
  const char header[kFrameHeaderBytes] = {static_cast<char>(size >> 24),
                                          static_cast<char>(size >> 16),
                                          static_cast<char>(size >> 8), static_cast<char>(size)};
  out->append(header, kFrameHeaderBytes);
}

void AppendFrame(std::string* out, std::string_view payload) {
  AppendFrameHeader(out, static_cast<uint32_t>(payload.size()));
  out->append(payload);
}

void SetUpClusterSocket(int fd) {
  const int on = 1, idle_s = 10, interval_s = 5, probes = 3;
  const unsigned int user_timeout_ms = 25000;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

absl::StatusOr<size_t> SendNow(int fd, std::string_view bytes) {
  const ssize_t sent = ::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent >= 0) return static_cast<size_t>(sent);
  if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
  return absl::UnavailableError(std::strerror(errno));
}

char* FrameReader::Prepare(size_t n) {
  if (start_ == end_) {
    start_ = end_ = 0;
  } else if (start_ > 0 && end_ + n > buf_.size()) {
    std::memmove(buf_.data(), buf_.data() + start_, end_ - start_);
    end_ -= start_;
    start_ = 0;
  }
  if (end_ + n > buf_.size()) buf_.resize(end_ + n);
  return buf_.data() + end_;
}

absl::StatusOr<std::optional<std::string_view>> FrameReader::Next() {
  if (end_ - start_ < kFrameHeaderBytes) return std::nullopt;
  const auto* h = reinterpret_cast<const unsigned char*>(buf_.data() + start_);
  const size_t size = (size_t{h[0]} << 24) | (size_t{h[1]} << 16) | (size_t{h[2]} << 8) | h[3];
  if (size > max_frame_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a frame of ", size, " bytes is larger than the limit of ", max_frame_, " bytes"));
  }
  if (end_ - start_ < kFrameHeaderBytes + size) return std::nullopt;
  std::string_view frame(buf_.data() + start_ + kFrameHeaderBytes, size);
  start_ += kFrameHeaderBytes + size;
  return frame;
}

}  // namespace tandem

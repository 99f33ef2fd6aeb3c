// The session socket's rules for a connection that has not authenticated yet
// (worker/session_socket.h), apart from its I/O so that unit tests and a fuzzer drive them.
//
// Before the router's first message has proved the cluster secret, a connection may hold little:
// its frames are limited to kMaxPreAuthFrameBytes (the first message is the router's token and
// nothing else: a few dozen bytes), it must send that message within kPreAuthTimeout, and at most
// kMaxPreAuthConnections such connections are open at once, kMaxPreAuthConnectionsPerAddress from
// one source address; a connection beyond either cap is closed at accept. An authenticated
// connection counts against neither cap and takes frames up to kMaxSessionFrameBytes
// (common/frames.h).
#ifndef TANDEM_WORKER_SESSION_PREAUTH_H_
#define TANDEM_WORKER_SESSION_PREAUTH_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/worker.pb.h"

namespace tandem::worker {

inline constexpr size_t kMaxPreAuthFrameBytes = 4 << 10;
inline constexpr absl::Duration kPreAuthTimeout = absl::Seconds(10);
inline constexpr int kMaxPreAuthConnections = 64;
inline constexpr int kMaxPreAuthConnectionsPerAddress = 16;

// Checks the router's first message, one frame's payload, on a connection that was sent
// `challenge`, of the worker whose instance id is `audience`. OK: `*up` holds the message (its
// calls are the session's first). Otherwise INVALID_ARGUMENT ("a N-byte message on the session
// socket is not a SessionUp") or, with a non-empty `secret`, UNAUTHENTICATED from the token check
// (common/cluster_token.h: a token for this challenge and this audience). With an empty secret any
// SessionUp is accepted. Does not allocate more than `frame` needs to parse.
absl::Status OpenFirstSessionMessage(std::string_view secret, std::string_view challenge,
                                     std::string_view audience, std::string_view frame,
                                     absl::Time now, proto::SessionUp* up);

// Counts the connections that have not authenticated, in total and per source address, against
// the caps above (or the ones given, for tests).
//
// Thread-compatible: the session socket uses it from its I/O thread only.
class PreAuthAdmission {
 public:
  PreAuthAdmission(int max_total = kMaxPreAuthConnections,
                   int max_per_address = kMaxPreAuthConnectionsPerAddress)
      : max_total_(max_total), max_per_address_(max_per_address) {}
  PreAuthAdmission(const PreAuthAdmission&) = delete;
  PreAuthAdmission& operator=(const PreAuthAdmission&) = delete;

  // True (and the connection is counted until Leave) when both caps have room; false otherwise
  // (the caller closes the connection).
  bool TryAdmit(const std::string& address);
  // The connection admitted from `address` authenticated or closed. Once per TryAdmit that was
  // true.
  void Leave(const std::string& address);
  int total() const { return total_; }

 private:
  const int max_total_;
  const int max_per_address_;
  int total_ = 0;
  std::unordered_map<std::string, int> by_address_;  // only addresses with a count above 0
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_SESSION_PREAUTH_H_

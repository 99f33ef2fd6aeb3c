// The receiving half of the tcp backend (also the rdma backend's control channel): authenticates
// connections on the engine's ROUTER socket and applies their writes to registered memory.
//
// Per connection (keyed by ZMQ routing id) the server is in one of these states:
//   (none) --kHello well-formed, room in the pool--> challenged (a PendingHandshake)
//   challenged --kAuth with the right proof, compatible record--> authenticated (a Session)
//   authenticated --kBye--> (none)
//   A Hello refused for lack of room, or a failed Auth, is answered with kReject and leaves (none)
//   behind; a malformed Hello is answered with kReject and changes nothing. An Auth after the
//   handshake expired, and frames of a connection that is not authenticated or that carry another
//   session id, are dropped unanswered and counted (the client's handshake deadline reports it).
//
// What a stranger (no cluster secret) can do, and what it costs (EngineOptions::connection_limits):
// - Challenged connections live in a HandshakePool apart from the sessions: at most
//   max_pending_handshakes in total and max_pending_per_source per peer address ("Peer-Address"
//   of the ZMQ message), each forgotten pending_handshake_timeout after its Hello. A Hello that
//   finds no room is refused ("too many pending handshakes"); no entry, and never a session, is
//   evicted for it. Each entry holds at most one Hello's worth of bytes (kMaxHelloBytes).
// - A stranger learns nothing of this engine beyond its name (in the challenge, as in its
//   descriptor) and a proof it cannot use: the compatibility record is checked only after a
//   successful Auth, and refusals before that carry the generic reasons "malformed hello",
//   "too many pending handshakes" and "authentication failed". An authenticated but
//   incompatible peer gets the detailed reason (the field and both values).
// - Refused handshakes and dropped frames are logged at most once per refusal_log_interval each,
//   with the number not logged since the previous line; EngineCounters count every one.
// Authenticated sessions (members only) are capped at max_sessions; see OnAuth for eviction.
//
// Not thread-safe: used only by the engine's I/O thread. Does not own the socket or regions.
#ifndef TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_
#define TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log_every.h"
#include "kvtransfer/counters.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/tcp/handshake_pool.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

// Answers a kControl request of an authenticated peer (its engine name, the request body).
using ControlHandler =
    std::function<absl::StatusOr<std::string>(const std::string& peer, const std::string& body)>;

// OK if every cap is at least 1 and the pending-handshake timeout is positive; backends whose
// endpoint runs a TcpServer check their options with it.
absl::Status ValidateConnectionLimits(const ConnectionLimits& limits);

// Logs events that a stranger can cause as fast as it likes: one warning line per interval,
// carrying how many were not logged since the previous line. Not thread-safe (LogEvery is, the
// suppressed count is not).
class RefusalLog {
 public:
  explicit RefusalLog(absl::Duration every) : every_(every) {}
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;

  // Logs `line` unless a line was logged less than an interval ago.
  void Warn(const std::string& line);
  uint64_t lines() const { return lines_; }
  uint64_t suppressed() const { return suppressed_total_; }

 private:
  LogEvery every_;
  uint64_t suppressed_ = 0;  // since the last line
  uint64_t suppressed_total_ = 0;
  uint64_t lines_ = 0;
};

class TcpServer {
 public:
  // Monotonic time; tests inject a fake one.
  using Clock = std::function<MonoClock::time_point()>;

  // `options`, `regions` and `counters` must outlive the server. Without `on_control`, kControl
  // frames are refused.
  TcpServer(const EngineOptions& options, const RegionTable* regions, EngineCounters* counters,
            ControlHandler on_control = nullptr, Clock clock = &MonoNow);
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  // Handles one message read from the ROUTER socket: parts[0] is the routing id. Replies (if
  // any) go out on `router` without blocking.
  void HandleMessage(zmq::socket_t& router, std::vector<zmq::message_t>& parts);

  // Authenticated sessions.
  size_t sessions() const { return sessions_.size(); }
  size_t pending_handshakes() const { return pending_.size(); }
  const RefusalLog& handshake_log() const { return handshake_log_; }
  const RefusalLog& drop_log() const { return drop_log_; }

 private:
  struct Session {
    std::string client_name;  // proven by the handshake
    uint64_t id = 0;
    MonoClock::time_point last_active;
  };

  void OnHello(zmq::socket_t& router, const std::string& rid, const std::string& source,
               const zmq::message_t& body);
  void OnAuth(zmq::socket_t& router, const std::string& rid, const std::string& source,
              const zmq::message_t& body);
  void EvictIdlestSession(zmq::socket_t& router);
  void OnWrite(zmq::socket_t& router, const std::string& rid, const Session& s,
               const FrameHeader& h, const zmq::message_t& body);
  void OnWriteMulti(zmq::socket_t& router, const std::string& rid, const Session& s,
                    const FrameHeader& h, const zmq::message_t& body);
  void Nack(zmq::socket_t& router, const std::string& rid, const Session& s, const FrameHeader& h,
            const absl::Status& why);
  void Reply(zmq::socket_t& router, const std::string& rid, const FrameHeader& h,
             const std::string& body);
  // Counts and logs (rate-limited) a refused handshake and sends kReject{code, reason}. `reason`
  // goes to the peer, `detail` only to the log.
  void Refuse(zmq::socket_t& router, const std::string& rid, const std::string& source,
              absl::StatusCode code, const std::string& reason, const std::string& detail);
  void Reject(zmq::socket_t& router, const std::string& rid, absl::StatusCode code,
              const std::string& reason);
  void Drop(const std::string& source, const std::string& why);

  const EngineOptions& options_;
  const RegionTable* regions_;
  EngineCounters* counters_;
  ControlHandler on_control_;
  Clock clock_;
  HandshakePool pending_;
  std::map<std::string, Session> sessions_;  // by routing id
  RefusalLog handshake_log_;
  RefusalLog drop_log_;
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_

// The receiving half of the tcp backend: authenticates connections on the engine's ROUTER
// socket and applies their writes to registered memory.
//
// Session state machine per connection (keyed by ZMQ routing id), SessionState:
//   (none) --kHello ok--> kChallenged --kAuth ok--> kAuthenticated --kBye--> (none)
//   Any failure sends kReject{reason} and forgets the connection; frames of a connection that is
//   not kAuthenticated, or that carry another session id, are dropped and counted.
// At most kMaxSessions connections are remembered; the oldest is evicted beyond that.
// Not thread-safe: used only by the engine's I/O thread. Does not own the socket or regions.
#ifndef TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_
#define TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "kvtransfer/counters.h"
#include "kvtransfer/frame.h"
#include "kvtransfer/region_table.h"
#include "kvtransfer/transfer_engine.h"

namespace tandem::kv {

// Answers a kControl request of an authenticated peer (its engine name, the request body).
using ControlHandler =
    std::function<absl::StatusOr<std::string>(const std::string& peer, const std::string& body)>;

class TcpServer {
 public:
  static constexpr size_t kMaxSessions = 4096;

  // `regions` and `counters` must outlive the server. Without `on_control`, kControl frames are
  // refused.
  TcpServer(const EngineOptions& options, const RegionTable* regions, EngineCounters* counters,
            ControlHandler on_control = nullptr)
      : options_(options),
        regions_(regions),
        counters_(counters),
        on_control_(std::move(on_control)) {}
  TcpServer(const TcpServer&) = delete;
  TcpServer& operator=(const TcpServer&) = delete;

  // Handles one message read from the ROUTER socket: parts[0] is the routing id. Replies (if
  // any) go out on `router` without blocking.
  void HandleMessage(zmq::socket_t& router, std::vector<zmq::message_t>& parts);

  size_t sessions() const { return sessions_.size(); }

 private:
  enum class SessionState { kChallenged, kAuthenticated };
  struct Session {
    SessionState state = SessionState::kChallenged;
    std::string client_nonce;
    std::string server_nonce;
    std::string client_name;
    uint64_t id = 0;
  };

  void OnHello(zmq::socket_t& router, const std::string& rid, const std::string& body);
  void OnAuth(zmq::socket_t& router, const std::string& rid, const std::string& body);
  void OnWrite(zmq::socket_t& router, const std::string& rid, const Session& s,
               const FrameHeader& h, const zmq::message_t& body);
  void OnWriteMulti(zmq::socket_t& router, const std::string& rid, const Session& s,
                    const FrameHeader& h, const zmq::message_t& body);
  void Nack(zmq::socket_t& router, const std::string& rid, const Session& s, const FrameHeader& h,
            const absl::Status& why);
  void Reply(zmq::socket_t& router, const std::string& rid, const FrameHeader& h,
             const std::string& body);
  void Reject(zmq::socket_t& router, const std::string& rid, const std::string& reason);
  void Drop(const std::string& why);

  const EngineOptions& options_;
  const RegionTable* regions_;
  EngineCounters* counters_;
  ControlHandler on_control_;
  std::map<std::string, Session> sessions_;
  std::deque<std::string> session_order_;  // insertion order, for eviction
};

}  // namespace tandem::kv

#endif  // TANDEM_KVTRANSFER_TCP_TCP_SERVER_H_

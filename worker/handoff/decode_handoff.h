// DecodeHandoff: the decode worker's side of the KV handoff, the KvHandoff WorkerCore calls for a
// decode leg that names a prefill worker.
//
// Per prefill worker (bootstrap host:port) one ZMQ connection: on first use it registers this
// worker (RegisterPeer: KV layout + transfer descriptor; the reply carries the prefill worker's
// verdict, e.g. a layout mismatch naming both values). Per leg: the request becomes decode-only;
// when the engine has reserved its blocks, a RoomRegistration tells the prefill worker where to
// write; the prefill worker's CompletionNotice (over the transfer engine, after the last byte)
// hands the first token to the engine, or ends the leg with the prefill side's error. A room that
// hears nothing within --bootstrap-timeout + --transfer-timeout is aborted here and on the prefill
// worker (RoomAbort).
//
// The connection to a prefill worker is kept for the life of this object (ZMQ reconnects it), and
// a background thread reads what the prefill worker sends on it. A prefill worker that restarted,
// or that lost its transfer connection to us, answers a room with RegisterAgain: we send
// RegisterPeer again on the same connection (at most once a second per prefill worker), then the
// room's registration once more, which the prefill worker reads after the registration. A
// registration it refuses (say, it restarted with another model) ends the rooms waiting on it
// with its reason, and the next leg handshakes anew and gets that reason as its error.
//
// Thread-safe. The Engine is borrowed and must outlive this object.
#ifndef TANDEM_WORKER_HANDOFF_DECODE_HANDOFF_H_
#define TANDEM_WORKER_HANDOFF_DECODE_HANDOFF_H_

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log_every.h"
#include "engine/engine.h"
#include "kvtransfer/transfer_engine.h"
#include "proto/kv_control.pb.h"
#include "worker/handoff/handoff_options.h"
#include "worker/worker_core.h"
#include "zmq.hpp"

namespace tandem::worker {

// The first token a prefill worker's CompletionNotice hands over. Errors: the prefill side's own
// error (its message as sent) when the notice is not ok; InvalidArgument naming the room when the
// alternatives' ids and logprobs differ in count. The engine checks the values themselves
// (engine::ValidateFirstToken) when it takes the token.
absl::StatusOr<engine::SampleResult> FirstTokenOfNotice(const proto::CompletionNotice& notice);

class DecodeHandoff : public KvHandoff {
 public:
  // Starts the transfer engine with the engine's KV memory registered.
  static absl::StatusOr<std::unique_ptr<DecodeHandoff>> Create(engine::Engine* engine,
                                                               HandoffOptions options);
  ~DecodeHandoff() override;
  DecodeHandoff(const DecodeHandoff&) = delete;
  DecodeHandoff& operator=(const DecodeHandoff&) = delete;

  // Errors end the leg before it starts: no room, an unreachable prefill worker or one that
  // refuses this worker (UNAVAILABLE / FAILED_PRECONDITION with its reason), a room in use.
  absl::Status PrepareDecodeLeg(const proto::DecodeRequest& leg, engine::Request* request) override;
  // Rooms waiting for their KV.
  int64_t inflight() const;
  void Shutdown();

 private:
  struct Peer {
    std::string address;  // host:port of the bootstrap server
    std::mutex mu;        // serialises use of `socket` and guards the fields below
    zmq::socket_t socket;
    bool registered = false;
    // RegisterPeer resent then (monotonic; nullopt: never).
    std::optional<MonoClock::time_point> last_register_again;
  };
  struct Room {
    std::string rid;
    std::shared_ptr<Peer> peer;
    Deadline deadline = Deadline::Never();  // the room's budget, on this host's monotonic clock
    std::string registration;  // the sealed RoomRegistration, once the blocks are reserved
    bool resent = false;       // sent again after a RegisterAgain (once at most)
  };

  DecodeHandoff(engine::Engine* engine, HandoffOptions options);
  absl::Status Start();
  absl::StatusOr<std::shared_ptr<Peer>> GetPeer(const std::string& host, int port);
  std::string SealedRegisterPeer() const;
  void Send(Peer* peer, const std::string& bytes);
  void OnNotification(const std::string& from, const std::string& message);
  // Reads and handles what every registered prefill worker sent (RegisterAgain and the replies
  // to registrations sent again). Background thread only.
  void ReadPeers();
  void OnRegisterAgain(const std::shared_ptr<Peer>& peer, const proto::RegisterAgain& m);
  void OnRegisterReply(const std::shared_ptr<Peer>& peer, const proto::RegisterPeerReply& m);
  void ExpireRooms();
  void BackgroundLoop();

  engine::Engine* engine_;
  HandoffOptions options_;
  kv::CompatibilityRecord compat_;
  kv::TransferEnginePtr transfer_;
  std::string descriptor_;
  uint64_t incarnation_;  // random, this process's (RegisterPeer.incarnation)
  zmq::context_t zmq_context_{1};
  std::atomic<bool> stop_{false};
  std::thread background_;

  LogEvery dropped_logs_{absl::Seconds(1)};  // messages from prefill workers dropped

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  std::map<std::string, std::shared_ptr<Peer>> peers_;  // by bootstrap address
  std::map<uint64_t, Room> rooms_;                      // awaiting the KV
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_DECODE_HANDOFF_H_

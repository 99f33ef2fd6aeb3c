// DecodeHandoff: the decode worker's side of the KV handoff, the KvHandoff WorkerCore calls for a
// decode leg that names a prefill worker.
//
// Per prefill worker (bootstrap host:port) one ZMQ connection: on first use it registers this
// worker (RegisterPeer: KV layout + transfer descriptor; the reply carries the prefill worker's
// verdict, e.g. a layout mismatch naming both values). Per leg: the request becomes decode-only;
// when the engine has reserved its blocks, a RoomRegistration tells the prefill worker where to
// write; the prefill worker's CompletionNotice (over the transfer engine, after the last byte)
// hands the first token to the engine, or ends the leg with the prefill side's error. The leg's
// outputs from then on report the notice's cached_tokens (the prompt tokens the prefill worker
// reused from its radix cache) as their own: the decode worker computed none of the prompt, and
// the client is told what serving its prompt reused. A room that
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
// Each room's rules are a DecodeRoomMachine (worker/handoff/decode_room.h: states, events,
// transitions). Events (blocks reserved, RegisterAgain, notice, refusal, budget, the request's
// end) are applied under mu_; engine calls and sends happen after it is released. The room's
// budget is monotonic (HandoffOptions::now) and crosses to the prefill worker only as the time
// left (RoomRegistration.budget_ms).
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

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log_every.h"
#include "engine/engine.h"
#include "kvtransfer/transfer_engine.h"
#include "proto/kv_control.pb.h"
#include "worker/handoff/decode_room.h"
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
  // Rooms whose engine request has not ended (waiting for their KV, or decoding).
  int64_t inflight() const;
  void Shutdown();

 private:
  // One prefill worker's bootstrap connection.
  struct Peer {
    std::string address;  // host:port of the bootstrap server; set before the Peer is shared
    absl::Mutex mu;       // serialises use of `socket` (a handshake holds it while it waits)
    zmq::socket_t socket ABSL_GUARDED_BY(mu);
    bool registered ABSL_GUARDED_BY(mu) = false;
    // RegisterPeer resent then (monotonic; nullopt: never).
    std::optional<MonoClock::time_point> last_register_again ABSL_GUARDED_BY(mu);
  };
  struct Room {
    std::string rid;
    std::shared_ptr<Peer> peer;
    DecodeRoomMachine machine;  // the room's state and budget (worker/handoff/decode_room.h)
    // The prompt tokens the prefill worker served from its radix cache (its CompletionNotice),
    // -1 until an ok notice arrived. Shared with the leg's output callback, which reports it as
    // the leg's cached_tokens: this worker computed none of the prompt.
    std::shared_ptr<std::atomic<int64_t>> prefill_cached;
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

  // The background thread sleeps on these between rounds. std::condition_variable's wait_for
  // reads the monotonic clock; the Debian Abseil's timed waits read the wall clock, so a clock
  // step (or a worker run under libfaketime) would stall or spin the loop that ends rooms.
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;  // notified when stop_ is set

  // Never held while a Peer's mutex is taken, nor the other way round.
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Peer>> peers_ ABSL_GUARDED_BY(mu_);  // by address
  std::map<uint64_t, Room> rooms_ ABSL_GUARDED_BY(mu_);  // until the engine request ends
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_DECODE_HANDOFF_H_

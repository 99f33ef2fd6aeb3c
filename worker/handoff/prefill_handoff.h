// PrefillHandoff: the prefill worker's side of the KV handoff (docs/worker.md "KV handoff").
//
//  - A bootstrap server (ZMQ ROUTER on --disaggregation-bootstrap-port) where decode workers
//    register (RegisterPeer: their KV layout, checked against ours with an error naming both
//    values, and their transfer descriptor, which we import: the transfer engine authenticates
//    both ways with the cluster secret) and register rooms (RoomRegistration: the blocks reserved
//    for one request's prompt). Every message is sealed with the cluster secret; one that is not
//    (or is above kMaxControlBytes) is dropped, logged at most once a second with the count
//    dropped meanwhile, and answered (a refusal naming why) at most ten times a second in all;
//    at most kBootstrapQueuedMessages are queued per connection before their seals are checked.
//    A decode worker is known by its id, descriptor and incarnation (a random number per
//    process): a registration that changes any of them, or that comes while the transfer engine
//    has declared the known peer dead, imports the descriptor anew. A room from a decode worker
//    we do not know (this worker restarted) or whose transfer peer is dead (the link was lost) is
//    not started: the answer is RegisterAgain, and the decode worker registers again on the same
//    connection and resends the room. Descriptors are imported only when their owner has just
//    sent them, so the bootstrap thread never waits on an endpoint that is gone.
//  - RunPrefill, the gRPC prefill leg: waits (up to --bootstrap-timeout) for its room's
//    registration, runs the prompt as a prefill-only engine request, pushes each layer's K/V into
//    the decode worker's blocks as soon as the layer is computed, and once every write has been
//    acknowledged sends a CompletionNotice with the first token through the transfer engine
//    (delivered only after those writes were applied), then releases the blocks and answers.
//  - A leg with sampling_params.max_new_tokens 0 has no decode leg: it waits for no
//    registration, runs the prompt as an ordinary engine request that generates nothing (its
//    blocks go to the radix cache and are released at once) and answers with
//    PrefillResponse.final_event (finish_reason LENGTH 0).
//  - On any failure (no registration in time, a write failing or timing out, an abort from the
//    router or the decode side, the engine aborting) the room's pending writes are cancelled, a
//    CompletionNotice with ok=false tells the decode worker why, the blocks are released and the
//    leg answers with the error.
//
// Each leg's failure rules are a PrefillLegMachine (worker/handoff/prefill_leg.h: its states,
// events and transitions): every engine, transfer, bootstrap and timer event of the leg is
// applied to it under the leg's own mutex, and what it decides (start, write, notify, answer,
// cancel, abort) is carried out after that mutex is released, so no callback (the engine's, the
// transfer engine's, the leg's `done`) runs with a lock held. All deadlines are monotonic
// (HandoffOptions::now); the decode worker's budget arrives relative (RoomRegistration.budget_ms).
//
// Thread-safe. The Engine is borrowed and must outlive this object.
#ifndef TANDEM_WORKER_HANDOFF_PREFILL_HANDOFF_H_
#define TANDEM_WORKER_HANDOFF_PREFILL_HANDOFF_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
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
#include "proto/worker.pb.h"
#include "worker/handoff/handoff_options.h"
#include "worker/handoff/prefill_leg.h"
#include "worker/worker_core.h"
#include "zmq.hpp"

namespace tandem::worker {

// Messages the bootstrap server queues per connection before it reads them (ZMQ_RCVHWM).
inline constexpr int kBootstrapQueuedMessages = 16;

class PrefillHandoff : public PrefillLegs {
 public:
  // Starts the transfer engine (registering the engine's KV memory) and the bootstrap server.
  // Errors name the flag: a port in use, a backend that cannot start.
  static absl::StatusOr<std::unique_ptr<PrefillHandoff>> Create(engine::Engine* engine,
                                                                HandoffOptions options);
  ~PrefillHandoff() override;
  PrefillHandoff(const PrefillHandoff&) = delete;
  PrefillHandoff& operator=(const PrefillHandoff&) = delete;

  // Runs one prefill leg; `done` is called exactly once, on some internal thread.
  void RunPrefill(const proto::PrefillRequest& request, PrefillDone done) override;
  // Fails the leg of `room` (the router's or an operator's abort). False if no such leg.
  bool AbortRoom(uint64_t room, const std::string& reason) override;
  int64_t inflight() const override;
  int bootstrap_port() const { return bootstrap_port_; }
  // Fails every leg ("shutting down"), stops the bootstrap server and the transfer engine.
  void Shutdown();

 private:
  struct Registration {
    std::string decode_id;
    kv::PeerId peer = 0;
    std::vector<int32_t> blocks;
    int32_t num_tokens = 0;
    Deadline deadline = Deadline::Never();  // the decode worker's budget, from its arrival
  };
  struct Leg;

  PrefillHandoff(engine::Engine* engine, HandoffOptions options);
  absl::Status Start();

  // The bootstrap server (prefill_bootstrap.cc). Both Handle* return the sealed reply to send
  // back ("" for none).
  void BootstrapLoop();
  std::string HandleRegisterPeer(const proto::RegisterPeer& m);
  std::string HandleRoom(const proto::RoomRegistration& m);

  // The legs. Every event goes through the leg's PrefillLegMachine under the leg's mutex; the
  // actions it returns are carried out by Run with no lock held.
  static PrefillLegEvent Failure(absl::Status status);
  // A registration for `room`: to its leg, or kept until the leg comes (within its budget).
  void DeliverRegistration(uint64_t room, Registration reg);
  void Register(const std::shared_ptr<Leg>& leg, Registration reg);
  void Apply(const std::shared_ptr<Leg>& leg, const PrefillLegEvent& event);
  void Run(const std::shared_ptr<Leg>& leg, PrefillLegActions actions);
  void Forget(const std::shared_ptr<Leg>& leg);  // drops it from legs_
  void CheckDeadlines();
  void StartLeg(const std::shared_ptr<Leg>& leg);
  // A leg with max_new_tokens 0: computes (and caches) the prompt without a room and answers
  // with PrefillResponse.final_event.
  void StartPrefillOnlyLeg(const std::shared_ptr<Leg>& leg);
  void OnKvLayer(const std::shared_ptr<Leg>& leg, const engine::KvLayerEvent& e);
  void OnOutput(const std::shared_ptr<Leg>& leg, const engine::RequestOutput& out);
  void SendNotice(const std::shared_ptr<Leg>& leg);
  proto::PrefillResponse Answer(const std::shared_ptr<Leg>& leg);

  engine::Engine* engine_;
  HandoffOptions options_;
  kv::CompatibilityRecord compat_;
  kv::TransferEnginePtr transfer_;
  int bootstrap_port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread bootstrap_thread_;
  zmq::context_t zmq_context_{1};
  zmq::socket_t router_;                     // the bootstrap thread's only, once started
  LogEvery refusal_logs_{absl::Seconds(1)};  // messages dropped by the bootstrap server
  // Answers to senders without the secret, all together.
  LogEvery stranger_answers_{absl::Milliseconds(100)};

  struct KnownPeer {
    kv::PeerId peer = 0;
    std::string descriptor;
    uint64_t incarnation = 0;
  };
  // Never held while a leg's mutex is taken, nor the other way round.
  mutable absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Leg>> legs_ ABSL_GUARDED_BY(mu_);  // by room, until answered
  // Rooms registered before their leg.
  std::map<uint64_t, Registration> registrations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, KnownPeer> peers_ ABSL_GUARDED_BY(mu_);  // by decode worker id
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_HANDOFF_PREFILL_HANDOFF_H_

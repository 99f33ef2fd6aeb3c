// WorkerCore: what the Worker gRPC service does, without gRPC: decode legs (submit to the Engine,
// turn its outputs into DecodeEvents, abort), Abort by rid or bootstrap room, Health, GetLoad,
// FlushCache, GetServerInfo, phase metrics and the drain. The gRPC reactors (grpc_server.cc)
// only move messages between the wire and this class, so tests can drive it directly.
//
// Decode legs: StartDecode hands the request to the Engine; the leg's events go to the caller's
// sink on the engine loop thread (possibly before StartDecode returns), each with the tokens
// since the previous one, the last with `finished` set. A non-streaming leg gets only that last
// event, holding everything. Every successful StartDecode ends with exactly one last event,
// whatever happens (finish, Abort, client cancellation, drain, engine shutdown).
//
// Colocated legs (no bootstrap_host) need role kColocated (--local-prefill), or role kDecode with
// WorkerCoreOptions::decode_takes_colocated_legs (the router's conditional disaggregation:
// docs/router.md "Conditional disaggregation"); otherwise FAILED_PRECONDITION. Legs naming a
// prefill worker need a KvHandoff; without one they fail with UNIMPLEMENTED. A colocated worker
// refuses them (FAILED_PRECONDITION): the prefill worker named would hold the KV for a decode side
// that never comes.
//
// Parallel sampling: a leg with share_prompt_with (and no bootstrap_host) is accepted by decode
// and colocated workers alike. The engine shares the named live leg's full prompt blocks once
// that leg's prompt KV is complete (computed here, or received from a prefill worker), and this
// leg computes the rest: at most block_size prompt tokens, or its whole prompt when the named leg
// is not live here, has other input_ids or ends before its prompt KV is complete (never an error
// for that reason). A decode worker's engine runs the same model and scheduler, so computing
// those tokens needs no --local-prefill. CheckSharePromptWith says what is refused.
//
// Thread-safe. The Engine, the MetricsRegistry and the KvHandoff are borrowed: they must outlive
// this object, and the Engine must be shut down before this object is destroyed (its shutdown
// delivers the last events of live legs, which reach back into this object).
#ifndef TANDEM_WORKER_WORKER_CORE_H_
#define TANDEM_WORKER_WORKER_CORE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "common/steady_cond_var.h"
#include "common/timer_queue.h"
#include "engine/engine.h"
#include "proto/worker.pb.h"
#include "worker/phase_metrics.h"

namespace tandem::worker {

enum class WorkerRole { kPrefill, kDecode, kColocated };

struct WorkerCoreOptions {
  WorkerRole role = WorkerRole::kColocated;
  std::string model_path;
  std::string served_model_name;
  std::string transfer_backend;  // tcp | rdma ("" on a colocated worker)
  int bootstrap_port = 0;        // prefill workers
  // A decode worker also prefills legs that name no prefill worker (tandem-decode
  // --allow-local-prefill, on by default), with its own engine, while it keeps taking KV handoffs.
  bool decode_takes_colocated_legs = false;
  // Health(generate) counts a token produced this recently as proof that the model answers, so
  // a busy worker is not declared dead because its probe waits behind real requests (as SGLang).
  double health_recent_output_s = 2.0;
  double health_generate_timeout_s = 30.0;  // CheckHealth: a probe slower than this fails
};

// The KV handoff from a prefill worker (disaggregated decode legs). Implemented by the decode
// daemon's transfer glue; WorkerCore calls it for a leg whose bootstrap_host is set.
class KvHandoff {
 public:
  virtual ~KvHandoff() = default;
  // Turns `request` (rid, input ids, sampling and callbacks already filled) into a decode-only
  // request fed by the prefill worker `leg` names. Errors end the leg before it starts.
  virtual absl::Status PrepareDecodeLeg(const proto::DecodeRequest& leg,
                                        engine::Request* request) = 0;
};

// The prefill leg of a disaggregated request: prefill, push the KV to the decode worker that
// registered the room, answer with the first token (worker/handoff/prefill_handoff.h).
class PrefillLegs {
 public:
  virtual ~PrefillLegs() = default;
  using PrefillDone = std::function<void(absl::StatusOr<proto::PrefillResponse>)>;
  // `done` runs exactly once, on some internal thread.
  virtual void RunPrefill(const proto::PrefillRequest& request, PrefillDone done) = 0;
  // Fails the leg of `room`; false if there is none.
  virtual bool AbortRoom(uint64_t room, const std::string& reason) = 0;
  // Rooms whose KV is being computed or moved.
  virtual int64_t inflight() const = 0;
};

// The longest share_prompt_with accepted, as the router's longest rid.
inline constexpr size_t kMaxSharePromptWithBytes = 256;

// INVALID_ARGUMENT for a leg's share_prompt_with (non-empty) that is longer than
// kMaxSharePromptWithBytes or not printable ASCII, that comes with a bootstrap_host (the leg
// would receive its prompt KV twice), or that names the leg's own rid (a caller's bug: a leg
// cannot wait for its own prompt).
absl::Status CheckSharePromptWith(const proto::DecodeRequest& request);

// Receives one leg's events; see the class comment.
using DecodeEventSink = std::function<void(proto::DecodeEvent event)>;

// Names one started leg (a rid may be reused by a later request once this one ended).
struct LegId {
  std::string rid;
  uint64_t serial = 0;
};

class WorkerCore {
 public:
  WorkerCore(engine::Engine* engine, WorkerCoreOptions options, MetricsRegistry* registry,
             KvHandoff* handoff = nullptr, PrefillLegs* prefill = nullptr);
  ~WorkerCore();
  WorkerCore(const WorkerCore&) = delete;
  WorkerCore& operator=(const WorkerCore&) = delete;

  // Starts a decode leg (an empty rid gets a generated one). Errors, as the status to return to
  // the caller: UNAVAILABLE while draining, INVALID_ARGUMENT naming the bad field or input,
  // FAILED_PRECONDITION / UNIMPLEMENTED for a mode this worker cannot serve, ALREADY_EXISTS for a
  // live rid, RESOURCE_EXHAUSTED when full. On error `sink` is never called.
  absl::StatusOr<LegId> StartDecode(const proto::DecodeRequest& request, DecodeEventSink sink);
  // The leg's client went away: abort it. Its last event still reaches the sink.
  void CancelDecode(const LegId& leg);

  // A prefill leg (role kPrefill with PrefillLegs). Errors go to `done` too: UNAVAILABLE while
  // draining, FAILED_PRECONDITION on a worker that is not a prefill worker.
  void StartPrefill(const proto::PrefillRequest& request, PrefillLegs::PrefillDone done);

  proto::AbortResponse Abort(const proto::AbortRequest& request);
  // `done` runs once, on the engine loop thread when a probe request runs, else inline.
  void Health(const proto::HealthRequest& request, std::function<void(proto::HealthResponse)> done);
  // The HTTP /health: Health(generate=true), and UNAVAILABLE while draining. `done` gets OK or
  // why the worker is not serving, exactly once, and the call never blocks: askers that arrive
  // while a probe is out share it (a flood of /health costs the engine one request), and an
  // engine that does not answer within health_generate_timeout_s fails them all from the health
  // timer's thread, so a wedged engine holds none of the status port's threads.
  void CheckHealth(std::function<void(absl::Status)> done);
  proto::LoadReport GetLoad() const;
  // Does not wait behind a forward pass: a worker with live requests answers flushed=false.
  proto::FlushCacheResponse FlushCache();
  proto::ServerInfo GetServerInfo() const;
  // KV events of the engine's radix cache (docs/router.md "KV events"): a snapshot or the events
  // after request.after_seq, at most kMaxKvEventsPerReply. FailedPrecondition when the engine
  // publishes none; ResourceExhausted for a snapshot above kMaxKvSnapshotBlocks (the router then
  // routes on its own tree). Never waits on the engine loop.
  static constexpr uint32_t kMaxKvEventsPerReply = 16384;
  static constexpr size_t kMaxKvSnapshotBlocks = size_t{1} << 22;  // 32 MiB of hashes
  absl::StatusOr<proto::KvEventsReply> GetKvEvents(const proto::KvEventsRequest& request) const;

  // Draining: new legs are refused with UNAVAILABLE, Health reports DRAINING.
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  int64_t live_legs() const;
  // Blocks until no leg is live; false on timeout.
  bool WaitNoLegs(double timeout_seconds);
  // Aborts every live decode leg with `message` (their last events carry it). Prefill legs end
  // through their PrefillLegs (the prefill daemon shuts its handoff down).
  void AbortAllLegs(const std::string& message);

 private:
  struct Leg;
  using Clock = std::chrono::steady_clock;

  void OnOutput(const std::shared_ptr<Leg>& leg, const engine::RequestOutput& out);
  void EndLeg(const Leg& leg);
  std::string NewRid(const char* prefix);

  engine::Engine* engine_;
  const WorkerCoreOptions options_;
  KvHandoff* handoff_;
  PrefillLegs* prefill_;
  std::atomic<int64_t> prefill_legs_{0};  // live prefill legs (for the drain)
  SteadyCondVar legs_changed_;            // a leg ended (WaitNoLegs)
  PhaseMetrics phase_metrics_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_output_ns_{0};  // steady clock, of the latest token produced
  std::atomic<int64_t> cache_hit_tokens_{0};
  std::atomic<int64_t> cache_query_tokens_{0};

  class HealthProbe;  // the CheckHealth askers sharing one probe
  absl::Mutex health_mu_;
  std::shared_ptr<HealthProbe> health_probe_ ABSL_GUARDED_BY(health_mu_);  // the latest

  mutable absl::Mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Leg>> legs_ ABSL_GUARDED_BY(mu_);  // by rid
  std::unordered_map<uint64_t, std::string> rooms_ ABSL_GUARDED_BY(mu_);             // room -> rid
  uint64_t next_serial_ ABSL_GUARDED_BY(mu_) = 1;

  // Last: destroyed first, so no timeout runs against the members above.
  TimerQueue health_timer_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_WORKER_CORE_H_

// WorkerRegistry: the router's set of workers, each with its gRPC client, health, polled load,
// in-flight count and circuit breaker; and the background loop that health-checks and polls them.
//
//   WorkerRegistry registry(options, &metrics);
//   ASSIGN_OR_RETURN(WorkerPtr w, registry.Add("http://10.0.0.7:30001", WorkerType::kRegular, {}));
//   registry.Start();                       // health + load loop; the first round runs at once
//   std::vector<WorkerPtr> ok = registry.Available(WorkerType::kRegular);   // for a policy
//   w->BeginRequest(); ... w->EndRequest(/*success=*/true);
//
// Health: a worker is probed with Health(generate=false) every health_check_interval (each
// probe times out after health_check_timeout). A new worker is unhealthy until its first
// successful probe (one is sent at once on Add). Afterwards it turns unhealthy after
// health_failure_threshold consecutive failed probes, or at once when it answers NOT_SERVING or
// DRAINING, or when a request leg reports it failed (ReportFailure, which also probes it at
// once); it turns healthy again after health_success_threshold consecutive successful probes.
// While unhealthy it is probed every kRecoveryProbeInterval (or the interval, if shorter), so a
// worker that answers again is back within seconds, not a whole interval later.
// Load: GetLoad every worker_load_check_interval (zero disables the polls), and right
// away when a worker turns healthy, so its KV blocks show from the start. last_error is the last
// failure seen (a probe, the proof, a failed leg); the next probe that finds the worker healthy
// clears it.
// Circuit breaker: request results (EndRequest) feed it. A health check that passes and leaves
// the worker healthy half-opens an open circuit at once (CircuitBreaker::HealthCheckPassed, at
// most once per health-check interval), so a restarted worker takes requests again within a
// probe rather than after --cb-timeout-duration-secs; its half_open trial then closes or reopens
// the circuit. Without a passing health check the open timeout applies.
//
// Proof (with a cluster secret): a worker is unverified until it proved the secret
// (WorkerClient::Prove); until then it gets no other call, no load poll and no request, is
// unhealthy, and its last_error starts "unverified: did not prove the cluster secret". The proof
// is asked for in place of its health probes: every kRecoveryProbeInterval while the worker
// cannot be reached (it may be starting), and every health-check interval once it answered
// without a valid proof (a stranger). A health probe the worker refuses as UNAUTHENTICATED (it
// restarted with a new instance id, or its secret changed) makes it unverified again and asks
// for a new proof at once.
//
// Metrics (label worker=url): tandem_router_worker_healthy (0/1),
// tandem_router_worker_circuit_state (0 closed, 1 open, 2 half_open),
// tandem_router_worker_inflight, tandem_router_worker_running_requests,
// tandem_router_worker_queued_requests, tandem_router_worker_free_kv_blocks,
// tandem_router_worker_registered (1 while registered), and
// tandem_router_worker_health_checks_total{worker,result} (result ok|failed). Metric children
// cannot be removed, so a removed worker's series stay, marked stale: registered=0, healthy=0,
// inflight/running/queued=0 (a worker added again under the same url reuses them).
//
// Thread-safety: everything is thread-safe. Ownership: workers are shared (WorkerPtr); one kept
// by a request after Remove() stays valid but is no longer probed. The MetricsRegistry must
// outlive the WorkerRegistry. Stop() (also run by the destructor) cancels probes in flight and
// joins the loop.
#ifndef TANDEM_ROUTER_WORKERS_WORKER_REGISTRY_H_
#define TANDEM_ROUTER_WORKERS_WORKER_REGISTRY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/steady_cond_var.h"
#include "proto/worker.pb.h"
#include "router/workers/circuit_breaker.h"
#include "router/workers/leg.h"
#include "router/workers/worker_client.h"

namespace tandem::router {

enum class WorkerType { kPrefill, kDecode, kRegular /* plain mode: decode --local-prefill */ };

// "prefill" | "decode" | "regular".
const char* WorkerTypeName(WorkerType type);

// A snapshot of one worker, for the admin API and metrics.
struct WorkerState {
  std::string url;
  WorkerType type = WorkerType::kRegular;
  std::optional<int> bootstrap_port;
  bool healthy = false;
  bool verified = false;  // proved the cluster secret (always true without one)
  bool draining = false;
  std::string circuit;     // "closed" | "open" | "half_open"
  int session_port = 0;    // the session socket its legs go to (0: none advertised, gRPC)
  int64_t inflight = 0;    // requests the router sent and that are not finished
  proto::LoadReport load;  // last polled
  std::string last_error;
};

struct RegistryOptions {
  std::string cluster_secret;  // proven on every call to a worker ("" sends none)
  int health_failure_threshold = 3;
  int health_success_threshold = 2;
  absl::Duration health_check_timeout = absl::Seconds(5);    // at least a second
  absl::Duration health_check_interval = absl::Seconds(60);  // at least a second
  int cb_failure_threshold = 10;
  int cb_success_threshold = 3;
  absl::Duration cb_timeout_duration = absl::Seconds(60);
  absl::Duration cb_window_duration = absl::Seconds(120);
  bool disable_circuit_breaker = false;
  int cb_half_open_max_trials = 1;  // requests in flight at once while half_open
  absl::Duration worker_load_check_interval = absl::Seconds(10);  // zero: no load polls
  // The clock for the circuit breakers (tests inject one).
  CircuitBreaker::NowFn now = &MonoNow;
};

class WorkerRegistry;

// One registered worker. Thread-safe; shared by the registry and requests using it.
class Worker {
 public:
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker();

  WorkerClient& client() { return *client_; }
  std::shared_ptr<WorkerClient> shared_client() const { return client_; }
  // Where its legs go: its client, unless the registry was given others (Add's `legs`).
  WorkerLegs& legs() { return *legs_; }
  const std::string& url() const { return client_->url(); }
  const std::string& host() const { return client_->host(); }  // the decode leg's bootstrap_host
  WorkerType type() const { return type_; }
  std::optional<int> bootstrap_port() const { return bootstrap_port_; }

  // healthy && !draining && the circuit breaker allows a request.
  bool Available() const;
  bool healthy() const;
  bool draining() const;
  // Requests counted from the moment a policy chose the worker until EndRequest.
  int64_t inflight() const { return inflight_.load(std::memory_order_relaxed); }
  // The last polled load (zeros before the first poll).
  proto::LoadReport load() const;

  // Counts a request against the worker; while its circuit is half_open, also one of the
  // breaker's trial requests (CircuitBreakerOptions::half_open_max_trials).
  void BeginRequest();
  // Ends one BeginRequest; `success` feeds the circuit breaker.
  void EndRequest(bool success);
  // Prompt tokens of this router's prefill legs on the worker, counted from selection until the
  // leg answers (the dispatcher adds and takes away; conditional disaggregation reads it: a burst
  // sees its own earlier legs, where a polled report lags). Never negative in use.
  void AddPrefillTokens(int64_t delta) {
    prefill_tokens_.fetch_add(delta, std::memory_order_relaxed);
  }
  int64_t prefill_tokens() const { return prefill_tokens_.load(std::memory_order_relaxed); }

  WorkerState Snapshot() const;

 private:
  friend class WorkerRegistry;
  struct Gauges {
    Gauge* healthy;
    Gauge* circuit;
    Gauge* inflight;
    Gauge* running;
    Gauge* queued;
    Gauge* free_blocks;
    Gauge* registered;
    // sgl-router's names for the same figures (docs/router.md "Metrics").
    Gauge* sgl_health;
    Gauge* sgl_running;
    Counter* sgl_processed;
    // sgl-router's PD counters for this worker's role (pd_prefill_* or pd_decode_*); null for
    // a regular worker.
    Counter* sgl_pd_requests;
    Counter* sgl_pd_errors;  // requests that failed for the worker's fault
  };
  Worker(std::shared_ptr<WorkerClient> client, std::shared_ptr<WorkerLegs> legs, WorkerType type,
         std::optional<int> bootstrap_port, const RegistryOptions& options, Gauges gauges,
         absl::Mutex* registry_mu);

  // Health probe results and failure reports (from the registry). OnProbe returns true when
  // this probe made the worker healthy.
  bool OnProbe(bool ok, proto::HealthResponse::Status status, const std::string& error);
  void OnProof(const absl::Status& status);
  void MarkFailed(const std::string& why);
  void OnLoad(const proto::LoadReport& load);
  void SetDraining();
  void PublishCircuitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishHealthLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishInflight() const;
  void MarkRemoved();

  const std::shared_ptr<WorkerClient> client_;
  const std::shared_ptr<WorkerLegs> legs_;  // client_, or the legs given to Add
  const WorkerType type_;
  const std::optional<int> bootstrap_port_;
  const int failure_threshold_;
  const int success_threshold_;
  const Gauges gauges_;
  std::atomic<int64_t> inflight_{0};
  std::atomic<int64_t> prefill_tokens_{0};

  mutable absl::Mutex mu_;
  bool healthy_ ABSL_GUARDED_BY(mu_) = false;
  bool ever_healthy_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool removed_ ABSL_GUARDED_BY(mu_) = false;
  int probe_successes_ ABSL_GUARDED_BY(mu_) = 0;
  int probe_failures_ ABSL_GUARDED_BY(mu_) = 0;
  mutable CircuitBreaker breaker_ ABSL_GUARDED_BY(mu_);
  proto::LoadReport load_ ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  // The last proof failure was logged; the next one is not (a stranger is asked every interval).
  bool proof_failure_logged_ ABSL_GUARDED_BY(mu_) = false;
  // The registry's bookkeeping, under the registry's mutex (not mu_).
  absl::Mutex* const registry_mu_;
  bool probe_in_flight_ ABSL_GUARDED_BY(registry_mu_) = false;
  bool load_in_flight_ ABSL_GUARDED_BY(registry_mu_) = false;
  // Poll its load at the next round (it just turned healthy).
  bool load_now_ ABSL_GUARDED_BY(registry_mu_) = false;
  bool probe_now_ ABSL_GUARDED_BY(registry_mu_) = false;
  // While unhealthy: when the next probe goes out, ahead of the regular interval (RunDue).
  std::optional<MonoClock::time_point> recovery_probe_at_ ABSL_GUARDED_BY(registry_mu_);
};
using WorkerPtr = std::shared_ptr<Worker>;

// How often an unhealthy worker is probed (see the header comment).
inline constexpr std::chrono::milliseconds kRecoveryProbeInterval{1000};

class WorkerRegistry {
 public:
  // `metrics` may be null (no metrics); otherwise it must outlive the registry.
  explicit WorkerRegistry(RegistryOptions options, MetricsRegistry* metrics);
  ~WorkerRegistry();
  WorkerRegistry(const WorkerRegistry&) = delete;
  WorkerRegistry& operator=(const WorkerRegistry&) = delete;

  // InvalidArgument for a bad url, AlreadyExists when that url is registered. A non-null `legs`
  // carries the worker's legs instead of its client (an in-process worker; the dispatcher's
  // unit tests); the client still serves health checks, load polls and admin calls.
  absl::StatusOr<WorkerPtr> Add(const std::string& url, WorkerType type,
                                std::optional<int> bootstrap_port,
                                std::shared_ptr<WorkerLegs> legs = nullptr);
  absl::Status Remove(const std::string& url);         // NotFound
  absl::Status Drain(const std::string& url);          // stop choosing it; NotFound
  std::vector<WorkerPtr> List(WorkerType type) const;  // all of that type, in url order
  std::vector<WorkerPtr> Available(WorkerType type) const;
  std::vector<WorkerState> Snapshot() const;
  WorkerPtr Find(const std::string& url) const;  // null when unknown
  // A request leg saw the worker fail (UNAVAILABLE): unhealthy at once, probed at once.
  void ReportFailure(const std::string& url, const std::string& why);
  // A health check's result, as a probe's answer would apply it (`serving`: SERVING, else
  // NOT_SERVING): for a health source outside the loop (tests drive one without a network).
  void RecordHealthCheck(const std::string& url, bool serving);
  // A load report, as a poll's answer would apply it (tests drive one without a network).
  void RecordLoad(const std::string& url, const proto::LoadReport& load);

  // The health/load loop; the first round runs at once. Stop() cancels probes in flight and
  // joins; both are idempotent.
  void Start();
  void Stop();

 private:
  void Loop();
  // Marks what is due, issues it (dropping mu_ meanwhile), returns when the next round is due.
  MonoClock::time_point RunDue() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The health-check interval (at least a second).
  MonoClock::duration HealthInterval() const;
  // How soon an unhealthy worker is probed again: kRecoveryProbeInterval, or the health-check
  // interval when that is shorter.
  MonoClock::duration RecoveryProbeInterval() const;
  // Issue one probe / poll; called without mu_ (a callback may run inline).
  void SendProbe(const WorkerPtr& worker, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // In place of the probe while the worker is unverified.
  void SendProof(const WorkerPtr& worker, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void SendLoadPoll(const WorkerPtr& worker, uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void Register(uint64_t id, std::shared_ptr<CallHandle> handle) ABSL_LOCKS_EXCLUDED(mu_);
  void CallDone(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  const RegistryOptions options_;
  std::unique_ptr<MetricsRegistry> own_metrics_;  // when the caller passes none
  MetricsRegistry* const metrics_;
  GaugeFamily* healthy_family_ = nullptr;
  GaugeFamily* circuit_family_ = nullptr;
  GaugeFamily* inflight_family_ = nullptr;
  GaugeFamily* running_family_ = nullptr;
  GaugeFamily* queued_family_ = nullptr;
  GaugeFamily* free_family_ = nullptr;
  GaugeFamily* registered_family_ = nullptr;
  CounterFamily* probes_family_ = nullptr;  // tandem_router_worker_health_checks_total
  GaugeFamily* sgl_health_family_ = nullptr;
  GaugeFamily* sgl_running_family_ = nullptr;
  CounterFamily* sgl_processed_family_ = nullptr;
  // sgl_router_pd_{prefill,decode}_{requests,errors}_total, by the worker's role.
  CounterFamily* sgl_pd_prefill_requests_family_ = nullptr;
  CounterFamily* sgl_pd_decode_requests_family_ = nullptr;
  CounterFamily* sgl_pd_prefill_errors_family_ = nullptr;
  CounterFamily* sgl_pd_decode_errors_family_ = nullptr;
  mutable absl::Mutex mu_;
  SteadyCondVar wake_;        // the loop: a probe is wanted now, or stop
  absl::CondVar calls_done_;  // Stop(): every probe/poll callback has run
  std::map<std::string, WorkerPtr> workers_ ABSL_GUARDED_BY(mu_);
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool kick_ ABSL_GUARDED_BY(mu_) = false;
  MonoClock::time_point next_health_ ABSL_GUARDED_BY(mu_){};
  MonoClock::time_point next_load_ ABSL_GUARDED_BY(mu_){};
  // Probes and polls in flight, so Stop() can cancel them and wait for their callbacks.
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<CallHandle>> calls_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_WORKERS_WORKER_REGISTRY_H_

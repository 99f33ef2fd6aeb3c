// Worker (declared in router/workers/worker_registry.h): one worker's health, circuit breaker,
// load and gauges. The registry that owns the workers is in worker_registry.cc.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {
namespace {

double CircuitValue(CircuitState state) {
  switch (state) {
    case CircuitState::kClosed:
      return 0;
    case CircuitState::kOpen:
      return 1;
    case CircuitState::kHalfOpen:
      return 2;
  }
  return 0;
}

CircuitBreakerOptions BreakerOptions(const RegistryOptions& o) {
  CircuitBreakerOptions b;
  b.failure_threshold = o.cb_failure_threshold;
  b.success_threshold = o.cb_success_threshold;
  b.timeout = absl::ToChronoNanoseconds(o.cb_timeout_duration);
  b.window = absl::ToChronoNanoseconds(o.cb_window_duration);
  b.disabled = o.disable_circuit_breaker;
  b.half_open_max_trials = o.cb_half_open_max_trials;
  // One health-check-made half_open per regular round. Rounds are an interval apart, but each
  // answer arrives after its own latency: a tenth of slack keeps a quicker answer from being
  // refused and pushing the trial a whole round later.
  const MonoClock::duration interval =
      absl::ToChronoNanoseconds(std::max(absl::Seconds(1), o.health_check_interval));
  b.health_check_gap = interval - interval / 10;
  return b;
}

}  // namespace

const char* WorkerTypeName(WorkerType type) {
  switch (type) {
    case WorkerType::kPrefill:
      return "prefill";
    case WorkerType::kDecode:
      return "decode";
    case WorkerType::kRegular:
      return "regular";
  }
  return "regular";
}

Worker::Worker(std::shared_ptr<WorkerClient> client, std::shared_ptr<WorkerLegs> legs,
               WorkerType type, std::optional<int> bootstrap_port, const RegistryOptions& options,
               Gauges gauges, absl::Mutex* registry_mu)
    : client_(std::move(client)),
      legs_(legs != nullptr ? std::move(legs) : client_),
      type_(type),
      bootstrap_port_(bootstrap_port),
      failure_threshold_(std::max(1, options.health_failure_threshold)),
      success_threshold_(std::max(1, options.health_success_threshold)),
      gauges_(gauges),
      breaker_(BreakerOptions(options), options.now),
      registry_mu_(registry_mu) {
  absl::MutexLock lock(&mu_);
  gauges_.registered->Set(1);
  PublishHealthLocked();
  PublishInflight();
  gauges_.running->Set(0);
  gauges_.queued->Set(0);
  gauges_.free_blocks->Set(0);
  PublishCircuitLocked();
}

Worker::~Worker() = default;

bool Worker::Available() const {
  if (!client_->verified()) return false;
  absl::MutexLock lock(&mu_);
  if (!healthy_ || draining_ || removed_) return false;
  bool allowed = breaker_.CanExecute();
  PublishCircuitLocked();
  return allowed;
}

bool Worker::healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

bool Worker::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

proto::LoadReport Worker::load() const {
  absl::MutexLock lock(&mu_);
  return load_;
}

void Worker::BeginRequest() {
  inflight_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  breaker_.OnRequestStart();
  if (removed_) return;
  PublishInflight();
  gauges_.sgl_processed->Increment();
  if (gauges_.sgl_pd_requests != nullptr) gauges_.sgl_pd_requests->Increment();
}

void Worker::EndRequest(bool success) {
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  if (success) {
    breaker_.RecordSuccess();
  } else {
    breaker_.RecordFailure();
  }
  if (removed_) return;
  if (!success && gauges_.sgl_pd_errors != nullptr) gauges_.sgl_pd_errors->Increment();
  PublishInflight();
  PublishCircuitLocked();
}

void Worker::PublishCircuitLocked() const {
  if (!removed_) gauges_.circuit->Set(CircuitValue(breaker_.state()));
}

void Worker::PublishHealthLocked() const {
  const double value = healthy_ && !removed_ ? 1 : 0;
  gauges_.healthy->Set(value);
  gauges_.sgl_health->Set(value);
}

void Worker::PublishInflight() const {
  const double value = static_cast<double>(inflight());
  gauges_.inflight->Set(value);
  gauges_.sgl_running->Set(value);
}

bool Worker::OnProbe(bool ok, proto::HealthResponse::Status status, const std::string& error) {
  absl::MutexLock lock(&mu_);
  if (removed_) return false;
  bool was_healthy = healthy_;
  if (ok && status == proto::HealthResponse::SERVING) {
    probe_failures_ = 0;
    ++probe_successes_;
    if (!healthy_ && (!ever_healthy_ || probe_successes_ >= success_threshold_)) {
      healthy_ = true;
      ever_healthy_ = true;
    }
    // What made it unhealthy (e.g. "Connection refused" while it was starting) is over: an
    // operator reading /workers must not take a healthy worker for a failing one.
    if (healthy_) last_error_.clear();
  } else if (ok) {
    // The worker itself says it takes nothing new: unhealthy at once.
    probe_successes_ = 0;
    ++probe_failures_;
    healthy_ = false;
    last_error_ = absl::StrCat("worker answered ", proto::HealthResponse::Status_Name(status),
                               error.empty() ? "" : ": ", error);
  } else {
    probe_successes_ = 0;
    ++probe_failures_;
    last_error_ = absl::StrCat("health check failed: ", error);
    if (probe_failures_ >= failure_threshold_) healthy_ = false;
  }
  // A healthy worker whose circuit is open gets its half_open trial now: waiting out the open
  // timeout would keep a restarted worker out of rotation long after it answers again.
  if (healthy_ && ok && status == proto::HealthResponse::SERVING && breaker_.HealthCheckPassed()) {
    spdlog::info(
        "worker {} passed a health check with its circuit open: half_open, trying requests", url());
  }
  PublishCircuitLocked();
  PublishHealthLocked();
  if (was_healthy != healthy_) {
    if (healthy_) {
      spdlog::info("worker {} is healthy", url());
    } else {
      spdlog::warn("worker {} is unhealthy: {}", url(), last_error_);
    }
  }
  return healthy_ && !was_healthy;
}

void Worker::OnProof(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  if (status.ok()) {
    spdlog::info("worker {} proved the cluster secret", url());
    proof_failure_logged_ = false;
    last_error_.clear();
    return;
  }
  healthy_ = false;
  probe_successes_ = 0;
  PublishHealthLocked();
  // WorkerClient::Prove's messages already say what failed; say it once.
  absl::string_view why = status.message();
  absl::ConsumePrefix(&why, "the worker did not prove the cluster secret: ");
  last_error_ = absl::StrCat("unverified: did not prove the cluster secret: ", why);
  if (!proof_failure_logged_) {
    proof_failure_logged_ = true;
    spdlog::warn("worker {} is {}; the router sends it nothing until it does", url(), last_error_);
  }
}

void Worker::MarkFailed(const std::string& why) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  if (healthy_) spdlog::warn("worker {} is unhealthy: {}", url(), why);
  healthy_ = false;
  probe_successes_ = 0;
  last_error_ = why;
  PublishHealthLocked();
}

void Worker::OnLoad(const proto::LoadReport& load) {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  load_ = load;
  gauges_.running->Set(load.running_requests());
  gauges_.queued->Set(load.queued_requests());
  gauges_.free_blocks->Set(static_cast<double>(load.free_kv_blocks()));
}

void Worker::SetDraining() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

void Worker::MarkRemoved() {
  absl::MutexLock lock(&mu_);
  if (removed_) return;
  // The series stay (metric children are never removed), marked stale.
  removed_ = true;
  healthy_ = false;
  gauges_.registered->Set(0);
  PublishHealthLocked();
  gauges_.inflight->Set(0);
  gauges_.sgl_running->Set(0);
  gauges_.running->Set(0);
  gauges_.queued->Set(0);
  gauges_.free_blocks->Set(0);
  gauges_.circuit->Set(0);
}

WorkerState Worker::Snapshot() const {
  WorkerState s;
  s.url = url();
  s.type = type_;
  s.bootstrap_port = bootstrap_port_;
  s.inflight = inflight();
  s.session_port = client_->session_port();
  s.verified = client_->verified();
  absl::MutexLock lock(&mu_);
  s.healthy = healthy_ && s.verified;
  s.draining = draining_;
  s.circuit = CircuitStateName(breaker_.state());
  s.load = load_;
  s.last_error = last_error_;
  return s;
}

}  // namespace tandem::router

#include "router/workers/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace tandem::router {
namespace {

std::string StatusText(const grpc::Status& status) {
  return absl::StrCat("grpc code ", static_cast<int>(status.error_code()), ": ",
                      status.error_message());
}

}  // namespace

WorkerRegistry::WorkerRegistry(RegistryOptions options, MetricsRegistry* metrics)
    : options_(std::move(options)),
      own_metrics_(metrics == nullptr ? std::make_unique<MetricsRegistry>() : nullptr),
      metrics_(metrics != nullptr ? metrics : own_metrics_.get()) {
  healthy_family_ = &metrics_->AddGauge("tandem_router_worker_healthy",
                                        "1 while the worker passes its health checks", {"worker"});
  circuit_family_ = &metrics_->AddGauge(
      "tandem_router_worker_circuit_state",
      "The worker's circuit breaker: 0 closed, 1 open, 2 half_open", {"worker"});
  inflight_family_ = &metrics_->AddGauge(
      "tandem_router_worker_inflight", "Requests sent to the worker and not finished", {"worker"});
  running_family_ =
      &metrics_->AddGauge("tandem_router_worker_running_requests",
                          "Running requests, as the worker last reported", {"worker"});
  queued_family_ = &metrics_->AddGauge("tandem_router_worker_queued_requests",
                                       "Queued requests, as the worker last reported", {"worker"});
  free_family_ = &metrics_->AddGauge("tandem_router_worker_free_kv_blocks",
                                     "Free KV blocks, as the worker last reported", {"worker"});
  registered_family_ = &metrics_->AddGauge(
      "tandem_router_worker_registered",
      "1 while the worker is registered; 0 marks a removed worker's series as stale", {"worker"});
  probes_family_ = &metrics_->AddCounter("tandem_router_worker_health_checks_total",
                                         "Health checks sent, by result", {"worker", "result"});
  sgl_health_family_ = &metrics_->AddGauge(
      "sgl_router_worker_health", "Worker health status (1=healthy, 0=unhealthy)", {"worker"});
  sgl_running_family_ = &metrics_->AddGauge("sgl_router_running_requests",
                                            "Number of running requests per worker", {"worker"});
  sgl_processed_family_ = &metrics_->AddCounter(
      "sgl_router_processed_requests_total", "Total requests processed by each worker", {"worker"});
  sgl_pd_prefill_requests_family_ = &metrics_->AddCounter(
      "sgl_router_pd_prefill_requests_total", "Total prefill requests per worker", {"worker"});
  sgl_pd_decode_requests_family_ = &metrics_->AddCounter(
      "sgl_router_pd_decode_requests_total", "Total decode requests per worker", {"worker"});
  sgl_pd_prefill_errors_family_ = &metrics_->AddCounter("sgl_router_pd_prefill_errors_total",
                                                        "Total prefill server errors", {"worker"});
  sgl_pd_decode_errors_family_ = &metrics_->AddCounter("sgl_router_pd_decode_errors_total",
                                                       "Total decode server errors", {"worker"});
}

WorkerRegistry::~WorkerRegistry() {
  Stop();
  absl::MutexLock lock(&mu_);
  // Requests may still hold workers; they must not touch the metrics after this.
  for (auto& [url, worker] : workers_) worker->MarkRemoved();
}

absl::StatusOr<WorkerPtr> WorkerRegistry::Add(const std::string& url, WorkerType type,
                                              std::optional<int> bootstrap_port,
                                              std::shared_ptr<WorkerLegs> legs) {
  absl::StatusOr<std::shared_ptr<WorkerClient>> client =
      WorkerClient::Create(url, options_.cluster_secret);
  if (!client.ok()) return client.status();
  if (bootstrap_port.has_value() && (*bootstrap_port < 1 || *bootstrap_port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker ", url, ": bootstrap port ", *bootstrap_port, " is not in 1..65535"));
  }
  absl::MutexLock lock(&mu_);
  if (workers_.count(url) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("worker ", url, " is already registered"));
  }
  Worker::Gauges gauges{&healthy_family_->WithLabels({url}),
                        &circuit_family_->WithLabels({url}),
                        &inflight_family_->WithLabels({url}),
                        &running_family_->WithLabels({url}),
                        &queued_family_->WithLabels({url}),
                        &free_family_->WithLabels({url}),
                        &registered_family_->WithLabels({url}),
                        &sgl_health_family_->WithLabels({url}),
                        &sgl_running_family_->WithLabels({url}),
                        &sgl_processed_family_->WithLabels({url}),
                        nullptr,
                        nullptr};
  if (type != WorkerType::kRegular) {
    const bool prefill = type == WorkerType::kPrefill;
    gauges.sgl_pd_requests =
        &(prefill ? sgl_pd_prefill_requests_family_ : sgl_pd_decode_requests_family_)
             ->WithLabels({url});
    gauges.sgl_pd_errors = &(prefill ? sgl_pd_prefill_errors_family_ : sgl_pd_decode_errors_family_)
                                ->WithLabels({url});
  }
  WorkerPtr worker(new Worker(*std::move(client), std::move(legs), type, bootstrap_port, options_,
                              gauges, &mu_));
  worker->probe_now_ = true;  // the first probe goes out at once (once started)
  workers_.emplace(url, worker);
  kick_ = true;
  wake_.SignalAll();
  return worker;
}

absl::Status WorkerRegistry::Remove(const std::string& url) {
  WorkerPtr worker;
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(url);
    if (it == workers_.end()) {
      return absl::NotFoundError(absl::StrCat("worker ", url, " is not registered"));
    }
    worker = std::move(it->second);
    workers_.erase(it);
  }
  worker->MarkRemoved();
  return absl::OkStatus();
}

absl::Status WorkerRegistry::Drain(const std::string& url) {
  WorkerPtr worker = Find(url);
  if (worker == nullptr) {
    return absl::NotFoundError(absl::StrCat("worker ", url, " is not registered"));
  }
  worker->SetDraining();
  return absl::OkStatus();
}

std::vector<WorkerPtr> WorkerRegistry::List(WorkerType type) const {
  absl::MutexLock lock(&mu_);
  std::vector<WorkerPtr> out;
  for (const auto& [url, worker] : workers_) {
    if (worker->type() == type) out.push_back(worker);
  }
  return out;
}

std::vector<WorkerPtr> WorkerRegistry::Available(WorkerType type) const {
  std::vector<WorkerPtr> out = List(type);
  out.erase(
      std::remove_if(out.begin(), out.end(), [](const WorkerPtr& w) { return !w->Available(); }),
      out.end());
  return out;
}

std::vector<WorkerState> WorkerRegistry::Snapshot() const {
  std::vector<WorkerPtr> all;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [url, worker] : workers_) all.push_back(worker);
  }
  std::vector<WorkerState> out;
  out.reserve(all.size());
  for (const WorkerPtr& w : all) out.push_back(w->Snapshot());
  return out;
}

WorkerPtr WorkerRegistry::Find(const std::string& url) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(url);
  return it == workers_.end() ? nullptr : it->second;
}

void WorkerRegistry::ReportFailure(const std::string& url, const std::string& why) {
  WorkerPtr worker = Find(url);
  if (worker == nullptr) return;
  worker->MarkFailed(why);
  absl::MutexLock lock(&mu_);
  worker->probe_now_ = true;
  kick_ = true;
  wake_.SignalAll();
}

void WorkerRegistry::RecordHealthCheck(const std::string& url, bool serving) {
  WorkerPtr worker = Find(url);
  if (worker == nullptr) return;
  worker->OnProbe(
      /*ok=*/true, serving ? proto::HealthResponse::SERVING : proto::HealthResponse::NOT_SERVING,
      "");
}

void WorkerRegistry::RecordLoad(const std::string& url, const proto::LoadReport& load) {
  WorkerPtr worker = Find(url);
  if (worker != nullptr) worker->OnLoad(load);
}

void WorkerRegistry::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopping_) return;
  started_ = true;
  kick_ = true;
  next_health_ = MonoNow();
  next_load_ = MonoNow();
  thread_ = std::thread([this] { Loop(); });
}

void WorkerRegistry::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable() && calls_.empty()) return;
    stopping_ = true;
    wake_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
  // Only the loop thread issues calls, so every call is registered now: cancel and wait.
  std::vector<std::shared_ptr<CallHandle>> handles;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, handle] : calls_) {
      if (handle != nullptr) handles.push_back(handle);
    }
  }
  for (auto& handle : handles) handle->Cancel();
  absl::MutexLock lock(&mu_);
  while (!calls_.empty()) calls_done_.Wait(&mu_);
}

void WorkerRegistry::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    MonoClock::time_point next = RunDue();
    if (stopping_) break;
    if (!kick_) {
      auto wait = next - MonoNow();
      if (wait > MonoClock::duration::zero()) {
        wake_.WaitFor(&mu_, wait);
      }
    }
  }
}

MonoClock::duration WorkerRegistry::HealthInterval() const {
  return absl::ToChronoNanoseconds(std::max(absl::Seconds(1), options_.health_check_interval));
}

MonoClock::duration WorkerRegistry::RecoveryProbeInterval() const {
  return std::min<MonoClock::duration>(kRecoveryProbeInterval, HealthInterval());
}

MonoClock::time_point WorkerRegistry::RunDue() {
  kick_ = false;
  MonoClock::time_point now = MonoNow();
  const MonoClock::duration health_interval = HealthInterval();
  if (now >= next_health_) {
    for (auto& [url, worker] : workers_) worker->probe_now_ = true;
    next_health_ = now + health_interval;
  }
  MonoClock::time_point next = next_health_;
  for (auto& [url, worker] : workers_) {
    if (!worker->recovery_probe_at_.has_value()) continue;
    if (now >= *worker->recovery_probe_at_) {
      worker->probe_now_ = true;
      worker->recovery_probe_at_.reset();
    } else {
      next = std::min(next, *worker->recovery_probe_at_);
    }
  }
  const bool load_polls = options_.worker_load_check_interval > absl::ZeroDuration();
  bool poll_load = load_polls && now >= next_load_;
  if (poll_load) next_load_ = now + absl::ToChronoNanoseconds(options_.worker_load_check_interval);

  std::vector<std::pair<WorkerPtr, uint64_t>> probes, polls;
  for (auto& [url, worker] : workers_) {
    if (worker->probe_now_ && !worker->probe_in_flight_) {
      worker->probe_now_ = false;
      worker->probe_in_flight_ = true;
      uint64_t id = next_call_id_++;
      calls_.emplace(id, nullptr);
      probes.emplace_back(worker, id);
    }
    const bool load_due = poll_load || (load_polls && worker->load_now_);
    if (load_due && !worker->load_in_flight_ && worker->client().verified()) {
      worker->load_now_ = false;
      worker->load_in_flight_ = true;
      uint64_t id = next_call_id_++;
      calls_.emplace(id, nullptr);
      polls.emplace_back(worker, id);
    }
  }
  if (!probes.empty() || !polls.empty()) {
    mu_.Unlock();
    for (auto& [worker, id] : probes) {
      if (worker->client().verified()) {
        SendProbe(worker, id);
      } else {
        SendProof(worker, id);
      }
    }
    for (auto& [worker, id] : polls) SendLoadPoll(worker, id);
    mu_.Lock();
  }
  if (load_polls) next = std::min(next, next_load_);
  return next;
}

void WorkerRegistry::SendProbe(const WorkerPtr& worker, uint64_t id) {
  auto deadline = absl::Now() + std::max(absl::Seconds(1), options_.health_check_timeout);
  Register(
      id,
      worker->client().Health(
          false, deadline, [this, worker, id](grpc::Status status, proto::HealthResponse response) {
            bool ok = status.ok();
            // Counted before the state it leads to is visible (a reader that sees the worker
            // turn unhealthy finds its failed probes counted).
            const bool serving = ok && response.status() == proto::HealthResponse::SERVING;
            probes_family_->WithLabels({worker->url(), serving ? "ok" : "failed"}).Increment();
            const bool turned_healthy = worker->OnProbe(
                ok, response.status(), ok ? response.message() : StatusText(status));
            // A token for the proven instance refused: the worker restarted (a new instance id)
            // or changed its secret. Ask it to prove itself again, now.
            const bool reprove = status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
                                 !options_.cluster_secret.empty();
            if (reprove) worker->client().ForgetProof();
            const bool down = !worker->healthy();
            {
              absl::MutexLock lock(&mu_);
              worker->probe_in_flight_ = false;
              // An unhealthy worker is probed again soon, not only at the next interval: one
              // failed leg (ReportFailure) or a restart must not keep it out of rotation for a
              // whole --health-check-interval-secs (60 s by default) once it answers again.
              if (down) worker->recovery_probe_at_ = MonoNow() + RecoveryProbeInterval();
              if (reprove) worker->probe_now_ = true;
              // Its load at once, not at the next poll round (up to the poll interval later):
              // until then /workers and tandemctl would show its KV blocks as 0/0.
              if (turned_healthy) worker->load_now_ = true;
              if (worker->probe_now_ || down || turned_healthy) {
                kick_ = true;
                wake_.SignalAll();
              }
            }
            CallDone(id);
          }));
}

void WorkerRegistry::SendProof(const WorkerPtr& worker, uint64_t id) {
  auto deadline = absl::Now() + std::max(absl::Seconds(1), options_.health_check_timeout);
  Register(id, worker->client().Prove(deadline, [this, worker, id](absl::Status status) {
    probes_family_->WithLabels({worker->url(), status.ok() ? "ok" : "failed"}).Increment();
    worker->OnProof(status);
    // Unreachable (it may still be starting): ask again soon. Answered without a valid proof:
    // a stranger, or a member with another secret; ask again at the health-check interval.
    const bool unreachable = status.code() == absl::StatusCode::kUnavailable ||
                             status.code() == absl::StatusCode::kDeadlineExceeded;
    {
      absl::MutexLock lock(&mu_);
      worker->probe_in_flight_ = false;
      if (status.ok()) {
        worker->probe_now_ = true;  // its first health check, at once
        worker->recovery_probe_at_.reset();
      } else if (unreachable) {
        worker->recovery_probe_at_ = MonoNow() + RecoveryProbeInterval();
      }
      if (worker->probe_now_ || unreachable) {
        kick_ = true;
        wake_.SignalAll();
      }
    }
    CallDone(id);
  }));
}

void WorkerRegistry::SendLoadPoll(const WorkerPtr& worker, uint64_t id) {
  auto deadline = absl::Now() + std::max(absl::Seconds(1), options_.health_check_timeout);
  Register(id, worker->client().GetLoad(
                   deadline, [this, worker, id](grpc::Status status, proto::LoadReport report) {
                     if (status.ok()) worker->OnLoad(report);
                     {
                       absl::MutexLock lock(&mu_);
                       worker->load_in_flight_ = false;
                     }
                     CallDone(id);
                   }));
}

void WorkerRegistry::Register(uint64_t id, std::shared_ptr<CallHandle> handle) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(id);
  if (it != calls_.end()) it->second = std::move(handle);  // else: already done
}

void WorkerRegistry::CallDone(uint64_t id) {
  absl::MutexLock lock(&mu_);
  calls_.erase(id);
  if (calls_.empty()) calls_done_.SignalAll();
}

}  // namespace tandem::router

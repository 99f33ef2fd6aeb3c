#include "router/dispatcher.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "router/api/response.h"
#include "router/client_errors.h"
#include "router/dispatch_run.h"

namespace tandem::router {

Dispatcher::Dispatcher(DispatchOptions options, WorkerRegistry* registry, Policy* prefill_policy,
                       Policy* decode_policy, RouterMetrics* metrics, Timers* timers)
    : options_(std::move(options)),
      registry_(registry),
      prefill_policy_(prefill_policy),
      decode_policy_(decode_policy),
      metrics_(metrics),
      own_timers_(timers == nullptr ? std::make_unique<TimerQueue>() : nullptr),
      timers_(timers != nullptr ? timers : own_timers_.get()) {}

Dispatcher::~Dispatcher() {
  // Retries that will not happen release their runs. Injected timers are the owner's to stop.
  if (own_timers_ != nullptr) own_timers_->Stop();
  // Legs cancelled at shutdown still call back on gRPC threads; wait for them (bounded).
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (live_runs_.load() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(10));
  if (live_runs_.load() > 0) {
    spdlog::warn("dispatcher: {} requests still had legs in flight at shutdown", live_runs_.load());
  }
}

std::shared_ptr<DispatchRun> Dispatcher::Start(std::shared_ptr<const RoutedRequest> request,
                                               EventFn on_event, DoneFn on_done,
                                               StartOptions options) {
  // A leg over the workers' message limit would be refused by every worker: 413 at once, never
  // sent and never retried.
  const size_t leg_bytes = LegBytesUpperBound(*request);
  if (leg_bytes > kMaxLegBytes) {
    spdlog::warn("rid {}: {} byte leg is over the workers' limit; refused", request->rid,
                 leg_bytes);
    auto run = std::make_shared<Run>(this, std::move(request), std::move(on_event),
                                     std::move(on_done), std::move(options));
    run->Refuse(WithHttpStatus(
        absl::ResourceExhaustedError(absl::StrCat(
            "the request is too large to send to a worker: its ", leg_bytes,
            " bytes exceed the limit of ", kMaxLegBytes, " bytes; send a shorter prompt")),
        413));
    return run;
  }
  auto run = std::make_shared<Run>(this, std::move(request), std::move(on_event),
                                   std::move(on_done), std::move(options));
  run->ArmDeadline();
  run->StartAttempt();
  return run;
}

bool MaySharePrompt(const RoutedRequest& request) {
  if (request.sampling.max_new_tokens() == 0) return false;
  const bool scores_prompt =
      request.return_logprob && request.logprob_start_len >= 0 &&
      request.logprob_start_len < static_cast<int64_t>(request.input_ids.size());
  return !scores_prompt;
}

absl::Status Dispatcher::CanRoute() const {
  if (options_.pd_mode) {
    if (registry_->Available(WorkerType::kPrefill).empty()) {
      return absl::UnavailableError("no healthy prefill worker");
    }
    if (registry_->Available(WorkerType::kDecode).empty()) {
      return absl::UnavailableError("no healthy decode worker");
    }
    return absl::OkStatus();
  }
  if (registry_->Available(WorkerType::kRegular).empty()) {
    return absl::UnavailableError("no healthy worker");
  }
  return absl::OkStatus();
}

}  // namespace tandem::router

#include "worker/phase_metrics.h"

namespace tandem::worker {
namespace {

Histogram& Phase(MetricsRegistry* r, const char* name, const char* help) {
  return r->AddHistogram(name, help).Get();
}

Counter& Outcome(CounterFamily& family, const char* outcome) {
  return family.WithLabels({outcome});
}

}  // namespace

PhaseMetrics::PhaseMetrics(MetricsRegistry* r)
    : queue_(Phase(r, "tandem_worker_queue_seconds",
                   "Per request: waiting for admission (KV blocks, running-request cap)")),
      prefill_compute_(Phase(r, "tandem_worker_prefill_compute_seconds",
                             "Per request: prefill forward passes on this worker")),
      transfer_(Phase(r, "tandem_worker_transfer_seconds",
                      "Per request: first KV write submitted to completion notice observed")),
      first_token_(Phase(r, "tandem_worker_first_token_seconds",
                         "Per request: leg start to first token available on this worker")),
      decode_(Phase(r, "tandem_worker_decode_seconds", "Per request: first token to last token")),
      finished_(Outcome(
          r->AddCounter("tandem_worker_requests_total", "Requests (legs) by outcome", {"outcome"}),
          "finished")),
      aborted_(Outcome(
          r->AddCounter("tandem_worker_requests_total", "Requests (legs) by outcome", {"outcome"}),
          "aborted")),
      cancelled_(Outcome(
          r->AddCounter("tandem_worker_requests_total", "Requests (legs) by outcome", {"outcome"}),
          "cancelled")),
      rejected_(Outcome(
          r->AddCounter("tandem_worker_requests_total", "Requests (legs) by outcome", {"outcome"}),
          "rejected")) {}

void PhaseMetrics::RecordLeg(const LegTimings& t, bool had_transfer, LegOutcome outcome) {
  switch (outcome) {
    case LegOutcome::kFinished:
      finished_.Increment();
      break;
    case LegOutcome::kAborted:
      aborted_.Increment();
      break;
    case LegOutcome::kCancelled:
      cancelled_.Increment();
      break;
    case LegOutcome::kRejected:
      rejected_.Increment();
      return;
  }
  // Phases a leg never reached are not samples: an aborted queued request has no first token.
  queue_.Observe(t.queue);
  if (t.prefill_compute > 0) prefill_compute_.Observe(t.prefill_compute);
  if (had_transfer) transfer_.Observe(t.transfer);
  if (t.first_token > 0) first_token_.Observe(t.first_token);
  if (t.first_token > 0) decode_.Observe(t.decode);
}

void PhaseMetrics::RecordRejected() { rejected_.Increment(); }

}  // namespace tandem::worker

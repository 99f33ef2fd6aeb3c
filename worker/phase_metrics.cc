#include "worker/phase_metrics.h"

#include "absl/types/span.h"

namespace tandem::worker {
namespace {

Histogram& Phase(MetricsRegistry* r, const char* name, const char* help) {
  return r->AddHistogram(name, help).Get();
}

Counter& Outcome(CounterFamily& family, const char* outcome) {
  return family.WithLabels({outcome});
}

// SGLang's bounds for these histograms, each extended by a few longer ones: a CPU worker's long
// prompts and outputs take minutes, and beyond the last bound a quantile is only "+Inf".
constexpr double kFirstTokenBounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06,  0.08,  0.1,
                                        0.25,  0.5,   0.75, 1.0,  2.5,  5.0,   7.5,   10.0,
                                        15.0,  20.0,  25.0, 30.0, 60.0, 120.0, 300.0, 600.0};
constexpr double kE2eBounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,
                                 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0};
constexpr double kPerOutputTokenBounds[] = {0.005, 0.01,  0.015, 0.02, 0.025, 0.03, 0.04,
                                            0.05,  0.075, 0.1,   0.15, 0.2,   0.3,  0.4,
                                            0.5,   0.75,  1.0,   2.5,  5.0,   10.0};

Histogram& Sglang(MetricsRegistry* r, const char* name, const char* help,
                  absl::Span<const double> bounds, const std::string& model_name) {
  return r->AddHistogram(name, help, {"model_name"}, {bounds.begin(), bounds.end()})
      .WithLabels({model_name});
}

}  // namespace

PhaseMetrics::PhaseMetrics(MetricsRegistry* r, const std::string& model_name)
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
          "rejected")),
      sg_first_token_(Sglang(r, "sglang:time_to_first_token_seconds",
                             "Histogram of time to first token in seconds.", kFirstTokenBounds,
                             model_name)),
      sg_e2e_(Sglang(r, "sglang:e2e_request_latency_seconds",
                     "Histogram of End-to-end request latency in seconds", kE2eBounds, model_name)),
      sg_per_output_token_(Sglang(r, "sglang:time_per_output_token_seconds",
                                  "Histogram of time per output token in seconds.",
                                  kPerOutputTokenBounds, model_name)) {}

void PhaseMetrics::RecordLeg(const LegTimings& t, bool had_transfer, LegOutcome outcome,
                             int64_t completion_tokens) {
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
  if (t.first_token > 0) {
    sg_first_token_.Observe(t.first_token);
    sg_e2e_.Observe(t.first_token + t.decode);
    if (completion_tokens > 1) {
      sg_per_output_token_.Observe(t.decode / static_cast<double>(completion_tokens - 1));
    }
  }
}

void PhaseMetrics::RecordRejected() { rejected_.Increment(); }

}  // namespace tandem::worker

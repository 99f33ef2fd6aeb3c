// PhaseMetrics: the per-request phase histograms and the outcome counter a worker exports on its
// /metrics (the TTFT breakdown of a disaggregated request is read from these).
//
//   tandem_worker_queue_seconds            waiting for admission
//   tandem_worker_prefill_compute_seconds  prefill forward passes
//   tandem_worker_transfer_seconds         KV handoff (no samples on a colocated worker)
//   tandem_worker_first_token_seconds      leg start -> first token on this worker
//   tandem_worker_decode_seconds           first token -> last token
//   tandem_worker_requests_total{outcome}  finished | aborted | cancelled | rejected
//
// and, under SGLang's names (labelled model_name), what SGLang's dashboards plot from a server:
//
//   sglang:time_to_first_token_seconds     leg start -> first token on this worker
//   sglang:e2e_request_latency_seconds     leg start -> last token
//   sglang:time_per_output_token_seconds   (last token - first token) / (tokens - 1)
//
// Thread-safe (the registry's children are atomics). The registry is borrowed and must outlive
// this object.
#ifndef TANDEM_WORKER_PHASE_METRICS_H_
#define TANDEM_WORKER_PHASE_METRICS_H_

#include <cstdint>
#include <string>

#include "common/metrics.h"
#include "worker/conversions.h"

namespace tandem::worker {

enum class LegOutcome {
  kFinished,   // ended by length or stop
  kAborted,    // aborted by the engine, an Abort RPC, or a drain
  kCancelled,  // the client went away
  kRejected,   // refused before it started (bad input, full, draining)
};

class PhaseMetrics {
 public:
  PhaseMetrics(MetricsRegistry* registry, const std::string& model_name);
  PhaseMetrics(const PhaseMetrics&) = delete;
  PhaseMetrics& operator=(const PhaseMetrics&) = delete;

  // A leg that ran: its timings, outcome and the tokens it generated here. `had_transfer`: it
  // received its KV from a prefill worker (a colocated leg records no transfer sample).
  void RecordLeg(const LegTimings& timings, bool had_transfer, LegOutcome outcome,
                 int64_t completion_tokens);
  void RecordRejected();

 private:
  Histogram& queue_;
  Histogram& prefill_compute_;
  Histogram& transfer_;
  Histogram& first_token_;
  Histogram& decode_;
  Counter& finished_;
  Counter& aborted_;
  Counter& cancelled_;
  Counter& rejected_;
  Histogram& sg_first_token_;
  Histogram& sg_e2e_;
  Histogram& sg_per_output_token_;
};

}  // namespace tandem::worker

#endif  // TANDEM_WORKER_PHASE_METRICS_H_

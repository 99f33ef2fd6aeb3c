// --plot FILE.png: output token throughput and running requests per second of the run, drawn
// by gnuplot (Debian's gnuplot-nox; `scripts/install-deps.sh` installs it). The data come from
// ComputeTimeline, so the plot's maxima are the table's peak rows.
#ifndef TANDEM_BENCH_TANDEM_BENCH_PLOT_H_
#define TANDEM_BENCH_TANDEM_BENCH_PLOT_H_

#include <string>

#include "absl/status/status.h"
#include "bench/tandem_bench/metrics.h"

namespace tandem::bench {

// The gnuplot data file: one line per second "t tokens running".
std::string TimelineData(const Timeline& timeline);

// Writes the PNG. FailedPrecondition when gnuplot is not on PATH (naming the package to
// install), Internal when it fails (with its exit status), InvalidArgument for an empty
// timeline (no successful request).
absl::Status WriteThroughputPlot(const Timeline& timeline, const std::string& png_path,
                                 const std::string& title);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_PLOT_H_

#include "bench/tandem_bench/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tandem::bench {
namespace {

bool OnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

// gnuplot single-quoted string: a quote is doubled.
std::string GnuplotQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "''";
    else
      out += c;
  }
  return out + "'";
}

}  // namespace

std::string TimelineData(const Timeline& timeline) {
  std::ostringstream data;
  for (size_t i = 0; i < timeline.output_tokens.size(); ++i) {
    data << i << ' ' << timeline.output_tokens[i] << ' ' << timeline.running_requests[i] << '\n';
  }
  // A closing point, so gnuplot's `steps` draws the last bucket over its whole second.
  data << timeline.output_tokens.size() << " 0 0\n";
  return data.str();
}

absl::Status WriteThroughputPlot(const Timeline& timeline, const std::string& png_path,
                                 const std::string& title) {
  if (timeline.output_tokens.empty()) {
    return absl::InvalidArgumentError("--plot: no successful request, nothing to plot");
  }
  if (!OnPath("gnuplot")) {
    return absl::FailedPreconditionError(
        "--plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)");
  }
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(ec);
  if (ec)
    return absl::InternalError(absl::StrCat("--plot: no temporary directory: ", ec.message()));
  const std::string data_path =
      (dir / absl::StrCat("tandem-bench-plot-", getpid(), ".dat")).string();
  {
    std::ofstream data(data_path);
    data << TimelineData(timeline);
    if (!data) return absl::InternalError(absl::StrCat("--plot: cannot write ", data_path));
  }
  // Headroom above the highest value so the lines do not run along the frame.
  const double max_tokens =
      *std::max_element(timeline.output_tokens.begin(), timeline.output_tokens.end());
  const int max_running =
      *std::max_element(timeline.running_requests.begin(), timeline.running_requests.end());
  std::string script = absl::StrCat(
      "set terminal png size 1000,560\n", "set output ", GnuplotQuote(png_path), "\n", "set title ",
      GnuplotQuote(title), " noenhanced\n", "set xlabel 'time since start (s), 1-second buckets'\n",
      "set ylabel 'output tokens/s'\n", "set y2label 'running requests'\n", "set ytics nomirror\n",
      "set y2tics\n", "set yrange [0:", std::max(1.0, max_tokens * 1.15), "]\n",
      "set y2range [0:", std::max(1.0, max_running * 1.15), "]\n", "set key below\n", "set grid\n",
      "plot ", GnuplotQuote(data_path),
      " using 1:2 with steps lw 2 title 'output token throughput (tok/s)' axes x1y1, ",
      "'' using 1:3 with steps lw 2 title 'running requests' axes x1y2\n");
  FILE* pipe = popen("gnuplot 2>&1", "w");
  if (pipe == nullptr) {
    std::filesystem::remove(data_path, ec);
    return absl::InternalError("--plot: cannot start gnuplot");
  }
  fwrite(script.data(), 1, script.size(), pipe);
  const int status = pclose(pipe);
  std::filesystem::remove(data_path, ec);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("--plot: gnuplot failed (exit status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                                            ") writing ", png_path));
  }
  return absl::OkStatus();
}

}  // namespace tandem::bench

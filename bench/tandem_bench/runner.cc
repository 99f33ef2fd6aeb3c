#include "bench/tandem_bench/runner.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace tandem::bench {
namespace {

using Clock = HttpClient::Clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string Hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<long long>(seconds);
  if (total >= 3600) {
    return absl::StrFormat("%d:%02d:%02d", total / 3600, (total / 60) % 60, total % 60);
  }
  return absl::StrFormat("%02d:%02d", total / 60, total % 60);
}

// tqdm's look: " 45%|████▌     | 90/200 [00:01<00:02, 80.21it/s]".
std::string ProgressLine(int done, int total, double elapsed_s) {
  constexpr int kBarCells = 10;
  static const char* const kPartial[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const double fraction = total > 0 ? static_cast<double>(done) / total : 1.0;
  const int eighths = static_cast<int>(fraction * kBarCells * 8);
  std::string bar;
  int cells = 0;
  for (; cells < eighths / 8; ++cells) bar += "█";
  if (cells < kBarCells && eighths % 8 != 0) {
    bar += kPartial[eighths % 8];
    ++cells;
  }
  bar += std::string(static_cast<size_t>(kBarCells - cells), ' ');
  const double rate = elapsed_s > 0 ? done / elapsed_s : 0.0;
  const double remaining = rate > 0 ? (total - done) / rate : NAN;
  return absl::StrFormat("\r%3d%%|%s| %d/%d [%s<%s, %.2fit/s]", static_cast<int>(fraction * 100),
                         bar, done, total, Hms(elapsed_s), Hms(remaining), rate);
}

// Work handed from the dispatcher (arrival times) to the pool.
class WorkQueue {
 public:
  void Push(size_t index) {
    absl::MutexLock lock(&mu_);
    pending_.push_back(index);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  // The next index, or false once closed and drained.
  bool Pop(size_t* index) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](WorkQueue* q)
             ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) { return q->closed_ || !q->pending_.empty(); },
        this));
    if (pending_.empty()) return false;
    *index = pending_.front();
    pending_.pop_front();
    return true;
  }

 private:
  absl::Mutex mu_;
  std::deque<size_t> pending_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

absl::Status Warmup(const HttpClient& client, const RequestSettings& settings,
                    const DatasetRow& row, const RunOptions& options) {
  if (options.log)
    *options.log << "Starting warmup with " << options.warmup_requests << " sequences..."
                 << std::endl;
  std::vector<RequestOutput> outputs(static_cast<size_t>(options.warmup_requests));
  {
    std::vector<std::jthread> threads;
    for (auto& out : outputs) {
      threads.emplace_back([&, out_ptr = &out] {
        *out_ptr = SendRequest(client, settings, row, std::min(row.output_len, 32), 0.0,
                               Clock::now() + options.request_timeout);
      });
    }
  }
  if (std::none_of(outputs.begin(), outputs.end(), [](const auto& o) { return o.success; })) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Warmup failed - please make sure the benchmark arguments are correct. Error: ",
        outputs[0].error));
  }
  if (options.log)
    *options.log << "Warmup completed with " << options.warmup_requests
                 << " sequences. Starting main benchmark run..." << std::endl;
  return absl::OkStatus();
}

}  // namespace

std::vector<double> PoissonArrivals(int count, double rate, NumpyRandomState& numpy) {
  std::vector<double> arrivals(static_cast<size_t>(std::max(count, 0)), 0.0);
  if (std::isinf(rate)) return arrivals;
  for (size_t i = 1; i < arrivals.size(); ++i) {
    arrivals[i] = arrivals[i - 1] + numpy.Exponential(1.0 / rate);
  }
  if (!arrivals.empty()) numpy.Exponential(1.0 / rate);  // upstream also draws after the last
  return arrivals;
}

absl::StatusOr<RunResult> RunBenchmark(const HttpClient& client, const RequestSettings& settings,
                                       const std::vector<DatasetRow>& rows,
                                       const RunOptions& options,
                                       const std::function<void()>& after_warmup,
                                       NumpyRandomState& numpy) {
  if (rows.empty()) return absl::InvalidArgumentError("the dataset is empty");
  if (!(options.request_rate > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--request-rate must be > 0 (or inf), got ", options.request_rate));
  }
  if (options.max_concurrency < 0 || options.warmup_requests < 0 || options.max_threads < 1) {
    return absl::InvalidArgumentError(
        "--max-concurrency and --warmup-requests must not be negative");
  }
  if (options.warmup_requests > 0) {
    if (auto status = Warmup(client, settings, rows[0], options); !status.ok()) {
      return status;
    }
  }
  if (after_warmup) after_warmup();
  std::this_thread::sleep_for(options.settle_after_warmup);

  const std::vector<double> arrivals =
      PoissonArrivals(static_cast<int>(rows.size()), options.request_rate, numpy);
  const int pool_size =
      std::min<int>(options.max_concurrency > 0 ? options.max_concurrency : options.max_threads,
                    static_cast<int>(rows.size()));

  RunResult result;
  result.outputs.resize(rows.size());
  WorkQueue queue;
  absl::Mutex progress_mu;
  int done = 0;  // guarded by progress_mu
  const Clock::time_point start = Clock::now();
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < pool_size; ++t) {
      pool.emplace_back([&] {
        size_t index;
        while (queue.Pop(&index)) {
          const double sent_s = SecondsSince(start);
          result.outputs[index] = SendRequest(client, settings, rows[index], rows[index].output_len,
                                              sent_s, Clock::now() + options.request_timeout);
          absl::MutexLock lock(&progress_mu);
          ++done;
        }
      });
    }
    std::jthread progress;
    if (options.show_progress && options.progress != nullptr) {
      progress = std::jthread([&](std::stop_token stop) {
        const int total = static_cast<int>(rows.size());
        while (true) {
          int now_done;
          {
            absl::MutexLock lock(&progress_mu);
            now_done = done;
          }
          *options.progress << ProgressLine(now_done, total, SecondsSince(start)) << std::flush;
          if (now_done == total || stop.stop_requested()) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        *options.progress << "\n" << std::flush;
      });
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(arrivals[i])));
      queue.Push(i);
    }
    queue.Close();
    for (auto& thread : pool) thread.join();
    result.duration_s = SecondsSince(start);
  }  // the progress thread sees every request done and ends
  return result;
}

}  // namespace tandem::bench

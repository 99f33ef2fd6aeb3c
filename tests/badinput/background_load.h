// Test support for the bad-input suite: well-behaved clients that keep sending valid requests
// (streamed and not, /generate, completions and chat) to one or more routers while the suite
// throws garbage at the same routers, and record every request that did not succeed.
#ifndef TANDEM_TESTS_BADINPUT_BACKGROUND_LOAD_H_
#define TANDEM_TESTS_BADINPUT_BACKGROUND_LOAD_H_

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace tandem::itest {

// Thread-safe. Owns one client thread per port; Stop() (or the destructor) joins them.
class BackgroundLoad {
 public:
  // Starts one client per entry of `ports`, each sending requests one after the other with
  // `api_key` until Stop().
  BackgroundLoad(const std::vector<int>& ports, std::string api_key);
  ~BackgroundLoad();
  BackgroundLoad(const BackgroundLoad&) = delete;
  BackgroundLoad& operator=(const BackgroundLoad&) = delete;

  // Lets the request in flight finish, then joins. Idempotent.
  void Stop();
  int sent() const { return sent_.load(); }
  int succeeded() const { return succeeded_.load(); }
  // One line per request that failed: port, kind, status and body.
  std::vector<std::string> failures() const;

 private:
  void Run(int port, int seed);
  // Sends request `n`'s kind to `port`; "" when it succeeded, else what went wrong.
  std::string SendOne(int port, int n) const;

  const std::string api_key_;
  std::atomic<bool> stop_{false};
  std::atomic<int> sent_{0};
  std::atomic<int> succeeded_{0};
  mutable std::mutex mu_;
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_BADINPUT_BACKGROUND_LOAD_H_

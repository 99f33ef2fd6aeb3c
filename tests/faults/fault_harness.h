// Fault-injection harness: client calls through a real tandem-router with a deadline, the
// classification of what each client saw (a correct success, a clear error, a dropped connection,
// or a hang), and the convergence checks every fault test ends with: the surviving workers' KV
// blocks all free again (read from their /metrics) and the router's view of worker health.
// Integration tests only; not thread-safe except where a function says so.
#ifndef TANDEM_TESTS_FAULTS_FAULT_HARNESS_H_
#define TANDEM_TESTS_FAULTS_FAULT_HARNESS_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/integration/worker_process.h"

namespace tandem::itest::faults {

// The router's --request-timeout-secs in every fault test, and the client deadline above it.
inline constexpr int kRequestTimeoutSecs = 20;
inline constexpr int kClientDeadlineSecs = kRequestTimeoutSecs + 10;

// What one client call saw.
struct CallResult {
  int status = 0;          // HTTP status of the head; 0 when no head arrived
  bool complete = false;   // the whole response arrived (last chunk or Content-Length)
  bool timed_out = false;  // a read waited the whole deadline: the request hung
  bool done = false;       // a stream ended with data: [DONE]
  std::string body;
  nlohmann::json output_ids;  // of the (last) answer, null if none
  std::string error;          // message of an error body or of an SSE error event
  std::chrono::milliseconds elapsed{0};
};

// POSTs `body` to /generate on 127.0.0.1:port. Every read gives up after kClientDeadlineSecs.
// For a streamed body, `on_first_chunk` (may be empty) runs once the first token event arrived.
// Thread-safe (each call has its own connection).
CallResult Generate(int port, const nlohmann::json& body,
                    const std::function<void()>& on_first_chunk = {});

// A /generate body: greedy, ignore_eos, `max_new` tokens, prompt text unique to `i`.
nlohmann::json GreedyBody(int i, int max_new, bool stream);
// A /generate body whose prompt is `n_tokens` ids (long prompts keep prefill legs busy).
nlohmann::json LongPromptBody(int i, int n_tokens, int max_new);

// Tallies of a fault test's calls, and the one-line summary the test prints.
struct Tally {
  int faults = 0;
  int requests = 0;
  int ok = 0;       // success with the clean run's output
  int errors = 0;   // clear error: status >= 400 with a message, or an SSE error event
  int dropped = 0;  // connection closed before the response ended (only when the router dies)
  int wrong = 0;    // anything else: hang, wrong output, an error without a message
  int retries = 0;  // the router's tandem_router_retries_total at the end (new pairs tried)

  // Classifies `r` against `expected` output ids (null: any output) and returns a description
  // for the failure message. Drops count as `dropped` only when `drop_allowed`.
  std::string Add(const CallResult& r, const nlohmann::json& expected, bool drop_allowed = false);
  void Print(const std::string& test) const;
};

// Sends `bodies` one after another through the router, non-streamed, and returns their output
// ids (the reference a clean cluster gives); records a test failure if one does not succeed.
std::vector<nlohmann::json> ReferenceOutputs(int router_port,
                                             const std::vector<nlohmann::json>& bodies);

// One admin call on the router, with the admin key StartRouter gives it (kTestAdminKey).
HttpReply RouterAdmin(int router_port, const std::string& method, const std::string& target,
                      const std::string& body = "");

// Flushes the prefix caches through the router, then waits (up to 60 s) for `w`'s /metrics to
// show tandem_engine_kv_free_blocks == tandem_engine_kv_total_blocks > 0. `why` gets the last
// values seen.
bool BlocksFreeEqualTotal(int router_port, const WorkerProcess& w, std::string* why);

// Waits (up to 60 s) for the router's /workers to list exactly the URLs of `healthy` with those
// health values. `why` gets the last listing.
bool HealthConverges(int router_port, const std::map<std::string, bool>& healthy, std::string* why);

// A value of the router's or a worker's /metrics; -1 when absent.
double Metric(int http_port, const std::string& metric);

// Writes the test cluster secret to a private temp file for the router's --cluster-secret-file
// and removes it on destruction.
class SecretFile {
 public:
  SecretFile();
  ~SecretFile();
  SecretFile(const SecretFile&) = delete;
  SecretFile& operator=(const SecretFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tandem::itest::faults

#endif  // TANDEM_TESTS_FAULTS_FAULT_HARNESS_H_

// Test support: a real tandem-router process on loopback with fast health checks and short
// retry backoff, restartable on the same port, plus readers for the Prometheus text that the
// router and the workers serve on /metrics. Integration tests only.
#ifndef TANDEM_TESTS_INTEGRATION_ROUTER_PROCESS_H_
#define TANDEM_TESTS_INTEGRATION_ROUTER_PROCESS_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"
#include "tests/integration/process.h"

namespace tandem::itest {

// The admin key StartRouter gives the router unless a test passes its own admin flags.
inline constexpr char kTestAdminKey[] = "tandem-test-admin-key-0123";

struct RouterProcess {
  int port = 0;
  std::vector<std::string> argv;  // as started, for Launch()
  std::unique_ptr<Process> process;

  // SIGKILL and reap.
  void Kill();
  // The same command line again (same port); waits (up to 60 s) for /health 200. False (with the
  // process's output in `why`) if it does not come up.
  bool Launch(std::string* why = nullptr);
};

// Starts tandem-router on a free loopback port with the shipped model's tokenizer and waits (up
// to 60 s) for /health 200; a test failure is recorded if it does not come up. Defaults: health
// checks every second with thresholds of 1, load polls every second, 20 ms first retry backoff,
// a 60 s request timeout, round_robin, --admin-key kTestAdminKey (dropped when `extra` gives
// --admin-key-file or --disable-admin-auth). A "--flag value" pair in `extra` replaces the value
// of a default flag; anything else is appended as given.
std::unique_ptr<RouterProcess> StartRouter(const std::vector<std::string>& extra = {});

// The value of the first sample of `metric` in Prometheus text `text` whose name and labels
// start with `metric` exactly as given (e.g. `tandem_engine_kv_free_blocks` or
// `tandem_router_worker_healthy{worker="http://..."`); nullopt if absent or unparsable.
std::optional<double> MetricValue(const std::string& text, const std::string& metric);

// Flushes every worker's prefix cache through the router's admin API (POST /flush_cache with
// `admin_key`) until the /metrics of the worker on `worker_http_port` shows every KV block free,
// for up to 60 s. False when they never were, with the last figures in `why`.
bool WaitForAllKvBlocksFree(int router_port, const std::string& admin_key, int worker_http_port,
                            std::string* why);

// One HTTP request to a router on loopback (JSON content type, Connection: close, `headers`
// appended, each ending in CRLF) and its whole response; a test failure and an empty response
// (status 0) when it does not answer within 60 s.
testing::ClientResponse RouterRequest(int port, const std::string& method,
                                      const std::string& target, const std::string& body = "",
                                      const std::string& headers = "");

// The JSON objects of an SSE body's "data: {...}" events in order; `done` is set when a
// "data: [DONE]" event ended it.
std::vector<nlohmann::json> SseEvents(const std::string& body, bool* done);

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_INTEGRATION_ROUTER_PROCESS_H_

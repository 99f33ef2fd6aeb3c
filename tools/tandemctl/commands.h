// Commands: tandemctl's operations over the router's HTTP API (admin routes with the admin key,
// /get_loads and /generate with the client API key, /health, /readiness and /metrics open).
//
// Each command writes its result to `out` (aligned tables, or with `json` the router's JSON as
// is; for `metrics` the stable JSON of MetricsSummary) and problems to `err`, and returns the
// process exit code:
//   0  success
//   1  the router answered with an error (its message is printed)
//   2  usage error (bad arguments; also returned by the flag parser in tandemctl_main.cc)
//   3  the router cannot be reached (the URL is named)
// Not thread-safe (writes to the given streams); owns nothing but its options.
#ifndef TANDEM_TOOLS_TANDEMCTL_COMMANDS_H_
#define TANDEM_TOOLS_TANDEMCTL_COMMANDS_H_

#include <chrono>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_client.h"
#include "common/http_types.h"

namespace tandem::ctl {

enum ExitCode : int { kExitOk = 0, kExitRouterError = 1, kExitUsage = 2, kExitUnreachable = 3 };

struct CtlOptions {
  std::string router = "http://127.0.0.1:30000";
  std::string admin_key;  // sent as "Authorization: Bearer" on admin routes when set
  std::string api_key;    // sent on client routes (/generate, /get_loads) when set
  bool json = false;
  std::chrono::milliseconds timeout{30000};  // per HTTP call; generate uses it for the whole call
};

class Commands {
 public:
  Commands(CtlOptions options, std::ostream& out, std::ostream& err);
  Commands(const Commands&) = delete;
  Commands& operator=(const Commands&) = delete;

  int WorkersList();
  // type: "prefill", "decode" or "regular"; a prefill worker needs its bootstrap port.
  int WorkersAdd(const std::string& url, const std::string& type,
                 std::optional<int> bootstrap_port);
  int WorkersRemove(const std::string& url);
  int WorkersDrain(const std::string& url);
  int Loads();
  int Health();
  int FlushCache();
  int Metrics();
  // SGLang /generate. Sampling is the workers' default (temperature 1) unless `temperature` is
  // given (0 is greedy); `ignore_eos` generates max_new_tokens even past an EOS token. With
  // `stream` prints the text as it arrives.
  struct GenerateOptions {
    int max_new_tokens = 32;
    std::optional<double> temperature;
    bool ignore_eos = false;
    bool stream = false;
  };
  int Generate(const std::string& prompt, const GenerateOptions& options);

 private:
  enum class Key { kNone, kAdmin, kApi };
  // One call. An error is a transport failure or a bad --router URL; see Unreachable.
  absl::StatusOr<HttpClientResponse> Call(const std::string& method, const std::string& target,
                                          const std::string& body, Key key);
  // Prints the router's error message for a non-2xx answer; returns kExitRouterError.
  int RouterError(const std::string& what, const HttpClientResponse& response);
  HttpHeaders Headers(Key key, bool json_body) const;
  // Prints a failed Call's error: exit 2 for a bad --router URL, else 3 naming the URL.
  int Unreachable(const absl::Status& status);

  CtlOptions options_;
  std::ostream& out_;
  std::ostream& err_;
  absl::StatusOr<HttpClient> client_;
};

// The message of a router error body ({"error":{"message":..}} or {"message":..}), else the
// body itself (trimmed to a line), else the status reason.
std::string ErrorMessage(const HttpClientResponse& response);

}  // namespace tandem::ctl

#endif  // TANDEM_TOOLS_TANDEMCTL_COMMANDS_H_

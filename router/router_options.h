// tandem-router's options: the flags of `sglang_router.launch_router` for the same concepts, with
// SGLang's defaults, so launch scripts translate line by line (DESIGN.md).
#ifndef TANDEM_ROUTER_ROUTER_OPTIONS_H_
#define TANDEM_ROUTER_ROUTER_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/flags.h"

namespace tandem::router {

// A prefill worker as given by `--prefill URL [BOOTSTRAP_PORT]`.
struct PrefillEndpoint {
  std::string url;                    // the worker's gRPC address, e.g. http://10.0.0.1:8000
  std::optional<int> bootstrap_port;  // absent: "none" or omitted
};

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string api_key;  // clients must send "Authorization: Bearer <key>"
  // The admin API's key (separate from the client key): --admin-key-file (first line; preferred,
  // `ps` shows flags) or --admin-key. Without either the admin API answers 403 unless
  // disable_admin_auth, which leaves it open to anyone who can reach the port.
  std::string admin_key;
  std::string admin_key_file;
  bool disable_admin_auth = false;
  int http_threads = 2;  // HTTP I/O threads

  // Workers.
  bool pd_disaggregation = false;
  std::vector<std::vector<std::string>> prefill_args;  // --prefill occurrences, as given
  std::vector<std::string> decode_urls;
  std::vector<std::string> worker_urls;  // plain mode: colocated workers
  std::vector<PrefillEndpoint> prefill;  // filled by ValidateRouterOptions

  // Policies.
  std::string policy = "cache_aware";
  std::string prefill_policy;  // "" = --policy
  // "" = --policy, except in PD mode with --policy cache_aware: power_of_two (a disaggregated
  // decode worker has no prefix cache to be affine to; ValidateRouterOptions fills it in).
  std::string decode_policy;
  double cache_threshold = 0.3;
  int balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  int eviction_interval_secs = 120;
  int64_t max_tree_size = int64_t{1} << 26;
  int worker_load_check_interval = 10;

  // Limits.
  // 32 MiB: far above the largest prompt a served model takes as JSON (a 128K-token context is a
  // few MiB of text or ids, even \u-escaped), far below what would let one client make the
  // router buffer and parse hundreds of MiB.
  int64_t max_payload_size = int64_t{32} << 20;
  int request_timeout_secs = 1800;
  // A leg that shows no progress for this long is failed (docs/router.md "Stalled legs");
  // 0: never. 30 s: several times the longest step we expect (a long prefill chunk or a KV
  // transfer of a full context on a loaded CPU takes seconds, a decode step well under one).
  int stall_timeout_secs = 30;
  int max_concurrent_requests = -1;  // -1: unbounded
  int queue_size = 100;
  int queue_timeout_secs = 60;
  // Admission from KV headroom (router/admission.h): a request waits while the KV its prompt and
  // max_new_tokens need does not fit beside the needs of the requests already admitted, in the
  // total KV blocks the decode (PD) or regular (plain) workers reported.
  bool disable_kv_admission = false;
  // Client connections: a request must arrive whole within the read timeout once it started
  // (slow clients cannot hold a connection), a keep-alive connection may sit idle between
  // requests for the idle timeout, and connections beyond the maximum are closed at once.
  int http_read_timeout_secs = 60;
  int http_idle_timeout_secs = 60;
  int http_max_connections = 10000;

  // Retries (before the first token only).
  int retry_max_retries = 5;
  int retry_initial_backoff_ms = 50;
  int retry_max_backoff_ms = 30000;
  double retry_backoff_multiplier = 1.5;
  double retry_jitter_factor = 0.2;
  bool disable_retries = false;

  // Health checks and circuit breaker.
  int health_failure_threshold = 3;
  int health_success_threshold = 2;
  int health_check_timeout_secs = 5;
  int health_check_interval_secs = 60;
  int cb_failure_threshold = 10;
  int cb_success_threshold = 3;
  int cb_timeout_duration_secs = 60;
  int cb_window_duration_secs = 120;
  bool disable_circuit_breaker = false;

  // Tokenizer / chat template source (the router tokenizes for cache_aware and chat).
  std::string model_path;
  std::string tokenizer_path;
  std::string served_model_name;  // /v1/models id; "" = the model directory's name
  // SGLang's --reasoning-parser: "qwen3" separates <think> reasoning into reasoning_content for
  // chat requests (unless they send separate_reasoning: false); "" = off.
  std::string reasoning_parser;

  std::vector<std::string> request_id_headers;  // "" = x-request-id, x-correlation-id, ...
  // The cluster secret proven to workers on every gRPC call (router/workers/cluster_credentials.h).
  std::string cluster_secret_file;  // first line; preferred (keeps the secret out of `ps`)
  std::string cluster_secret;       // or the value itself; or env TANDEM_CLUSTER_SECRET

  // TLS on the HTTP port (both or neither; PEM). Plain HTTP when empty.
  std::string tls_cert_file;  // certificate chain, leaf first
  std::string tls_key_file;   // its private key
};

// Registers every flag on `flags`; `options` must outlive flags.Parse().
void RegisterRouterFlags(Flags& flags, RouterOptions* options);

// Turns `--prefill` tokens into endpoints: each URL starts an endpoint, an integer or "none"
// right after it is its bootstrap port. Errors name the bad token.
absl::Status ParsePrefillEndpoints(const std::vector<std::string>& tokens,
                                   std::vector<PrefillEndpoint>* out);

// The cluster secret from --cluster-secret-file, --cluster-secret or TANDEM_CLUSTER_SECRET, in
// that order; "" when none is given (the router then sends no credentials, and workers that
// demand them refuse its calls with UNAUTHENTICATED). Errors: unreadable file, shorter than 16
// bytes; they name the source.
absl::StatusOr<std::string> LoadRouterClusterSecret(const RouterOptions& options);

// Cross-flag checks (PD mode needs --prefill and --decode, plain mode --worker-urls, policies
// known, thresholds in range, at most one of --admin-key / --admin-key-file /
// --disable-admin-auth) and fills `prefill`; reads --admin-key-file into `admin_key` (first
// line, surrounding whitespace removed; an unreadable or empty file is an error naming it).
// Errors name the flags involved.
absl::Status ValidateRouterOptions(RouterOptions* options);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_OPTIONS_H_

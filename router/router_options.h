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
#include "absl/time/time.h"
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
  // sgl-router's Prometheus listener: GET /metrics (the same text as on --port) also on
  // prometheus_host:prometheus_port, a port that serves nothing else and reads no body. 0: only
  // on --port. prometheus_host "" is --host.
  int prometheus_port = 0;
  std::string prometheus_host;
  std::string api_key;  // clients must send "Authorization: Bearer <key>"
  // The admin API's key (separate from the client key): --admin-key-file (first line; preferred,
  // `ps` shows flags) or --admin-key. Without either the admin API answers 403 unless
  // disable_admin_auth, which leaves it open to anyone who can reach the port.
  std::string admin_key;
  std::string admin_key_file;
  bool disable_admin_auth = false;
  int http_threads = 2;     // HTTP I/O threads
  int request_threads = 2;  // parse, render chat templates, tokenize (off the I/O threads)

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
  absl::Duration eviction_interval = absl::Seconds(120);  // --eviction-interval-secs
  int64_t max_tree_size = int64_t{1} << 26;
  absl::Duration worker_load_check_interval =
      absl::Seconds(10);  // --worker-load-check-interval (s)
  // Conditional disaggregation (PD mode; router/disaggregation.h): prompts of at most this many
  // tokens are prefilled on their decode worker (0: off), and so are prompts arriving while every
  // prefill worker has more than --pd-prefill-saturation-tokens prompt tokens in flight and the
  // decode worker has KV headroom (0: off). Off until measured.
  int64_t pd_local_prefill_max_tokens = 0;
  int64_t pd_prefill_saturation_tokens = 0;

  // Limits.
  // 32 MiB: far above the largest prompt a served model takes as JSON (a 128K-token context is a
  // few MiB of text or ids, even \u-escaped), far below what would let one client make the
  // router buffer and parse hundreds of MiB.
  int64_t max_payload_size = int64_t{32} << 20;
  // Request bodies held at once over all client connections (bytes; at least max_payload_size):
  // without it, connections x max_payload_size (10,000 x 32 MiB) could be held. 1 GiB: 32
  // largest bodies, or tens of thousands of ordinary prompts, at once; more get 503.
  int64_t http_max_body_memory = int64_t{1} << 30;
  absl::Duration request_timeout = absl::Seconds(1800);  // --request-timeout-secs
  // A leg that shows no progress for this long is failed (docs/router.md "Stalled legs");
  // 0: never. 30 s: several times the longest step we expect (a long prefill chunk or a KV
  // transfer of a full context on a loaded CPU takes seconds, a decode step well under one).
  absl::Duration stall_timeout = absl::Seconds(30);  // --stall-timeout-secs
  int max_concurrent_requests = -1;                  // -1: unbounded
  int queue_size = 100;
  absl::Duration queue_timeout = absl::Seconds(60);  // --queue-timeout-secs
  // Admission from KV headroom (router/admission.h): a request waits while the KV its prompt and
  // max_new_tokens need does not fit beside the needs of the requests already admitted, in the
  // total KV blocks the decode (PD) or regular (plain) workers reported.
  bool disable_kv_admission = false;
  // cache_aware on the workers' KV events (docs/router.md "KV events"); the prefix tree still
  // decides for a worker whose events are not in step. Off until measured.
  bool kv_events = false;
  absl::Duration kv_events_poll = absl::Milliseconds(50);  // --kv-events-poll-ms
  // Client connections: a request must arrive whole within the read timeout once it started
  // (slow clients cannot hold a connection), a keep-alive connection may sit idle between
  // requests for the idle timeout, and connections beyond the maximum are closed at once.
  absl::Duration http_read_timeout = absl::Seconds(60);  // --http-read-timeout-secs
  absl::Duration http_idle_timeout = absl::Seconds(60);  // --http-idle-timeout-secs
  int http_max_connections = 10000;

  // Retries (before the first token only).
  int retry_max_retries = 5;
  absl::Duration retry_initial_backoff = absl::Milliseconds(50);  // --retry-initial-backoff-ms
  absl::Duration retry_max_backoff = absl::Milliseconds(30000);   // --retry-max-backoff-ms
  double retry_backoff_multiplier = 1.5;
  double retry_jitter_factor = 0.2;
  bool disable_retries = false;

  // Health checks and circuit breaker.
  int health_failure_threshold = 3;
  int health_success_threshold = 2;
  absl::Duration health_check_timeout = absl::Seconds(5);    // --health-check-timeout-secs
  absl::Duration health_check_interval = absl::Seconds(60);  // --health-check-interval-secs
  int cb_failure_threshold = 10;
  int cb_success_threshold = 3;
  absl::Duration cb_timeout_duration = absl::Seconds(60);  // --cb-timeout-duration-secs
  absl::Duration cb_window_duration = absl::Seconds(120);  // --cb-window-duration-secs
  bool disable_circuit_breaker = false;

  // Tokenizer / chat template source (the router tokenizes for cache_aware and chat).
  std::string model_path;
  std::string tokenizer_path;
  std::string served_model_name;  // /v1/models id; "" = the model directory's name
  bool any_model_name = false;    // accept every request's "model" (SGLang does not check it)
  // SGLang's --reasoning-parser: "qwen3", "deepseek-v3", "deepseek-r1" or "qwen3-thinking"
  // separates <think> reasoning into reasoning_content for chat requests (unless they send
  // separate_reasoning: false); the last two take every answer to start as reasoning; "" = off.
  std::string reasoning_parser;
  // The Responses API's stored responses (store: true) are kept up to this many MiB, least
  // recently used dropped first; 0 keeps none (router/api/responses.h).
  int64_t response_store_mb = 64;

  std::vector<std::string> request_id_headers;  // "" = x-request-id, x-correlation-id, ...
  // The cluster secret proven to workers on every gRPC call (router/workers/cluster_credentials.h).
  std::string cluster_secret_file;  // first line; preferred (keeps the secret out of `ps`)
  std::string cluster_secret;       // or the value itself; or env TANDEM_CLUSTER_SECRET

  // TLS on the HTTP port (both or neither; PEM). Plain HTTP when empty.
  std::string tls_cert_file;  // certificate chain, leaf first
  std::string tls_key_file;   // its private key

  // Origins whose browser pages may call the client API (--cors-allowed-origins, comma
  // separated): "*" (any, as SGLang's server) or exact scheme://host[:port]; empty: no CORS. The
  // admin API never takes part. Parsed into cors_origins by ValidateRouterOptions.
  std::string cors_allowed_origins = "*";
  std::vector<std::string> cors_origins;
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

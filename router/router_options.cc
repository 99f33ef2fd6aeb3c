#include "router/router_options.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/cluster_token.h"
#include "common/http_cors.h"
#include "common/status.h"

namespace tandem::router {
namespace {

constexpr char kDefaultPdDecodePolicy[] = "power_of_two";
const std::vector<std::string> kPolicies = {"random", "round_robin", "cache_aware", "power_of_two"};

bool LooksLikeUrl(const std::string& s) {
  return absl::StrContains(s, "://") || absl::StrContains(s, ":");
}

// Reads --admin-key-file into admin_key and checks that the three admin flags do not contradict
// each other.
absl::Status ResolveAdminKey(RouterOptions* o) {
  if (!o->admin_key_file.empty()) {
    if (!o->admin_key.empty()) {
      return absl::InvalidArgumentError("give --admin-key or --admin-key-file, not both");
    }
    std::ifstream in(o->admin_key_file);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin-key-file: cannot read '", o->admin_key_file, "'"));
    }
    std::string line;
    std::getline(in, line);
    o->admin_key = std::string(absl::StripAsciiWhitespace(line));
    if (o->admin_key.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin-key-file '", o->admin_key_file, "': the first line holds no key"));
    }
  }
  if (o->disable_admin_auth && !o->admin_key.empty()) {
    return absl::InvalidArgumentError(
        "--disable-admin-auth contradicts --admin-key / --admin-key-file: give one of them");
  }
  return absl::OkStatus();
}

// Registers `flag` as a whole number of `unit`s (SGLang's names and units: "--x-secs 30") that
// sets *value; *value's current content is the default --help shows.
CLI::Option* AddDuration(Flags& flags, const std::string& flag, absl::Duration* value,
                         absl::Duration unit, const std::string& help) {
  CLI::Option* option = flags.app().add_option_function<int64_t>(
      flag, [value, unit](const int64_t& n) { *value = n * unit; }, help);
  absl::Duration remainder;
  option->default_str(absl::StrCat(absl::IDivDuration(*value, unit, &remainder)));
  option->type_name("INT");
  return option;
}

// sglang_router's launch_router flags that tandem-router accepts without acting on them, or
// refuses (docs/operations.md "SGLang launch flags").
void RegisterSglangRouterFlags(Flags& flags) {
  flags.AddIgnoredSwitch("--mini-lb",
                         "ignored: selects SGLang's Python debugging balancer (random only); "
                         "tandem-router routes by --policy");
  flags.AddIgnored("--log-dir", "ignored: tandem-router logs to stderr");
  flags.AddIgnored<int>("--worker-startup-timeout-secs",
                        "ignored: a worker takes traffic once its health checks pass "
                        "(--health-check-interval-secs)");
  flags.AddIgnored<int>("--worker-startup-check-interval",
                        "ignored: a worker takes traffic once its health checks pass "
                        "(--health-check-interval-secs)");
  flags.AddRefused("--dp-aware", /*takes_value=*/false,
                   "a Tandem worker is one data-parallel rank: list each worker's URL instead");
  flags.AddRefused("--service-discovery", /*takes_value=*/false,
                   "Tandem has no Kubernetes service discovery: list the workers "
                   "(--worker-urls, --prefill, --decode) or add them through the admin API");
}

}  // namespace

void RegisterRouterFlags(Flags& flags, RouterOptions* o) {
  flags.Add("--host", &o->host, "Address to listen on");
  flags.Add("--port", &o->port, "HTTP port")->check(CLI::Range(0, 65535));
  flags
      .Add("--prometheus-port", &o->prometheus_port,
           "Also serve GET /metrics on this port (sgl-router's Prometheus port), which serves "
           "nothing else; 0: /metrics only on --port")
      ->check(CLI::Range(0, 65535));
  flags.Add("--prometheus-host", &o->prometheus_host,
            "Address of the --prometheus-port listener (default: --host)");
  flags.Add("--api-key", &o->api_key, "Key clients must send as 'Authorization: Bearer KEY'");
  flags.Add("--admin-key", &o->admin_key,
            "Key for the admin API (workers, flush, drain); prefer --admin-key-file");
  flags.Add("--admin-key-file", &o->admin_key_file,
            "File whose first line is the admin API's key (keeps it out of `ps`)");
  flags.Add("--disable-admin-auth", &o->disable_admin_auth,
            "Serve the admin API without a key (anyone who can reach the router may add workers); "
            "without this, --admin-key or --admin-key-file, the admin API answers 403");
  flags.Add("--http-threads", &o->http_threads, "HTTP I/O threads")->check(CLI::Range(1, 256));
  flags
      .Add("--request-threads", &o->request_threads,
           "Threads that parse requests, render chat templates and tokenize, so that the HTTP I/O "
           "threads stay free for probes and streams while a large prompt is tokenized")
      ->check(CLI::Range(1, 256));

  flags.Add("--pd-disaggregation", &o->pd_disaggregation,
            "Prefill-decode disaggregated mode (--prefill and --decode)");
  flags
      .Add("--prefill", &o->prefill_args,
           "Prefill worker URL and optional bootstrap port: --prefill URL [BOOTSTRAP_PORT]; repeat")
      ->expected(1, 2);
  flags.Add("--decode", &o->decode_urls, "Decode worker URL; repeat");
  flags.Add("--worker-urls", &o->worker_urls, "Colocated workers (plain mode)");
  flags
      .Add("--pd-local-prefill-max-tokens", &o->pd_local_prefill_max_tokens,
           "PD mode: prompts of at most this many tokens are prefilled on their decode worker, "
           "without a prefill worker or KV transfer (0: off)")
      ->check(CLI::NonNegativeNumber);
  flags
      .Add("--pd-prefill-saturation-tokens", &o->pd_prefill_saturation_tokens,
           "PD mode: while every prefill worker has more than this many prompt tokens of the "
           "router's legs in flight, a prompt goes to a decode worker with KV headroom to "
           "prefill (0: off)")
      ->check(CLI::NonNegativeNumber);

  auto policies = CLI::IsMember(kPolicies);
  flags
      .Add("--policy", &o->policy,
           "Load-balancing policy (plain workers; in PD mode prefill and decode unless overridden, "
           "but cache_aware applies to prefill only)")
      ->check(policies);
  flags.Add("--prefill-policy", &o->prefill_policy, "Policy for prefill workers in PD mode")
      ->check(policies);
  flags
      .Add("--decode-policy", &o->decode_policy,
           "Policy for decode workers in PD mode (default: --policy, except power_of_two when "
           "--policy is cache_aware: decode workers keep no prefix cache, so they are placed by "
           "in-flight requests and KV use)")
      ->check(policies);
  flags
      .Add("--cache-threshold", &o->cache_threshold,
           "cache_aware: minimum prefix-match ratio to prefer the matching worker")
      ->check(CLI::Range(0.0, 1.0));
  flags
      .Add("--balance-abs-threshold", &o->balance_abs_threshold,
           "cache_aware: balance load when max-min > this AND max > min*rel")
      ->check(CLI::NonNegativeNumber);
  flags
      .Add("--balance-rel-threshold", &o->balance_rel_threshold,
           "cache_aware: relative load imbalance that switches to least-load")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--eviction-interval-secs", &o->eviction_interval, absl::Seconds(1),
              "cache_aware: seconds between prefix-tree evictions")
      ->check(CLI::PositiveNumber);
  flags.Add("--max-tree-size", &o->max_tree_size, "cache_aware: prefix-tree size bound (tokens)")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--worker-load-check-interval", &o->worker_load_check_interval,
              absl::Seconds(1), "Seconds between load polls (power_of_two's KV-pressure term)")
      ->check(CLI::PositiveNumber);

  flags
      .Add("--max-payload-size", &o->max_payload_size,
           "Largest request body in bytes (413 above; default 32 MiB)")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--http-max-body-memory", &o->http_max_body_memory,
           "Request bodies held at once over all connections, in bytes (503 beyond; at least "
           "--max-payload-size; default 1 GiB)")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--request-timeout-secs", &o->request_timeout, absl::Seconds(1),
              "Whole-request timeout")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--stall-timeout-secs", &o->stall_timeout, absl::Seconds(1),
              "Fail a leg whose stream sent nothing for this long, or whose worker stopped passing "
              "health checks while it waited (retried if nothing reached the client; 0: never)")
      ->check(CLI::NonNegativeNumber);
  flags.Add("--max-concurrent-requests", &o->max_concurrent_requests,
            "Requests served at once (-1: unbounded); more wait in the queue");
  flags.Add("--queue-size", &o->queue_size, "Requests that may wait (429 beyond)")
      ->check(CLI::NonNegativeNumber);
  AddDuration(flags, "--queue-timeout-secs", &o->queue_timeout, absl::Seconds(1),
              "Longest wait in the queue (408 after)")
      ->check(CLI::PositiveNumber);
  flags.Add("--kv-events", &o->kv_events,
            "cache_aware routes on the prefill (or regular) workers' KV events, with its prefix "
            "tree as the fallback");
  AddDuration(flags, "--kv-events-poll-ms", &o->kv_events_poll, absl::Milliseconds(1),
              "How often the router reads each worker's KV events")
      ->check(CLI::Range(1, 60000));
  flags.Add("--disable-kv-admission", &o->disable_kv_admission,
            "Admit requests without checking that the workers' KV holds them (prompt + "
            "max_new_tokens of every admitted request within the reported KV blocks)");
  AddDuration(flags, "--http-read-timeout-secs", &o->http_read_timeout, absl::Seconds(1),
              "Longest time a client may take to send one request, first byte to last (then the "
              "connection is closed)")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--http-idle-timeout-secs", &o->http_idle_timeout, absl::Seconds(1),
              "Longest idle time of a keep-alive client connection between requests")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--http-max-connections", &o->http_max_connections,
           "Client connections open at once; at the limit a new one displaces the one waiting "
           "longest for a request, or is closed if every one has a request in progress")
      ->check(CLI::PositiveNumber);

  flags.Add("--retry-max-retries", &o->retry_max_retries, "Attempts before the first token")
      ->check(CLI::NonNegativeNumber);
  AddDuration(flags, "--retry-initial-backoff-ms", &o->retry_initial_backoff, absl::Milliseconds(1),
              "First retry delay")
      ->check(CLI::NonNegativeNumber);
  AddDuration(flags, "--retry-max-backoff-ms", &o->retry_max_backoff, absl::Milliseconds(1),
              "Largest retry delay")
      ->check(CLI::NonNegativeNumber);
  flags.Add("--retry-backoff-multiplier", &o->retry_backoff_multiplier, "Delay growth per retry")
      ->check(CLI::Range(1.0, 100.0));
  flags.Add("--retry-jitter-factor", &o->retry_jitter_factor, "Random +- fraction of each delay")
      ->check(CLI::Range(0.0, 1.0));
  flags.Add("--disable-retries", &o->disable_retries, "Never retry");

  flags
      .Add("--health-failure-threshold", &o->health_failure_threshold,
           "Failed checks in a row that mark a worker unhealthy")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--health-success-threshold", &o->health_success_threshold,
           "Passed checks in a row that mark it healthy again")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--health-check-timeout-secs", &o->health_check_timeout, absl::Seconds(1),
              "Health check timeout")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--health-check-interval-secs", &o->health_check_interval, absl::Seconds(1),
              "Seconds between health checks")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--cb-failure-threshold", &o->cb_failure_threshold,
           "Failures within the window that open a worker's circuit")
      ->check(CLI::PositiveNumber);
  flags
      .Add("--cb-success-threshold", &o->cb_success_threshold,
           "Successes in half-open state that close it")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--cb-timeout-duration-secs", &o->cb_timeout_duration, absl::Seconds(1),
              "Seconds an open circuit waits before half-open when no health check passes")
      ->check(CLI::PositiveNumber);
  AddDuration(flags, "--cb-window-duration-secs", &o->cb_window_duration, absl::Seconds(1),
              "Failure-counting window")
      ->check(CLI::PositiveNumber);
  flags.Add("--disable-circuit-breaker", &o->disable_circuit_breaker, "No circuit breaker");

  flags.Add("--model-path", &o->model_path,
            "Model directory whose tokenizer and chat template the router uses");
  flags.Add("--tokenizer-path", &o->tokenizer_path, "Tokenizer directory (default: --model-path)");
  flags.Add("--served-model-name", &o->served_model_name,
            "Model id of /v1/models and the accepted \"model\" (default: the model directory's "
            "name)");
  flags.Add("--any-model-name", &o->any_model_name,
            "Serve a request whatever its \"model\" names, as SGLang does (default: the served "
            "name, \"default\" or a path ending in the served or directory name; others get 404)");
  flags
      .Add("--reasoning-parser", &o->reasoning_parser,
           "Reasoning format of the model's chat answers, separated into reasoning_content: "
           "<think>...</think> (qwen3, deepseek-v3: when the answer or the prompt opens it; "
           "deepseek-r1, qwen3-thinking: every answer starts as reasoning)")
      ->check(CLI::IsMember({"qwen3", "deepseek-v3", "deepseek-r1", "qwen3-thinking"}));
  flags
      .Add("--response-store-mb", &o->response_store_mb,
           "Memory for the Responses API's stored responses (GET /v1/responses/{id}, "
           "previous_response_id), least recently used dropped first; 0 keeps none")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  flags.Add("--request-id-headers", &o->request_id_headers,
            "Headers checked for a client request id");
  flags.Add("--cluster-secret-file", &o->cluster_secret_file,
            "File whose first line is the cluster secret the workers require");
  flags.Add("--cluster-secret", &o->cluster_secret,
            "The cluster secret itself (prefer --cluster-secret-file)");
  flags.Add("--tls-cert-file", &o->tls_cert_file,
            "PEM certificate chain: serve HTTPS instead of HTTP (with --tls-key-file)");
  flags.Add("--tls-key-file", &o->tls_key_file, "PEM private key of --tls-cert-file");
  flags.Add("--cors-allowed-origins", &o->cors_allowed_origins,
            "Origins whose browser pages may call the client API, comma separated: * (any, the "
            "default, as SGLang's server) or scheme://host[:port]; \"\" turns CORS off. The "
            "admin API is never cross-origin");
  RegisterSglangRouterFlags(flags);
}

absl::StatusOr<std::string> LoadRouterClusterSecret(const RouterOptions& o) {
  return ResolveClusterSecret(o.cluster_secret_file, o.cluster_secret, /*required=*/false);
}

absl::Status ParsePrefillEndpoints(const std::vector<std::string>& tokens,
                                   std::vector<PrefillEndpoint>* out) {
  out->clear();
  for (const std::string& t : tokens) {
    int port = 0;
    const bool is_port = absl::SimpleAtoi(t, &port);
    if (is_port || t == "none") {
      if (out->empty() || out->back().bootstrap_port.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--prefill: bootstrap port '", t, "' does not follow a URL"));
      }
      if (is_port && (port < 1 || port > 65535)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--prefill: bootstrap port '", t, "' is not in [1, 65535]"));
      }
      if (is_port) out->back().bootstrap_port = port;
      continue;
    }
    if (!LooksLikeUrl(t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prefill: '", t, "' is neither a URL (http://host:port) nor a port"));
    }
    out->push_back(PrefillEndpoint{t, std::nullopt});
  }
  return absl::OkStatus();
}

absl::Status ValidateRouterOptions(RouterOptions* o) {
  std::vector<std::string> tokens;
  for (const auto& occurrence : o->prefill_args) {
    tokens.insert(tokens.end(), occurrence.begin(), occurrence.end());
  }
  RETURN_IF_ERROR(ParsePrefillEndpoints(tokens, &o->prefill));
  if (o->pd_disaggregation) {
    if (!o->worker_urls.empty()) {
      return absl::InvalidArgumentError(
          "--worker-urls is for plain mode; with --pd-disaggregation give --prefill and --decode");
    }
    if (o->prefill.empty() || o->decode_urls.empty()) {
      return absl::InvalidArgumentError(
          "--pd-disaggregation needs at least one --prefill URL [BOOTSTRAP_PORT] and one "
          "--decode URL (workers can also be added later through the admin API only in plain "
          "mode)");
    }
    for (const PrefillEndpoint& p : o->prefill) {
      if (!p.bootstrap_port) {
        return absl::InvalidArgumentError(
            absl::StrCat("--prefill ", p.url,
                         ": a bootstrap port is required in PD mode (the worker's "
                         "--disaggregation-bootstrap-port)"));
      }
    }
  } else if (!o->prefill.empty() || !o->decode_urls.empty()) {
    return absl::InvalidArgumentError("--prefill and --decode need --pd-disaggregation");
  } else if (o->pd_local_prefill_max_tokens > 0 || o->pd_prefill_saturation_tokens > 0) {
    return absl::InvalidArgumentError(
        "--pd-local-prefill-max-tokens and --pd-prefill-saturation-tokens need "
        "--pd-disaggregation (in plain mode every worker prefills)");
  }
  if (o->prefill_policy.empty()) o->prefill_policy = o->policy;
  if (o->decode_policy.empty()) {
    // A disaggregated decode worker keeps no prefix cache, so cache affinity means nothing for
    // it; cache_aware's decode side would only pile a shared prefix onto one worker.
    o->decode_policy =
        o->pd_disaggregation && o->policy == "cache_aware" ? kDefaultPdDecodePolicy : o->policy;
  }
  if (o->max_concurrent_requests == 0 || o->max_concurrent_requests < -1) {
    return absl::InvalidArgumentError("--max-concurrent-requests must be -1 or positive");
  }
  if (o->prometheus_port != 0 && o->prometheus_port == o->port) {
    return absl::InvalidArgumentError(
        "--prometheus-port must differ from --port (the router serves /metrics there too)");
  }
  if (o->prometheus_host.empty()) o->prometheus_host = o->host;
  if (o->tls_cert_file.empty() != o->tls_key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert-file and --tls-key-file go together");
  }
  o->cors_origins.clear();
  for (absl::string_view origin : absl::StrSplit(o->cors_allowed_origins, ',', absl::SkipEmpty())) {
    origin = absl::StripAsciiWhitespace(origin);
    if (!origin.empty()) o->cors_origins.emplace_back(origin);
  }
  RETURN_IF_ERROR(CheckCorsOrigins(o->cors_origins), "--cors-allowed-origins: ");
  RETURN_IF_ERROR(ResolveAdminKey(o));
  if (!o->api_key.empty() && o->api_key == o->admin_key) {
    return absl::InvalidArgumentError("--admin-key must differ from --api-key");
  }
  return absl::OkStatus();
}

}  // namespace tandem::router

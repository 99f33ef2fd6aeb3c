// RouterServer: the tandem-router process-level object. It owns the options, the tokenizer, the
// worker registry (health and load loop), the policies, the dispatcher (PD pairing, retries), the
// admission queue (--max-concurrent-requests / --queue-size) and the HTTP front door with every
// route (docs/router.md "Routes and the admin API"):
//
//   client (--api-key):  POST|PUT /generate, POST /v1/completions, /v1/chat/completions;
//                        GET /v1/models; POST /abort_request {"rid"} (abort_all: admin key);
//                        POST /tokenize, /detokenize (also under /v1/: the router's tokenizer)
//   probes (no key):     GET /health, /liveness, /readiness, /metrics
//   info (--api-key):    GET /get_model_info (also /model_info), /get_server_info (also
//                        /server_info), /get_load, /get_loads, /version, /health_generate (a
//                        model leg: keyed and admitted like any request)
//   admin (--admin-key): GET/POST/DELETE /workers, POST /workers/drain, GET|POST /flush_cache,
//                        POST /add_worker?url=, POST /remove_worker?url=, GET /list_workers
//
// The admin routes are closed by default: without --admin-key / --admin-key-file they answer
// 403 naming those flags, unless --disable-admin-auth opens them (logged as a warning at start),
// because whoever can add a worker receives other clients' prompts.
//
// Thread-safety: Create/Shutdown on the main thread; HTTP handlers run on I/O threads and answer
// asynchronously from gRPC threads. Shutdown() stops the HTTP server (open streams see OnClose and
// cancel their legs), then the registry; the destructor waits for the legs still in flight.
#ifndef TANDEM_ROUTER_ROUTER_SERVER_H_
#define TANDEM_ROUTER_ROUTER_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/work_queue.h"
#include "engine/tokenizer/tokenizer.h"
#include "router/admission.h"
#include "router/api/request.h"
#include "router/api/response.h"
#include "router/api/responses.h"
#include "router/dispatcher.h"
#include "router/policy/kv_event_index.h"
#include "router/policy/kv_event_subscriber.h"
#include "router/policy/policy.h"
#include "router/router_metrics.h"
#include "router/router_options.h"
#include "router/workers/worker_registry.h"

namespace tandem::router {

class ClientCall;

class RouterServer {
 public:
  // Validates options, loads the tokenizer, registers the workers given by flags, starts the
  // health loop and the HTTP front door. Errors name the flag or file at fault.
  static absl::StatusOr<std::unique_ptr<RouterServer>> Create(RouterOptions options);
  ~RouterServer();
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  int port() const { return http_->port(); }
  // The --prometheus-port listener's port (0 when there is none).
  int prometheus_port() const { return metrics_http_ != nullptr ? metrics_http_->port() : 0; }
  // Stops accepting, closes connections, stops health checks. Idempotent.
  void Shutdown();

 private:
  friend class ClientCall;
  explicit RouterServer(RouterOptions options) : options_(std::move(options)) {}

  void AddRoutes();
  // The /metrics text, its point-in-time gauges (body bytes held, healthy workers, stored
  // responses) set first. Served on --port and on --prometheus-port.
  HttpResponse MetricsResponse();
  // Client routes: auth, parse, admission, dispatch, response shaping.
  void HandleInference(const std::string& route, ApiKind kind, HttpRequest request,
                       HttpResponder responder);
  void HandleHealthGenerate(HttpResponder responder);
  void StartHealthGenerate(const std::shared_ptr<HttpResponder>& holder);
  // The table of rids of client requests in progress: a second live request with a rid is a 409
  // (workers key their state by rid). Claim fails when `rid` is live; Release is idempotent per
  // successful Claim. Bind names the call that holds a claimed rid, for /abort_request.
  bool ClaimRid(const std::string& rid) ABSL_LOCKS_EXCLUDED(rids_mu_);
  void BindRid(const std::string& rid, std::weak_ptr<ClientCall> call)
      ABSL_LOCKS_EXCLUDED(rids_mu_);
  void ReleaseRid(const std::string& rid) ABSL_LOCKS_EXCLUDED(rids_mu_);
  // Aborts the call in progress holding `rid`, or every one when `rid` is null (ClientCall::Abort);
  // returns how many there were.
  size_t AbortCalls(const std::string* rid) ABSL_LOCKS_EXCLUDED(rids_mu_);
  // POST /abort_request (SGLang's {"rid","abort_all"}; router_admin.cc): aborts the request in
  // progress with that rid as a client disconnect would (both legs cancelled, the room aborted on
  // both workers), but its client is answered with the abort. An unknown rid is not an error (it
  // may have just finished; SGLang answers 200 too). abort_all takes the admin key, a rid the
  // client key.
  void HandleAbortRequest(const HttpRequest& request, HttpResponder responder);
  // Info and admin routes (router_admin.cc).
  void HandleServerInfo(HttpResponder responder, const std::string& route);
  void HandleModelInfo(HttpResponder responder, const std::string& route);
  void HandleGetLoad(HttpResponder responder);
  void HandleGetLoads(HttpResponder responder);
  void HandleFlushCache(HttpResponder responder);
  void HandleListWorkers(HttpResponder responder, bool sglang_form);
  void HandleAddWorker(const HttpRequest& request, HttpResponder responder, bool query_form);
  void HandleRemoveWorker(const HttpRequest& request, HttpResponder responder, bool query_form);
  void HandleDrainWorker(const HttpRequest& request, HttpResponder responder);
  // The Responses API's stored responses (router_responses.cc): GET and DELETE
  // /v1/responses/{id}, GET /v1/responses/{id}/input_items, POST /v1/responses/{id}/cancel.
  void AddResponsesRoutes(const std::string* api_key);
  // Keeps a finished Responses answer that asked to be stored (ResponseShaper::ToStore).
  void StoreResponse(const ResponseShaper& shaper);
  // Sends `response` and counts it under `route`.
  void Answer(const std::string& route, HttpResponder& responder, HttpResponse response);
  // Wraps a handler with the key check for `key` and request counting.
  HttpHandler Guarded(const std::string& route, const std::string* key, const std::string& what,
                      HttpHandler handler);
  // The same key check on a request's head, so that the body of a request without the key is
  // never read (common/http_server.h); null when `key` is null.
  HttpHeadCheck KeyCheck(const std::string& route, const std::string* key, const std::string& what);
  // Runs `handler` on request_work_ instead of the I/O thread (for parsing and tokenizing); a
  // 503 naming the backlog when request_work_ is full.
  HttpHandler OnRequestThreads(const std::string& route, HttpHandler handler);
  // Registers `handler` behind both checks.
  void HandleGuarded(const std::string& method, const std::string& route, const std::string* key,
                     const std::string& what, HttpHandler handler);
  // `response` counted under `route` as a refused request, for a head check to return.
  HttpResponse Refused(const std::string& route, HttpResponse response);
  // 403 (PermissionDenied) naming --admin-key-file, --admin-key and --disable-admin-auth: the
  // admin API of a router started with none of them.
  static HttpResponse AdminDisabledResponse();
  // Answers AdminDisabledResponse().
  HttpHandler AdminDisabled(const std::string& route);

  RouterOptions options_;
  MetricsRegistry metrics_;
  std::unique_ptr<RouterMetrics> router_metrics_;
  std::unique_ptr<engine::Tokenizer> tokenizer_;
  ApiContext api_;
  std::unique_ptr<ResponseStore> response_store_;  // --response-store-mb; api_ points at it
  int64_t created_ = 0;                            // unix seconds, for /v1/models
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<KvEventIndex> kv_index_;  // --kv-events; outlives the policies reading it
  std::unique_ptr<Policy> prefill_policy_;
  std::unique_ptr<Policy> decode_policy_;
  std::unique_ptr<KvEventSubscriber> kv_subscriber_;  // reads registry_; stopped first
  // Declared before the dispatcher: the dispatcher's destructor waits for runs whose last
  // callbacks release admission slots.
  std::unique_ptr<AdmissionQueue> admission_;
  std::unique_ptr<Dispatcher> dispatcher_;
  // Runs the inference and tokenizer routes' parsing and tokenizing (--request-threads); one job
  // per connection at most, so bounded by --http-max-connections. Stopped after http_.
  std::unique_ptr<WorkQueue> request_work_;
  std::unique_ptr<HttpServer> http_;
  // --prometheus-port: GET /metrics only, no bodies. Stopped before http_.
  std::unique_ptr<HttpServer> metrics_http_;

  absl::Mutex rids_mu_;
  // rid -> its call (unset between ClaimRid and BindRid).
  absl::flat_hash_map<std::string, std::weak_ptr<ClientCall>> live_rids_ ABSL_GUARDED_BY(rids_mu_);
};

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_ROUTER_SERVER_H_

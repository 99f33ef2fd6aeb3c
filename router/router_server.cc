#include "router/router_server.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/http_tls.h"
#include "common/logging.h"
#include "common/release_memory.h"
#include "common/status.h"
#include "common/version.h"
#include "engine/model_config.h"
#include "nlohmann/json.hpp"
#include "router/api/response.h"
#include "router/api/tokenize.h"
#include "router/client_call.h"
#include "router/request_headers.h"
#include "router/router_listeners.h"

namespace tandem::router {
namespace {

// The model's context length (max_position_embeddings of its config.json in `dir`); 0 with a
// warning when the config cannot be read, and the router then leaves the check to the workers.
// The model's context length and vocabulary size from its config.json, for the checks the
// router makes before any leg (router/api/request.h ApiContext); 0s when it has none.
void ReadModelLimits(const std::string& dir, ApiContext* ctx) {
  absl::StatusOr<engine::ModelConfig> config =
      engine::ModelConfig::FromFile((std::filesystem::path(dir) / "config.json").string());
  if (!config.ok()) {
    spdlog::warn(
        "{}; prompts are checked against the context length, and logit_bias against the "
        "vocabulary, by the workers only",
        std::string(config.status().message()));
    return;
  }
  const auto clamp = [](int64_t v) {
    return static_cast<int>(std::min<int64_t>(v, std::numeric_limits<int>::max()));
  };
  ctx->context_length = clamp(config->max_position_embeddings);
  ctx->vocab_size = clamp(config->vocab_size);
}

// Bytes of the longest token `tokenizer` can produce (special tokens included), for the early
// prompt-length bound (router/api/request.h).
int LongestTokenBytes(const engine::Tokenizer& tokenizer) {
  size_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.TokenBytes(id, /*skip_special_tokens=*/false).size());
  }
  return static_cast<int>(std::min<size_t>(longest, std::numeric_limits<int>::max()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Create(RouterOptions options) {
  RETURN_IF_ERROR(ValidateRouterOptions(&options));
  std::unique_ptr<RouterServer> server(new RouterServer(std::move(options)));
  RouterServer& s = *server;
  const RouterOptions& o = s.options_;
  s.router_metrics_ = std::make_unique<RouterMetrics>(&s.metrics_, o.pd_disaggregation);

  const std::string tokenizer_dir = !o.tokenizer_path.empty() ? o.tokenizer_path : o.model_path;
  if (tokenizer_dir.empty()) {
    return absl::InvalidArgumentError(
        "the router needs the model directory for its tokenizer and chat template: give "
        "--model-path DIR (or --tokenizer-path DIR); nothing is downloaded");
  }
  auto tokenizer = engine::Tokenizer::FromModelDir(tokenizer_dir);
  if (!tokenizer.ok()) {
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat(o.tokenizer_path.empty() ? "--model-path " : "--tokenizer-path ",
                     tokenizer_dir, ": ", tokenizer.status().message()));
  }
  s.tokenizer_ = std::move(*tokenizer);
  s.api_.tokenizer = s.tokenizer_.get();
  if (const absl::Status chat = s.tokenizer_->chat_template_status(); !chat.ok()) {
    // Completions with raw prompts still work; chat requests are refused with this reason.
    spdlog::warn("{}: {}; /v1/chat/completions will refuse requests", tokenizer_dir,
                 std::string(chat.message()));
  }
  // The router refuses prompts over the context itself, before any leg is sent (workers would
  // refuse them too, but only after the router tokenized and shipped them).
  ReadModelLimits(!o.model_path.empty() ? o.model_path : tokenizer_dir, &s.api_);
  s.api_.max_token_bytes = LongestTokenBytes(*s.tokenizer_);
  s.api_.max_parsed_json_bytes = 8 * static_cast<size_t>(o.max_payload_size);
  s.api_.reasoning_parser = !o.reasoning_parser.empty();
  s.api_.reasoning_always =
      o.reasoning_parser == "deepseek-r1" || o.reasoning_parser == "qwen3-thinking";
  s.response_store_ =
      std::make_unique<ResponseStore>(static_cast<size_t>(o.response_store_mb) << 20);
  s.api_.response_store = s.response_store_.get();
  {
    std::filesystem::path dir(!o.model_path.empty() ? o.model_path : o.tokenizer_path);
    if (!dir.has_filename()) dir = dir.parent_path();
    s.api_.model_dir_name = dir.filename().string();
  }
  s.api_.served_model_name =
      o.served_model_name.empty() ? s.api_.model_dir_name : o.served_model_name;
  s.api_.any_model_name = o.any_model_name;
  s.created_ = absl::ToUnixSeconds(absl::Now());

  RegistryOptions ro;
  ASSIGN_OR_RETURN(ro.cluster_secret, LoadRouterClusterSecret(o));
  if (ro.cluster_secret.empty() && o.pd_disaggregation) {
    spdlog::warn(
        "no cluster secret (--cluster-secret-file): workers that require it will refuse "
        "this router's calls (UNAUTHENTICATED)");
  }
  ro.health_failure_threshold = o.health_failure_threshold;
  ro.health_success_threshold = o.health_success_threshold;
  ro.health_check_timeout = o.health_check_timeout;
  ro.health_check_interval = o.health_check_interval;
  ro.cb_failure_threshold = o.cb_failure_threshold;
  ro.cb_success_threshold = o.cb_success_threshold;
  ro.cb_timeout_duration = o.cb_timeout_duration;
  ro.cb_window_duration = o.cb_window_duration;
  ro.disable_circuit_breaker = o.disable_circuit_breaker;
  ro.worker_load_check_interval = o.worker_load_check_interval;
  s.registry_ = std::make_unique<WorkerRegistry>(ro, &s.metrics_);

  PolicyOptions po;
  po.cache_threshold = o.cache_threshold;
  po.balance_abs_threshold = o.balance_abs_threshold;
  po.balance_rel_threshold = o.balance_rel_threshold;
  po.max_tree_size = o.max_tree_size;
  po.eviction_interval = o.eviction_interval;
  if (o.kv_events) {
    s.kv_index_ = std::make_unique<KvEventIndex>();
    po.kv_event_index = s.kv_index_.get();
  }
  ASSIGN_OR_RETURN(s.prefill_policy_, MakePolicy(o.prefill_policy, po, &s.metrics_),
                   "--prefill-policy: ");
  ASSIGN_OR_RETURN(s.decode_policy_,
                   MakePolicy(o.pd_disaggregation ? o.decode_policy : o.policy, po, &s.metrics_),
                   o.pd_disaggregation ? "--decode-policy: " : "--policy: ");

  if (o.pd_disaggregation) {
    for (const PrefillEndpoint& p : o.prefill) {
      RETURN_IF_ERROR(s.registry_->Add(p.url, WorkerType::kPrefill, p.bootstrap_port).status(),
                      "--prefill: ");
    }
    for (const std::string& url : o.decode_urls) {
      RETURN_IF_ERROR(s.registry_->Add(url, WorkerType::kDecode, std::nullopt).status(),
                      "--decode: ");
    }
  } else {
    for (const std::string& url : o.worker_urls) {
      RETURN_IF_ERROR(s.registry_->Add(url, WorkerType::kRegular, std::nullopt).status(),
                      "--worker-urls: ");
    }
  }

  AdmissionQueue::KvPoolFn kv_pool;
  if (!o.disable_kv_admission) {
    WorkerRegistry* registry = s.registry_.get();
    const WorkerType kv_holder = o.pd_disaggregation ? WorkerType::kDecode : WorkerType::kRegular;
    kv_pool = [registry, kv_holder] {
      KvPool pool;
      for (const WorkerPtr& worker : registry->Available(kv_holder)) {
        const proto::LoadReport load = worker->load();
        pool.total_blocks += std::max<int64_t>(0, load.total_kv_blocks());
        pool.block_size = std::max(pool.block_size, load.kv_block_size());
      }
      return pool;
    };
  }
  s.admission_ = std::make_unique<AdmissionQueue>(o.max_concurrent_requests, o.queue_size,
                                                  o.queue_timeout, std::move(kv_pool));
  DispatchOptions dop;
  dop.pd_mode = o.pd_disaggregation;
  dop.backoff.max_retries = o.disable_retries ? 0 : o.retry_max_retries;
  dop.backoff.initial_backoff = o.retry_initial_backoff;
  dop.backoff.max_backoff = o.retry_max_backoff;
  dop.backoff.multiplier = o.retry_backoff_multiplier;
  dop.backoff.jitter_factor = o.retry_jitter_factor;
  dop.request_timeout = o.request_timeout;
  dop.stall_timeout = o.stall_timeout;
  dop.disaggregation.local_prefill_max_tokens = o.pd_local_prefill_max_tokens;
  dop.disaggregation.prefill_saturation_tokens = o.pd_prefill_saturation_tokens;
  s.dispatcher_ = std::make_unique<Dispatcher>(dop, s.registry_.get(), s.prefill_policy_.get(),
                                               s.decode_policy_.get(), s.router_metrics_.get());
  s.registry_->Start();
  if (s.kv_index_ != nullptr) {
    // The workers whose prompts the router places: prefill workers in PD mode, regular ones else.
    WorkerRegistry* registry = s.registry_.get();
    const WorkerType type = o.pd_disaggregation ? WorkerType::kPrefill : WorkerType::kRegular;
    KvEventSubscriberOptions ko;
    ko.cluster_secret = ro.cluster_secret;
    ko.poll_interval = o.kv_events_poll;
    s.kv_subscriber_ = std::make_unique<KvEventSubscriber>(
        s.kv_index_.get(),
        [registry, type] {
          std::vector<std::string> urls;
          for (const WorkerPtr& w : registry->List(type)) urls.push_back(w->url());
          return urls;
        },
        ko, &s.metrics_);
    s.kv_subscriber_->Start();
  }

  const HttpServerOptions http = ClientPortOptions(o, s.router_metrics_.get());
  if (!o.tls_cert_file.empty()) {
    RETURN_IF_ERROR(CheckTlsFiles(o.tls_cert_file, o.tls_key_file),
                    "--tls-cert-file/--tls-key-file: ");
  }
  s.request_work_ =
      std::make_unique<WorkQueue>("tandem-requests", o.request_threads, o.http_max_connections);
  s.http_ = std::make_unique<HttpServer>(http);
  s.AddRoutes();
  if (o.disable_admin_auth) {
    spdlog::warn(
        "--disable-admin-auth: the admin API (add/remove/drain workers, flush cache) takes no "
        "key; anyone who can reach {}:{} can point this router at a worker of their own and "
        "receive its clients' prompts",
        o.host, o.port);
  } else if (o.admin_key.empty()) {
    spdlog::info(
        "no admin key: the admin API answers 403 (give --admin-key-file to use it, e.g. with "
        "tandemctl)");
  }
  RETURN_IF_ERROR(s.http_->Start(), "--host/--port: ");
  if (o.prometheus_port != 0) {
    RouterServer* self = &s;
    ASSIGN_OR_RETURN(s.metrics_http_,
                     StartPrometheusPort(o, http, [self] { return self->MetricsResponse(); }));
  }
  spdlog::info(
      "tandem-router {} on {}:{} ({} mode, {} prefill, {} decode, {} plain workers; policy "
      "{}/{}; model '{}')",
      kTandemVersion, o.host, s.http_->port(), o.pd_disaggregation ? "pd" : "plain",
      o.prefill.size(), o.decode_urls.size(), o.worker_urls.size(), o.prefill_policy,
      o.decode_policy, s.api_.served_model_name);
  return server;
}

RouterServer::~RouterServer() { Shutdown(); }

void RouterServer::Shutdown() {
  if (metrics_http_) metrics_http_->Stop();
  if (http_) http_->Stop();
  if (request_work_) request_work_->Stop();
  if (kv_subscriber_) kv_subscriber_->Stop();
  if (registry_) registry_->Stop();
}

void RouterServer::Answer(const std::string& route, HttpResponder& responder,
                          HttpResponse response) {
  router_metrics_->CountRequest(route, response.status);
  responder.Send(std::move(response));
}

HttpHandler RouterServer::Guarded(const std::string& route, const std::string* key,
                                  const std::string& what, HttpHandler handler) {
  return [this, route, key, what, handler = std::move(handler)](HttpRequest request,
                                                                HttpResponder responder) {
    if (key != nullptr) {
      if (absl::Status s = CheckBearer(request, *key, what); !s.ok()) {
        router_metrics_->CountError(route, "unauthorized");
        Answer(route, responder, ErrorResponse(s));
        return;
      }
    }
    handler(std::move(request), std::move(responder));
  };
}

HttpHeadCheck RouterServer::KeyCheck(const std::string& route, const std::string* key,
                                     const std::string& what) {
  if (key == nullptr) return nullptr;
  return [this, route, key, what](const HttpRequest& head) -> std::optional<HttpResponse> {
    absl::Status s = CheckBearer(head, *key, what);
    if (s.ok()) return std::nullopt;
    return Refused(route, ErrorResponse(s));
  };
}

HttpHandler RouterServer::OnRequestThreads(const std::string& route, HttpHandler handler) {
  auto shared = std::make_shared<HttpHandler>(std::move(handler));
  return [this, route, shared](HttpRequest request, HttpResponder responder) {
    // std::function needs a copyable job: the request and responder travel in shared holders.
    auto request_holder = std::make_shared<HttpRequest>(std::move(request));
    auto responder_holder = std::make_shared<HttpResponder>(std::move(responder));
    const bool queued = request_work_->Post([shared, request_holder, responder_holder] {
      const bool large = request_holder->body.size() >= kReleaseAfterBodyBytes;
      (*shared)(std::move(*request_holder), std::move(*responder_holder));
      // The body and what parsing it made are freed by now; glibc would keep their pages.
      if (large) ReleaseFreedMemory();
    });
    if (!queued) {
      router_metrics_->CountError(route, "queue_full");
      Answer(route, *responder_holder,
             ErrorResponse(absl::ResourceExhaustedError(
                 absl::StrCat("the router is busy: ", request_work_->max_pending(),
                              " requests are waiting to be parsed and tokenized; retry later"))));
    }
  };
}

void RouterServer::HandleGuarded(const std::string& method, const std::string& route,
                                 const std::string* key, const std::string& what,
                                 HttpHandler handler) {
  http_->Handle(method, route, Guarded(route, key, what, std::move(handler)),
                KeyCheck(route, key, what));
}

HttpResponse RouterServer::Refused(const std::string& route, HttpResponse response) {
  router_metrics_->CountError(route, "unauthorized");
  router_metrics_->CountRequest(route, response.status);
  return response;
}

HttpResponse RouterServer::AdminDisabledResponse() {
  return ErrorResponse(absl::PermissionDeniedError(
      "the admin API is disabled: this router was started without an admin key; start it with "
      "--admin-key-file FILE (or --admin-key KEY) and send 'Authorization: Bearer KEY', or pass "
      "--disable-admin-auth to leave the admin API open to anyone who can reach this port"));
}

HttpHandler RouterServer::AdminDisabled(const std::string& route) {
  return [this, route](HttpRequest, HttpResponder responder) {
    router_metrics_->CountError(route, "unauthorized");
    Answer(route, responder, AdminDisabledResponse());
  };
}

void RouterServer::HandleInference(const std::string& route, ApiKind kind, HttpRequest request,
                                   HttpResponder responder) {
  auto parsed = ParseBatch(kind, request.body, api_);
  if (!parsed.ok()) {
    router_metrics_->CountError(route, "bad_request");
    HttpResponse r = ErrorResponse(parsed.status());
    Answer(route, responder, std::move(r));
    return;
  }
  RoutedBatch batch = std::move(*parsed);
  const std::vector<std::string>& id_headers =
      options_.request_id_headers.empty() ? DefaultRequestIdHeaders() : options_.request_id_headers;
  absl::StatusOr<std::optional<std::string>> id = ClientRequestId(request, id_headers);
  if (!id.ok()) {
    router_metrics_->CountError(route, "bad_request");
    Answer(route, responder, ErrorResponse(id.status()));
    return;
  }
  if (id->has_value()) SetBatchRid(**id, &batch);
  // Workers key their state by rid: every item's must be free.
  for (size_t i = 0; i < batch.items.size(); ++i) {
    if (ClaimRid(batch.items[i].rid)) continue;
    for (size_t k = 0; k < i; ++k) ReleaseRid(batch.items[k].rid);
    const absl::Status duplicate = absl::AlreadyExistsError(absl::StrCat(
        "rid '", batch.items[i].rid,
        "' is already used by a request in progress; give each request its own rid (or "
        "request-id header)"));
    router_metrics_->CountError(route, "bad_request");
    Answer(route, responder, ErrorResponse(duplicate));
    return;
  }
  std::vector<std::string> rids;
  for (const RoutedRequest& item : batch.items) rids.push_back(item.rid);
  auto call = std::make_shared<ClientCall>(this, route, std::move(batch), std::move(responder));
  for (const std::string& rid : rids) BindRid(rid, call);
  call->Begin();
}

bool RouterServer::ClaimRid(const std::string& rid) {
  absl::MutexLock lock(&rids_mu_);
  return live_rids_.try_emplace(rid).second;
}

void RouterServer::BindRid(const std::string& rid, std::weak_ptr<ClientCall> call) {
  absl::MutexLock lock(&rids_mu_);
  auto it = live_rids_.find(rid);
  if (it != live_rids_.end()) it->second = std::move(call);
}

size_t RouterServer::AbortCalls(const std::string* rid) {
  std::vector<std::shared_ptr<ClientCall>> calls;
  {
    absl::MutexLock lock(&rids_mu_);
    if (rid != nullptr) {
      auto it = live_rids_.find(*rid);
      if (it != live_rids_.end()) {
        if (auto call = it->second.lock()) calls.push_back(std::move(call));
      }
    } else {
      for (auto& [id, weak] : live_rids_) {
        if (auto call = weak.lock()) calls.push_back(std::move(call));
      }
    }
  }
  // A batch holds one rid per choice: each call once.
  std::sort(calls.begin(), calls.end());
  calls.erase(std::unique(calls.begin(), calls.end()), calls.end());
  // Outside rids_mu_: an abort may end the call, which releases its rid.
  for (const auto& call : calls) call->Abort();
  return calls.size();
}

void RouterServer::ReleaseRid(const std::string& rid) {
  absl::MutexLock lock(&rids_mu_);
  live_rids_.erase(rid);
}

void RouterServer::HandleHealthGenerate(HttpResponder responder) {
  // A real leg costs the workers what a request does: it waits for a slot like one.
  auto holder = std::make_shared<HttpResponder>(std::move(responder));
  admission_->Acquire([this, holder](absl::Status admitted) {
    if (!admitted.ok()) {
      router_metrics_->CountError("/health_generate", ErrorKind(admitted));
      HttpResponse r = ErrorResponse(admitted);
      AddRetryAfter(&r);
      Answer("/health_generate", *holder, std::move(r));
      return;
    }
    StartHealthGenerate(holder);
  });
}

void RouterServer::StartHealthGenerate(const std::shared_ptr<HttpResponder>& holder) {
  auto request = std::make_shared<RoutedRequest>();
  request->rid = absl::StrCat("health-generate-", NewBootstrapRoom());
  request->input_ids = tokenizer_->Encode("ping");
  if (request->input_ids.empty()) request->input_ids.push_back(0);
  request->sampling.set_max_new_tokens(1);
  request->sampling.set_temperature(0);
  request->sampling.set_skip_special_tokens(true);
  dispatcher_->Start(
      request, [](const proto::DecodeEvent&) {},
      [this, holder](absl::Status s) {
        admission_->Release();
        if (s.ok()) {
          Answer("/health_generate", *holder, HttpResponse::Json(200, R"({"status":"ok"})"));
        } else {
          Answer("/health_generate", *holder,
                 HttpResponse::Error(503, absl::StrCat("health_generate failed: ", s.message())));
        }
      });
}

HttpResponse RouterServer::MetricsResponse() {
  router_metrics_->http_body_bytes_held.Set(static_cast<double>(http_->body_bytes_held()));
  int healthy = 0;
  for (const WorkerState& w : registry_->Snapshot()) healthy += w.healthy ? 1 : 0;
  router_metrics_->sgl_active_workers.Set(healthy);
  router_metrics_->stored_responses.Set(static_cast<double>(response_store_->size()));
  router_metrics_->stored_response_bytes.Set(static_cast<double>(response_store_->bytes()));
  HttpResponse response = HttpResponse::Text(200, metrics_.Render());
  response.content_type = "text/plain; version=0.0.4";
  return response;
}

void RouterServer::AddRoutes() {
  HttpServer& h = *http_;
  const std::string* api_key = options_.api_key.empty() ? nullptr : &options_.api_key;
  const std::string* admin_key = options_.admin_key.empty() ? nullptr : &options_.admin_key;
  auto inference = [this, api_key](const std::string& method, const std::string& path,
                                   ApiKind kind) {
    HandleGuarded(
        method, path, api_key, "API key",
        OnRequestThreads(path, [this, path, kind](HttpRequest r, HttpResponder responder) {
          HandleInference(path, kind, std::move(r), std::move(responder));
        }));
  };
  // SGLang serves /generate on PUT as well as POST.
  inference("POST", "/generate", ApiKind::kGenerate);
  inference("PUT", "/generate", ApiKind::kGenerate);
  inference("POST", "/v1/completions", ApiKind::kCompletions);
  inference("POST", "/v1/chat/completions", ApiKind::kChatCompletions);
  inference("POST", "/v1/responses", ApiKind::kResponses);
  AddResponsesRoutes(api_key);
  // Which key /abort_request takes depends on its body: a body is read only for a peer that
  // holds one of them.
  HttpHeadCheck abort_head_check;
  if (api_key != nullptr) {
    abort_head_check = [this](const HttpRequest& head) -> std::optional<HttpResponse> {
      const absl::Status s = CheckBearer(head, options_.api_key, "API key");
      if (s.ok() || (!options_.admin_key.empty() &&
                     CheckBearer(head, options_.admin_key, "admin key").ok())) {
        return std::nullopt;
      }
      return Refused("/abort_request", ErrorResponse(s));
    };
  }
  h.Handle(
      "POST", "/abort_request",
      [this](HttpRequest q, HttpResponder r) { HandleAbortRequest(q, std::move(r)); },
      std::move(abort_head_check));
  HandleGuarded("GET", "/v1/models", api_key, "API key", [this](HttpRequest, HttpResponder r) {
    Answer(
        "/v1/models", r,
        HttpResponse::Json(200, ModelsBody(api_.served_model_name, created_, api_.context_length)));
  });

  // SGLang's tokenizer routes (router/api/tokenize.h): the router's own tokenizer answers.
  for (const char* path : {"/tokenize", "/v1/tokenize", "/detokenize", "/v1/detokenize"}) {
    const std::string route = path;
    const bool detokenize = route.find("detokenize") != std::string::npos;
    HandleGuarded(
        "POST", route, api_key, "API key",
        OnRequestThreads(route, [this, route, detokenize](HttpRequest q, HttpResponder r) {
          absl::StatusOr<std::string> body =
              detokenize ? DetokenizeBody(q.body, *tokenizer_, api_.max_parsed_json_bytes)
                         : TokenizeBody(q.body, *tokenizer_, api_.context_length,
                                        api_.max_parsed_json_bytes);
          if (!body.ok()) router_metrics_->CountError(route, "bad_request");
          Answer(
              route, r,
              body.ok() ? HttpResponse::Json(200, *std::move(body)) : ErrorResponse(body.status()));
        }));
  }

  // OpenAI's "retrieve model" for the one model served (any other name is the 404 of an unknown
  // path): the card /v1/models lists.
  const std::string model_path = "/v1/models/" + api_.served_model_name;
  HandleGuarded("GET", model_path, api_key, "API key",
                [this, model_path](HttpRequest, HttpResponder r) {
                  const nlohmann::json list = nlohmann::json::parse(
                      ModelsBody(api_.served_model_name, created_, api_.context_length));
                  Answer(model_path, r, HttpResponse::Json(200, list["data"][0].dump()));
                });

  h.Handle("GET", "/health", [this](HttpRequest, HttpResponder r) {
    absl::Status s = dispatcher_->CanRoute();
    Answer("/health", r,
           s.ok() ? HttpResponse::Json(200, R"({"status":"ok"})")
                  : HttpResponse::Error(503, std::string(s.message())));
  });
  // sgl-router's liveness: the process answers; says nothing about the workers (/health does).
  h.Handle("GET", "/liveness", [this](HttpRequest, HttpResponder r) {
    Answer("/liveness", r, HttpResponse::Text(200, "OK"));
  });
  h.Handle("GET", "/readiness", [this](HttpRequest, HttpResponder r) {
    absl::Status s = dispatcher_->CanRoute();
    nlohmann::json j;
    j["ready"] = s.ok();
    int64_t healthy = 0, total = 0;
    for (const WorkerState& w : registry_->Snapshot()) {
      ++total;
      healthy += w.healthy ? 1 : 0;
    }
    j["healthy_workers"] = healthy;
    j["total_workers"] = total;
    if (!s.ok()) j["error"] = std::string(s.message());
    Answer("/readiness", r, HttpResponse::Json(s.ok() ? 200 : 503, j.dump()));
  });
  HandleGuarded("GET", "/health_generate", api_key, "API key",
                [this](HttpRequest, HttpResponder r) { HandleHealthGenerate(std::move(r)); });
  h.Handle("GET", "/metrics", [this](HttpRequest, HttpResponder r) { r.Send(MetricsResponse()); });

  // /server_info is the newer SGLang's name for it.
  for (const char* path : {"/get_server_info", "/server_info"}) {
    const std::string route = path;
    HandleGuarded("GET", route, api_key, "API key", [this, route](HttpRequest, HttpResponder r) {
      HandleServerInfo(std::move(r), route);
    });
  }
  // /model_info is the newer SGLang's name for /get_model_info.
  for (const char* path : {"/get_model_info", "/model_info"}) {
    const std::string route = path;
    HandleGuarded("GET", route, api_key, "API key", [this, route](HttpRequest, HttpResponder r) {
      HandleModelInfo(std::move(r), route);
    });
  }
  HandleGuarded("GET", "/get_load", api_key, "API key",
                [this](HttpRequest, HttpResponder r) { HandleGetLoad(std::move(r)); });
  HandleGuarded("GET", "/version", api_key, "API key", [this](HttpRequest, HttpResponder r) {
    Answer("/version", r,
           HttpResponse::Json(200, nlohmann::json({{"version", kTandemVersion}}).dump()));
  });
  HandleGuarded("GET", "/get_loads", api_key, "API key",
                [this](HttpRequest, HttpResponder r) { HandleGetLoads(std::move(r)); });

  const bool admin_closed = admin_key == nullptr && !options_.disable_admin_auth;
  auto admin = [this, admin_key, admin_closed](const std::string& method, const std::string& path,
                                               HttpHandler handler) {
    http_->KeepSameOrigin(path);  // no browser page may drive the admin API
    if (admin_closed) {
      http_->Handle(method, path, AdminDisabled(path),
                    [this, path](const HttpRequest&) -> std::optional<HttpResponse> {
                      return Refused(path, AdminDisabledResponse());
                    });
      return;
    }
    HandleGuarded(method, path, admin_key, "admin key", std::move(handler));
  };
  // SGLang serves GET too; both keep the admin key (a flush reaches every worker).
  admin("POST", "/flush_cache",
        [this](HttpRequest, HttpResponder r) { HandleFlushCache(std::move(r)); });
  admin("GET", "/flush_cache",
        [this](HttpRequest, HttpResponder r) { HandleFlushCache(std::move(r)); });
  admin("GET", "/workers",
        [this](HttpRequest, HttpResponder r) { HandleListWorkers(std::move(r), false); });
  admin("GET", "/list_workers",
        [this](HttpRequest, HttpResponder r) { HandleListWorkers(std::move(r), true); });
  admin("POST", "/workers",
        [this](HttpRequest q, HttpResponder r) { HandleAddWorker(q, std::move(r), false); });
  admin("POST", "/add_worker",
        [this](HttpRequest q, HttpResponder r) { HandleAddWorker(q, std::move(r), true); });
  admin("DELETE", "/workers", [this](HttpRequest q, HttpResponder r) {
    HandleRemoveWorker(q, std::move(r), q.body.empty());
  });
  admin("POST", "/remove_worker",
        [this](HttpRequest q, HttpResponder r) { HandleRemoveWorker(q, std::move(r), true); });
  admin("POST", "/workers/drain",
        [this](HttpRequest q, HttpResponder r) { HandleDrainWorker(q, std::move(r)); });
}

}  // namespace tandem::router

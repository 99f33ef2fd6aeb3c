// RouterServer's info and admin routes: /get_server_info, /get_model_info (/model_info), /get_load,
// /get_loads, /abort_request, /flush_cache and the worker admin API (GET/POST/DELETE /workers, POST
// /workers/drain and SGLang's /add_worker, /remove_worker, /list_workers forms).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "nlohmann/json.hpp"
#include "router/abort_request.h"
#include "router/admin_request.h"
#include "router/api/response.h"
#include "router/request_headers.h"
#include "router/router_server.h"

namespace tandem::router {
namespace {

constexpr absl::Duration kAdminCallTimeout = absl::Seconds(10);

// Runs one async call per worker and `finish` once with every result (in the workers' order).
template <typename Reply>
class FanOut : public std::enable_shared_from_this<FanOut<Reply>> {
 public:
  struct Result {
    WorkerPtr worker;
    grpc::Status status;
    Reply reply;
  };
  using Finish = std::function<void(std::vector<Result>)>;

  FanOut(std::vector<WorkerPtr> workers, Finish finish)
      : results_(workers.size()), pending_(workers.size()), finish_(std::move(finish)) {
    for (size_t i = 0; i < workers.size(); ++i) results_[i].worker = std::move(workers[i]);
  }

  // `call(worker, done)` starts one call; done(status, reply) may run on any thread.
  template <typename CallFn>
  void Run(CallFn call) {
    if (results_.empty()) {
      finish_({});
      return;
    }
    auto self = this->shared_from_this();
    for (size_t i = 0; i < results_.size(); ++i) {
      call(results_[i].worker, [self, i](grpc::Status s, Reply r) { self->Done(i, s, r); });
    }
  }

 private:
  void Done(size_t i, const grpc::Status& s, const Reply& r) {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      results_[i].status = s;
      results_[i].reply = r;
      last = --pending_ == 0;
    }
    if (last) finish_(std::move(results_));
  }

  absl::Mutex mu_;
  std::vector<Result> results_;
  size_t pending_;
  Finish finish_;
};

std::vector<WorkerPtr> AllWorkers(const WorkerRegistry& registry) {
  std::vector<WorkerPtr> all;
  for (WorkerType t : {WorkerType::kPrefill, WorkerType::kDecode, WorkerType::kRegular}) {
    for (WorkerPtr& w : registry.List(t)) all.push_back(std::move(w));
  }
  return all;
}

const char* RoleName(proto::ServerInfo::Role role) {
  switch (role) {
    case proto::ServerInfo::PREFILL:
      return "prefill";
    case proto::ServerInfo::DECODE:
      return "decode";
    default:
      return "null";
  }
}

// One worker's /get_server_info object in SGLang's field names.
nlohmann::json WorkerInfoJson(const WorkerPtr& w, const grpc::Status& s,
                              const proto::ServerInfo& info) {
  nlohmann::json j;
  j["url"] = w->url();
  j["worker_type"] = WorkerTypeName(w->type());
  if (!s.ok()) {
    j["error"] = s.error_message();
    j["internal_states"] = nlohmann::json::array({nlohmann::json::object()});
    return j;
  }
  j["model_path"] = info.model_path();
  j["served_model_name"] = info.served_model_name();
  j["context_length"] = info.context_length();
  j["max_running_requests"] = info.max_running_requests();
  j["chunked_prefill_size"] = info.chunked_prefill_size();
  j["page_size"] = info.kv_block_size();
  j["max_total_num_tokens"] = info.total_kv_blocks() * info.kv_block_size();
  j["disaggregation_mode"] = RoleName(info.role());
  j["disaggregation_transfer_backend"] = info.transfer_backend();
  if (info.role() == proto::ServerInfo::PREFILL) {
    j["disaggregation_bootstrap_port"] = info.bootstrap_port();
  }
  j["version"] = info.version();
  nlohmann::json state;
  // Only with speculative decoding, as SGLang: sglang.bench_serving prints an "Accept length"
  // row whenever the field is there.
  if (info.avg_spec_accept_length() > 0) {
    state["avg_spec_accept_length"] = info.avg_spec_accept_length();
  }
  state["cache_hit_tokens"] = info.cache_hit_tokens();
  state["cache_query_tokens"] = info.cache_query_tokens();
  state["cache_hit_rate"] = info.cache_query_tokens() > 0
                                ? static_cast<double>(info.cache_hit_tokens()) /
                                      static_cast<double>(info.cache_query_tokens())
                                : 0.0;
  j["internal_states"] = nlohmann::json::array({state});
  return j;
}

nlohmann::json WorkerStateJson(const WorkerState& w) {
  nlohmann::json j;
  j["url"] = w.url;
  j["worker_type"] = WorkerTypeName(w.type);
  j["bootstrap_port"] = w.bootstrap_port ? nlohmann::json(*w.bootstrap_port) : nlohmann::json();
  j["healthy"] = w.healthy;
  j["verified"] = w.verified;
  j["draining"] = w.draining;
  j["circuit"] = w.circuit;
  j["session_port"] = w.session_port;
  j["inflight"] = w.inflight;
  j["load"] = {{"running_requests", w.load.running_requests()},
               {"queued_requests", w.load.queued_requests()},
               {"free_kv_blocks", w.load.free_kv_blocks()},
               {"total_kv_blocks", w.load.total_kv_blocks()},
               {"inflight_transfers", w.load.inflight_transfers()}};
  j["last_error"] = w.last_error;
  return j;
}

absl::StatusOr<WorkerType> TypeFromName(const std::string& name, bool pd_mode) {
  WorkerType type = name == "prefill"  ? WorkerType::kPrefill
                    : name == "decode" ? WorkerType::kDecode
                                       : WorkerType::kRegular;
  if (pd_mode && type == WorkerType::kRegular) {
    return absl::InvalidArgumentError(
        "worker_type \"regular\" is for plain mode; this router runs with --pd-disaggregation "
        "(use \"prefill\" or \"decode\")");
  }
  if (!pd_mode && type != WorkerType::kRegular) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_type \"", name,
                     "\" needs --pd-disaggregation; this router runs in plain mode "
                     "(use \"regular\")"));
  }
  return type;
}

}  // namespace

void RouterServer::HandleServerInfo(HttpResponder responder, const std::string& route) {
  auto holder = std::make_shared<HttpResponder>(std::move(responder));
  const bool pd = options_.pd_disaggregation;
  const std::string served = api_.served_model_name;
  auto fan = std::make_shared<FanOut<proto::ServerInfo>>(
      AllWorkers(*registry_),
      [this, holder, pd, served, route](std::vector<FanOut<proto::ServerInfo>::Result> results) {
        nlohmann::json prefill = nlohmann::json::array(), decode = nlohmann::json::array(),
                       regular = nlohmann::json::array();
        for (const auto& r : results) {
          nlohmann::json j = WorkerInfoJson(r.worker, r.status, r.reply);
          switch (r.worker->type()) {
            case WorkerType::kPrefill:
              prefill.push_back(std::move(j));
              break;
            case WorkerType::kDecode:
              decode.push_back(std::move(j));
              break;
            case WorkerType::kRegular:
              regular.push_back(std::move(j));
              break;
          }
        }
        nlohmann::json body;
        // sglang.bench_serving reads body["decode"][0]["internal_states"][0] in PD mode and
        // body["internal_states"][0] otherwise.
        nlohmann::json& first = pd ? decode : regular;
        if (!pd && !regular.empty()) body = regular[0];
        body["router"] = {{"mode", pd ? "pd" : "plain"}, {"served_model_name", served}};
        if (pd) {
          body["prefill"] = prefill;
          body["decode"] = decode;
        } else {
          body["workers"] = regular;
        }
        nlohmann::json states = nlohmann::json::array();
        for (const auto& w : first) {
          for (const auto& s : w["internal_states"]) states.push_back(s);
        }
        if (states.empty()) states.push_back(nlohmann::json::object());
        body["internal_states"] = states;
        Answer(route, *holder, HttpResponse::Json(200, body.dump()));
      });
  fan->Run([](const WorkerPtr& w, auto done) {
    w->client().GetServerInfo(absl::Now() + kAdminCallTimeout, std::move(done));
  });
}

void RouterServer::HandleModelInfo(HttpResponder responder, const std::string& route) {
  // SGLang's fields; the SGLang frontend (RuntimeEndpoint) reads them when it connects.
  const std::string model_path =
      !options_.model_path.empty() ? options_.model_path : options_.tokenizer_path;
  nlohmann::json body = {
      {"model_path", model_path},
      {"tokenizer_path", !options_.tokenizer_path.empty() ? options_.tokenizer_path : model_path},
      {"is_generation", true},
      {"preferred_sampling_params", nullptr},
      {"weight_version", "default"}};
  Answer(route, responder, HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleGetLoad(HttpResponder responder) {
  // SGLang's shape (one object per data-parallel rank: here per worker, from the registry's
  // polls), with the worker's url and role added.
  nlohmann::json body = nlohmann::json::array();
  int rank = 0;
  for (const WorkerState& w : registry_->Snapshot()) {
    const proto::LoadReport& l = w.load;
    const int64_t used_blocks = std::max<int64_t>(0, l.total_kv_blocks() - l.free_kv_blocks());
    body.push_back({{"dp_rank", rank++},
                    {"num_reqs", l.running_requests() + l.queued_requests()},
                    {"num_waiting_reqs", l.queued_requests()},
                    {"num_tokens", used_blocks * l.kv_block_size()},
                    {"url", w.url},
                    {"worker_type", WorkerTypeName(w.type)}});
  }
  Answer("/get_load", responder, HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleGetLoads(HttpResponder responder) {
  // From the registry's polls and the router's own in-flight counts: no worker call.
  nlohmann::json body;
  nlohmann::json workers = nlohmann::json::array();
  nlohmann::json prefill = nlohmann::json::array(), decode = nlohmann::json::array();
  for (const WorkerState& w : registry_->Snapshot()) {
    nlohmann::json j = WorkerStateJson(w);
    // SGLang's PD router shape: {"engine": url, "load": n}.
    nlohmann::json sg = {
        {"engine", w.url},
        {"load", w.inflight + w.load.running_requests() + w.load.queued_requests()}};
    if (w.type == WorkerType::kPrefill) prefill.push_back(sg);
    if (w.type == WorkerType::kDecode) decode.push_back(sg);
    workers.push_back(std::move(j));
  }
  body["workers"] = workers;
  if (options_.pd_disaggregation) {
    body["prefill"] = prefill;
    body["decode"] = decode;
  }
  Answer("/get_loads", responder, HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleAbortRequest(const HttpRequest& request, HttpResponder responder) {
  const std::string route = "/abort_request";
  const absl::StatusOr<AbortSpec> spec = ParseAbortRequest(request.body);
  // The key is checked before the body's faults are told; which key depends on the body.
  const bool abort_all = spec.ok() && spec->abort_all;
  // Aborting every client's request is the operator's call; one rid is its request's own.
  if (abort_all && !options_.disable_admin_auth) {
    if (options_.admin_key.empty()) {
      AdminDisabled(route)(HttpRequest(), std::move(responder));
      return;
    }
    if (absl::Status s = CheckBearer(request, options_.admin_key, "admin key"); !s.ok()) {
      router_metrics_->CountError(route, "unauthorized");
      Answer(route, responder, ErrorResponse(s));
      return;
    }
  } else if (!abort_all && !options_.api_key.empty()) {
    if (absl::Status s = CheckBearer(request, options_.api_key, "API key"); !s.ok()) {
      router_metrics_->CountError(route, "unauthorized");
      Answer(route, responder, ErrorResponse(s));
      return;
    }
  }
  if (!spec.ok()) {
    router_metrics_->CountError(route, "bad_request");
    Answer(route, responder, ErrorResponse(spec.status()));
    return;
  }
  const size_t aborted = AbortCalls(abort_all ? nullptr : &spec->rid);
  if (aborted > 0) {
    spdlog::info("/abort_request: aborted {} request(s){}", aborted,
                 abort_all ? " (abort_all)" : "");
  }
  // SGLang's answer: 200 with an empty body, whether or not a request had that rid.
  HttpResponse ok = HttpResponse::Text(200, "");
  Answer(route, responder, std::move(ok));
}

void RouterServer::HandleFlushCache(HttpResponder responder) {
  auto holder = std::make_shared<HttpResponder>(std::move(responder));
  auto fan = std::make_shared<FanOut<proto::FlushCacheResponse>>(
      AllWorkers(*registry_),
      [this, holder](std::vector<FanOut<proto::FlushCacheResponse>::Result> results) {
        nlohmann::json workers = nlohmann::json::array();
        bool all = true;
        for (const auto& r : results) {
          const bool flushed = r.status.ok() && r.reply.flushed();
          all &= flushed;
          workers.push_back(
              {{"url", r.worker->url()},
               {"flushed", flushed},
               {"message", r.status.ok() ? r.reply.message() : r.status.error_message()}});
        }
        nlohmann::json body = {{"flushed", all}, {"workers", workers}};
        body["message"] = all ? "Cache flushed on every worker."
                              : "Cache not flushed on every worker (requests running, or a "
                                "worker did not answer); see workers[].message";
        Answer("/flush_cache", *holder, HttpResponse::Json(all ? 200 : 503, body.dump()));
      });
  fan->Run([](const WorkerPtr& w, auto done) {
    w->client().FlushCache(absl::Now() + kAdminCallTimeout, std::move(done));
  });
}

void RouterServer::HandleListWorkers(HttpResponder responder, bool sglang_form) {
  const std::vector<WorkerState> states = registry_->Snapshot();
  nlohmann::json body;
  if (sglang_form) {
    nlohmann::json urls = nlohmann::json::array();
    for (const WorkerState& w : states) urls.push_back(w.url);
    body["urls"] = urls;
  } else {
    nlohmann::json workers = nlohmann::json::array();
    for (const WorkerState& w : states) workers.push_back(WorkerStateJson(w));
    body["workers"] = workers;
    body["total"] = states.size();
  }
  Answer(sglang_form ? "/list_workers" : "/workers", responder,
         HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleAddWorker(const HttpRequest& request, HttpResponder responder,
                                   bool query_form) {
  const std::string route = query_form ? "/add_worker" : "/workers";
  const std::string default_type = options_.pd_disaggregation ? "decode" : "regular";
  auto spec = query_form ? ParseAdminWorkerQuery(request, default_type)
                         : ParseAdminWorkerBody(request.body, default_type);
  absl::StatusOr<WorkerType> type =
      spec.ok() ? TypeFromName(spec->worker_type, options_.pd_disaggregation) : spec.status();
  if (type.ok() && *type == WorkerType::kPrefill && !spec->bootstrap_port) {
    type = absl::InvalidArgumentError(
        "bootstrap_port is required for a prefill worker (its --disaggregation-bootstrap-port)");
  }
  if (!type.ok()) {
    Answer(route, responder, ErrorResponse(type.status()));
    return;
  }
  auto worker = registry_->Add(spec->url, *type, spec->bootstrap_port);
  if (!worker.ok()) {
    HttpResponse r = worker.status().code() == absl::StatusCode::kAlreadyExists
                         ? HttpResponse::Error(409, std::string(worker.status().message()))
                         : ErrorResponse(worker.status());
    Answer(route, responder, std::move(r));
    return;
  }
  spdlog::info("admin: added {} worker {}", spec->worker_type, spec->url);
  nlohmann::json body = {{"status", "ok"},
                         {"message", absl::StrCat("Added worker: ", spec->url)},
                         {"worker", WorkerStateJson((*worker)->Snapshot())}};
  Answer(route, responder, HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleRemoveWorker(const HttpRequest& request, HttpResponder responder,
                                      bool query_form) {
  const std::string route =
      query_form && request.path == "/remove_worker" ? "/remove_worker" : "/workers";
  auto spec = query_form ? ParseAdminWorkerQuery(request, "regular")
                         : ParseAdminWorkerBody(request.body, "regular");
  if (!spec.ok()) {
    Answer(route, responder, ErrorResponse(spec.status()));
    return;
  }
  if (absl::Status s = registry_->Remove(spec->url); !s.ok()) {
    Answer(route, responder, ErrorResponse(s));
    return;
  }
  prefill_policy_->OnWorkerRemoved(spec->url);
  decode_policy_->OnWorkerRemoved(spec->url);
  spdlog::info("admin: removed worker {}", spec->url);
  nlohmann::json body = {{"status", "ok"},
                         {"message", absl::StrCat("Removed worker: ", spec->url)}};
  Answer(route, responder, HttpResponse::Json(200, body.dump()));
}

void RouterServer::HandleDrainWorker(const HttpRequest& request, HttpResponder responder) {
  auto spec = request.body.empty() ? ParseAdminWorkerQuery(request, "regular")
                                   : ParseAdminWorkerBody(request.body, "regular");
  if (!spec.ok()) {
    Answer("/workers/drain", responder, ErrorResponse(spec.status()));
    return;
  }
  if (absl::Status s = registry_->Drain(spec->url); !s.ok()) {
    Answer("/workers/drain", responder, ErrorResponse(s));
    return;
  }
  spdlog::info("admin: draining worker {}", spec->url);
  nlohmann::json body = {
      {"status", "ok"},
      {"message", absl::StrCat("Draining worker: ", spec->url,
                               " (no new requests; remove it once its inflight count is 0)")}};
  Answer("/workers/drain", responder, HttpResponse::Json(200, body.dump()));
}

}  // namespace tandem::router

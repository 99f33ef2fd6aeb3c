#include "tools/tandemctl/commands.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tools/tandemctl/metrics_summary.h"
#include "tools/tandemctl/prometheus.h"
#include "tools/tandemctl/table.h"

namespace tandem::ctl {
namespace {

nlohmann::json ParseJson(const std::string& body) {
  return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
}

// A JSON value as a table cell: strings bare, null as "-", numbers and bools as JSON.
std::string Cell(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "-";
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_boolean()) return it->get<bool>() ? "yes" : "no";
  return it->dump();
}

constexpr size_t kMaxErrorCell = 60;

bool Is2xx(int status) { return status >= 200 && status < 300; }

}  // namespace

std::string ErrorMessage(const HttpClientResponse& response) {
  nlohmann::json j = ParseJson(response.body);
  if (j.is_object()) {
    auto e = j.find("error");
    if (e != j.end() && e->is_object() && e->contains("message") && (*e)["message"].is_string()) {
      return (*e)["message"].get<std::string>();
    }
    if (e != j.end() && e->is_string()) return e->get<std::string>();
    auto m = j.find("message");
    if (m != j.end() && m->is_string()) return m->get<std::string>();
  }
  std::string line = response.body.substr(0, response.body.find('\n'));
  if (line.size() > 200) line = line.substr(0, 200) + "...";
  return line.empty() ? StatusReason(response.status) : line;
}

Commands::Commands(CtlOptions options, std::ostream& out, std::ostream& err)
    : options_(std::move(options)),
      out_(out),
      err_(err),
      client_(HttpClient::FromUrl(options_.router)) {}

HttpHeaders Commands::Headers(Key key, bool json_body) const {
  HttpHeaders h;
  const std::string& secret = key == Key::kAdmin ? options_.admin_key
                              : key == Key::kApi ? options_.api_key
                                                 : std::string();
  if (!secret.empty()) h.emplace_back("Authorization", "Bearer " + secret);
  if (json_body) h.emplace_back("Content-Type", "application/json");
  return h;
}

absl::StatusOr<HttpClientResponse> Commands::Call(const std::string& method,
                                                  const std::string& target,
                                                  const std::string& body, Key key) {
  if (!client_.ok()) return client_.status();
  return client_->Request(method, target, body, Headers(key, !body.empty()),
                          HttpClient::Clock::now() + options_.timeout);
}

int Commands::Unreachable(const absl::Status& status) {
  if (!client_.ok()) {
    err_ << "tandemctl: bad --router URL: " << status.message() << "\n";
    return kExitUsage;
  }
  // The client's messages start with the address; it is already named once.
  std::string_view message(status.message().data(), status.message().size());
  const std::string prefix = options_.router + ": ";
  if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
  err_ << "tandemctl: cannot reach the router at " << options_.router << ": " << message << "\n";
  return kExitUnreachable;
}

int Commands::RouterError(const std::string& what, const HttpClientResponse& response) {
  err_ << "tandemctl: " << what << ": the router answered " << response.status << ": "
       << ErrorMessage(response) << "\n";
  return kExitRouterError;
}

int Commands::WorkersList() {
  auto r = Call("GET", "/workers", "", Key::kAdmin);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("workers list", *r);
  if (options_.json) {
    out_ << r->body << "\n";
    return kExitOk;
  }
  nlohmann::json j = ParseJson(r->body);
  if (!j.is_object() || !j.contains("workers") || !j["workers"].is_array()) {
    err_ << "tandemctl: workers list: the router's answer has no \"workers\" array\n";
    return kExitRouterError;
  }
  Table t({"URL", "TYPE", "BOOTSTRAP", "SESSION", "HEALTHY", "CIRCUIT", "DRAINING", "INFLIGHT",
           "RUNNING", "QUEUED", "FREE KV", "LAST ERROR"});
  for (const auto& w : j["workers"]) {
    const nlohmann::json load = w.is_object() ? w.value("load", nlohmann::json()) : nullptr;
    std::string kv = "-";
    if (load.is_object()) kv = Cell(load, "free_kv_blocks") + "/" + Cell(load, "total_kv_blocks");
    // The full message is in --json; a table row stays readable.
    std::string last_error = Cell(w, "last_error");
    if (last_error.empty()) last_error = "-";
    if (DisplayWidth(last_error) > kMaxErrorCell) {
      size_t cut = kMaxErrorCell;
      while (cut > 0 && (static_cast<unsigned char>(last_error[cut]) & 0xC0) == 0x80) --cut;
      last_error = last_error.substr(0, cut) + "...";
    }
    // 0: the worker has advertised no session socket (yet), so its legs go over gRPC.
    std::string session = Cell(w, "session_port");
    if (session == "0") session = "-";
    t.AddRow({Cell(w, "url"), Cell(w, "worker_type"), Cell(w, "bootstrap_port"), session,
              Cell(w, "healthy"), Cell(w, "circuit"), Cell(w, "draining"), Cell(w, "inflight"),
              Cell(load, "running_requests"), Cell(load, "queued_requests"), kv, last_error});
  }
  out_ << (t.rows() == 0 ? std::string("no workers registered\n") : t.Render());
  return kExitOk;
}

int Commands::WorkersAdd(const std::string& url, const std::string& type,
                         std::optional<int> bootstrap_port) {
  nlohmann::json body = {{"url", url}, {"worker_type", type}};
  if (bootstrap_port) body["bootstrap_port"] = *bootstrap_port;
  auto r = Call("POST", "/workers", body.dump(), Key::kAdmin);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("workers add", *r);
  if (options_.json) {
    out_ << r->body << "\n";
  } else {
    out_ << ErrorMessage(*r) << "\n";
  }
  return kExitOk;
}

int Commands::WorkersRemove(const std::string& url) {
  auto r = Call("DELETE", "/workers", nlohmann::json({{"url", url}}).dump(), Key::kAdmin);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("workers remove", *r);
  out_ << (options_.json ? r->body : ErrorMessage(*r)) << "\n";
  return kExitOk;
}

int Commands::WorkersDrain(const std::string& url) {
  auto r = Call("POST", "/workers/drain", nlohmann::json({{"url", url}}).dump(), Key::kAdmin);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("workers drain", *r);
  out_ << (options_.json ? r->body : ErrorMessage(*r)) << "\n";
  return kExitOk;
}

int Commands::Loads() {
  auto r = Call("GET", "/get_loads", "", Key::kApi);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("loads", *r);
  if (options_.json) {
    out_ << r->body << "\n";
    return kExitOk;
  }
  nlohmann::json j = ParseJson(r->body);
  if (!j.is_object() || !j.contains("workers") || !j["workers"].is_array()) {
    err_ << "tandemctl: loads: the router's answer has no \"workers\" array\n";
    return kExitRouterError;
  }
  Table t({"URL", "TYPE", "INFLIGHT", "RUNNING", "QUEUED", "FREE KV", "TOTAL KV", "TRANSFERS"});
  for (const auto& w : j["workers"]) {
    const nlohmann::json load = w.is_object() ? w.value("load", nlohmann::json()) : nullptr;
    t.AddRow({Cell(w, "url"), Cell(w, "worker_type"), Cell(w, "inflight"),
              Cell(load, "running_requests"), Cell(load, "queued_requests"),
              Cell(load, "free_kv_blocks"), Cell(load, "total_kv_blocks"),
              Cell(load, "inflight_transfers")});
  }
  out_ << (t.rows() == 0 ? std::string("no workers registered\n") : t.Render());
  return kExitOk;
}

int Commands::Health() {
  auto r = Call("GET", "/readiness", "", Key::kNone);
  if (!r.ok()) return Unreachable(r.status());
  nlohmann::json j = ParseJson(r->body);
  if (r->status == 404) {
    // A router without /readiness: /health alone says whether it can route.
    r = Call("GET", "/health", "", Key::kNone);
    if (!r.ok()) return Unreachable(r.status());
    j = ParseJson(r->body);
  }
  if (options_.json) out_ << r->body << "\n";
  if (!Is2xx(r->status)) return RouterError("health", *r);
  if (!options_.json) {
    std::string workers;
    if (j.is_object() && j.contains("healthy_workers") && j.contains("total_workers")) {
      workers = absl::StrCat(" (", j["healthy_workers"].dump(), "/", j["total_workers"].dump(),
                             " workers healthy)");
    }
    out_ << "router " << options_.router << ": ok" << workers << "\n";
  }
  return kExitOk;
}

int Commands::FlushCache() {
  auto r = Call("POST", "/flush_cache", "", Key::kAdmin);
  if (!r.ok()) return Unreachable(r.status());
  nlohmann::json j = ParseJson(r->body);
  if (options_.json) {
    out_ << r->body << "\n";
  } else if (j.is_object() && j.contains("workers") && j["workers"].is_array()) {
    Table t({"URL", "FLUSHED", "MESSAGE"});
    for (const auto& w : j["workers"]) {
      t.AddRow({Cell(w, "url"), Cell(w, "flushed"), Cell(w, "message")});
    }
    out_ << t.Render();
  }
  if (!Is2xx(r->status)) return RouterError("flush-cache", *r);
  if (!options_.json) out_ << ErrorMessage(*r) << "\n";
  return kExitOk;
}

int Commands::Metrics() {
  auto r = Call("GET", "/metrics", "", Key::kNone);
  if (!r.ok()) return Unreachable(r.status());
  if (!Is2xx(r->status)) return RouterError("metrics", *r);
  auto samples = ParsePrometheusText(r->body);
  if (!samples.ok()) {
    err_ << "tandemctl: metrics: " << samples.status().message() << "\n";
    return kExitRouterError;
  }
  auto summary = SummarizeRouterMetrics(*samples);
  if (!summary.ok()) {
    err_ << "tandemctl: metrics: " << summary.status().message() << "\n";
    return kExitRouterError;
  }
  if (options_.json) {
    out_ << summary->ToJson().dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    out_ << summary->ToText();
  }
  return kExitOk;
}

int Commands::Generate(const std::string& prompt, const GenerateOptions& options) {
  nlohmann::json sampling = {{"max_new_tokens", options.max_new_tokens}};
  if (options.temperature) sampling["temperature"] = *options.temperature;
  if (options.ignore_eos) sampling["ignore_eos"] = true;
  const bool stream = options.stream;
  nlohmann::json body = {{"text", prompt}, {"sampling_params", sampling}, {"stream", stream}};
  if (!client_.ok()) return Unreachable(client_.status());
  const auto deadline = HttpClient::Clock::now() + options_.timeout;
  if (!stream) {
    auto r = client_->Request("POST", "/generate", body.dump(), Headers(Key::kApi, true), deadline);
    if (!r.ok()) return Unreachable(r.status());
    if (!Is2xx(r->status)) return RouterError("generate", *r);
    nlohmann::json j = ParseJson(r->body);
    if (options_.json) {
      out_ << r->body << "\n";
    } else if (j.is_object() && j.contains("text") && j["text"].is_string()) {
      out_ << j["text"].get<std::string>() << "\n";
    } else {
      err_ << "tandemctl: generate: the router's answer has no \"text\" string\n";
      return kExitRouterError;
    }
    return kExitOk;
  }
  // Each event carries the cumulative text; print what is new.
  size_t printed = 0;
  std::string stream_error;
  auto on_data = [&](std::string_view data) {
    if (data == "[DONE]") return false;
    if (options_.json) {
      out_ << data << "\n" << std::flush;
      return true;
    }
    nlohmann::json e = nlohmann::json::parse(data.begin(), data.end(), nullptr, false);
    if (e.is_object() && e.contains("error")) {
      HttpClientResponse fake;
      fake.body = std::string(data);
      stream_error = ErrorMessage(fake);
      return false;
    }
    if (!e.is_object() || !e.contains("text") || !e["text"].is_string()) {
      stream_error =
          absl::StrCat("an event without a \"text\" string: ", std::string(data.substr(0, 200)));
      return false;
    }
    const std::string text = e["text"].get<std::string>();
    if (text.size() > printed) {
      out_ << text.substr(printed) << std::flush;
      printed = text.size();
    }
    return true;
  };
  auto r =
      client_->PostStream("/generate", body.dump(), Headers(Key::kApi, false), deadline, on_data);
  if (!r.ok()) {
    if (printed > 0) out_ << "\n";
    return Unreachable(r.status());
  }
  if (!Is2xx(r->status)) return RouterError("generate", *r);
  if (!options_.json) out_ << "\n";
  if (!stream_error.empty()) {
    err_ << "tandemctl: generate: the stream failed: " << stream_error << "\n";
    return kExitRouterError;
  }
  return kExitOk;
}

}  // namespace tandem::ctl

#include "tools/tandemctl/metrics_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/tandemctl/table.h"

namespace tandem::ctl {
namespace {

constexpr char kPrefix[] = "tandem_router_";

std::string CircuitName(double v) {
  if (v == 0) return "closed";
  if (v == 1) return "open";
  if (v == 2) return "half_open";
  return absl::StrCat("unknown(", v, ")");
}

absl::StatusOr<LatencySummary> SummarizeHistogram(const std::vector<Sample>& samples,
                                                  const std::string& name) {
  LatencySummary s;
  Buckets buckets;
  for (const Sample& x : samples) {
    if (x.name == name + "_sum") s.sum += x.value;
    if (x.name == name + "_count") s.count += x.value;
    if (x.name != name + "_bucket") continue;
    const std::string le = x.Label("le");
    double bound;
    if (le == "+Inf" || le == "Inf") {
      bound = INFINITY;
    } else {
      char* end = nullptr;
      bound = std::strtod(le.c_str(), &end);
      if (le.empty() || end != le.c_str() + le.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, "_bucket has a bad le label \"", le, "\""));
      }
    }
    buckets.emplace_back(bound, x.value);
  }
  std::sort(buckets.begin(), buckets.end());
  for (size_t i = 1; i < buckets.size(); ++i) {
    if (buckets[i].second < buckets[i - 1].second) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "_bucket counts decrease between le=", buckets[i - 1].first,
                       " and le=", buckets[i].first, " (cumulative buckets must not)"));
    }
  }
  if (s.count > 0) {
    s.mean = s.sum / s.count;
    s.p50 = BucketQuantile(buckets, 0.5);
    s.p90 = BucketQuantile(buckets, 0.9);
    s.p99 = BucketQuantile(buckets, 0.99);
  }
  return s;
}

// Counts and gauges are integral in practice: print them as JSON integers ("3", not "3.0").
nlohmann::json Num(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15) {
    return static_cast<int64_t>(v);
  }
  return v;
}

nlohmann::json Opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nullptr; }

nlohmann::json LatencyJson(const LatencySummary& s) {
  return {{"count", Num(s.count)},
          {"mean", Opt(s.mean)},
          {"p50", Opt(s.p50)},
          {"p90", Opt(s.p90)},
          {"p99", Opt(s.p99)}};
}

std::string Count(double v) { return absl::StrFormat("%.0f", v); }
std::string Ms(const std::optional<double>& seconds) {
  return seconds ? absl::StrFormat("%.2fms", *seconds * 1e3) : "-";
}

}  // namespace

std::optional<double> BucketQuantile(const Buckets& buckets, double q) {
  if (buckets.empty() || !std::isinf(buckets.back().first)) return std::nullopt;
  const double total = buckets.back().second;
  if (!(total > 0)) return std::nullopt;
  q = std::clamp(q, 0.0, 1.0);
  const double rank = q * total;
  size_t b = 0;
  while (b < buckets.size() && buckets[b].second < rank) ++b;
  if (b >= buckets.size()) b = buckets.size() - 1;
  if (std::isinf(buckets[b].first)) {
    // Prometheus: a rank in the +Inf bucket is reported as the largest finite bound.
    return b > 0 ? std::optional<double>(buckets[b - 1].first) : std::nullopt;
  }
  const double upper = buckets[b].first;
  const double lower = b == 0 ? std::min(0.0, upper) : buckets[b - 1].first;
  const double below = b == 0 ? 0 : buckets[b - 1].second;
  const double in_bucket = buckets[b].second - below;
  if (in_bucket <= 0) return upper;
  return lower + (upper - lower) * ((rank - below) / in_bucket);
}

absl::StatusOr<MetricsSummary> SummarizeRouterMetrics(const std::vector<Sample>& samples) {
  MetricsSummary m;
  std::map<std::string, RouteRequests> routes;
  std::map<std::string, WorkerMetrics> workers;
  std::map<std::string, bool> registered;
  auto worker = [&](const Sample& x) -> WorkerMetrics& {
    WorkerMetrics& w = workers[x.Label("worker")];
    w.url = x.Label("worker");
    return w;
  };
  const std::string p = kPrefix;
  for (const Sample& x : samples) {
    if (x.name == p + "requests_total") {
      RouteRequests& r = routes[x.Label("route")];
      r.route = x.Label("route");
      r.total += x.value;
      m.requests_total += x.value;
      const std::string status = x.Label("status");
      if (!status.empty() && status[0] == '2') r.ok += x.value;
      if (!status.empty() && status[0] == '4') r.client_error += x.value;
      if (!status.empty() && status[0] == '5') r.server_error += x.value;
    } else if (x.name == p + "errors_total") {
      m.errors_by_kind[x.Label("kind")] += x.value;
      m.errors_total += x.value;
    } else if (x.name == p + "retries_total") {
      m.retries += x.value;
    } else if (x.name == p + "inflight") {
      m.inflight = x.value;
    } else if (x.name == p + "queue_depth") {
      m.queue_depth = x.value;
    } else if (x.name == p + "worker_registered") {
      registered[x.Label("worker")] = x.value != 0;
    } else if (x.name == p + "worker_healthy") {
      worker(x).healthy = x.value != 0;
    } else if (x.name == p + "worker_circuit_state") {
      worker(x).circuit = CircuitName(x.value);
    } else if (x.name == p + "worker_inflight") {
      worker(x).inflight = x.value;
    } else if (x.name == p + "worker_running_requests") {
      worker(x).running_requests = x.value;
    } else if (x.name == p + "worker_queued_requests") {
      worker(x).queued_requests = x.value;
    } else if (x.name == p + "worker_free_kv_blocks") {
      worker(x).free_kv_blocks = x.value;
    }
  }
  auto ttft = SummarizeHistogram(samples, p + "ttft_seconds");
  if (!ttft.ok()) return ttft.status();
  auto tpot = SummarizeHistogram(samples, p + "tpot_seconds");
  if (!tpot.ok()) return tpot.status();
  auto e2e = SummarizeHistogram(samples, p + "e2e_seconds");
  if (!e2e.ok()) return e2e.status();
  m.ttft = *ttft;
  m.tpot = *tpot;
  m.e2e = *e2e;
  for (auto& [route, r] : routes) m.routes.push_back(r);
  for (auto& [url, w] : workers) {
    // A removed worker keeps its series with registered 0; it is not part of the cluster.
    auto it = registered.find(url);
    if (it != registered.end() && !it->second) continue;
    m.workers.push_back(w);
  }
  return m;
}

nlohmann::json MetricsSummary::ToJson() const {
  nlohmann::json by_route = nlohmann::json::array();
  for (const RouteRequests& r : routes) {
    by_route.push_back({{"route", r.route},
                        {"total", Num(r.total)},
                        {"2xx", Num(r.ok)},
                        {"4xx", Num(r.client_error)},
                        {"5xx", Num(r.server_error)}});
  }
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto& [kind, n] : errors_by_kind) kinds[kind] = Num(n);
  nlohmann::json ws = nlohmann::json::array();
  for (const WorkerMetrics& w : workers) {
    ws.push_back({{"url", w.url},
                  {"healthy", w.healthy ? nlohmann::json(*w.healthy) : nullptr},
                  {"circuit", w.circuit.empty() ? nullptr : nlohmann::json(w.circuit)},
                  {"inflight", Num(w.inflight)},
                  {"running_requests", Num(w.running_requests)},
                  {"queued_requests", Num(w.queued_requests)},
                  {"free_kv_blocks", w.free_kv_blocks ? Num(*w.free_kv_blocks) : nullptr}});
  }
  return {{"requests", {{"total", Num(requests_total)}, {"by_route", by_route}}},
          {"errors", {{"total", Num(errors_total)}, {"by_kind", kinds}}},
          {"retries", Num(retries)},
          {"inflight", Num(inflight)},
          {"queue_depth", Num(queue_depth)},
          {"latency_seconds",
           {{"ttft", LatencyJson(ttft)}, {"tpot", LatencyJson(tpot)}, {"e2e", LatencyJson(e2e)}}},
          {"workers", ws}};
}

std::string MetricsSummary::ToText() const {
  std::string errors = Count(errors_total);
  if (!errors_by_kind.empty()) {
    std::vector<std::string> parts;
    for (const auto& [kind, n] : errors_by_kind) parts.push_back(absl::StrCat(kind, "=", Count(n)));
    std::string joined;
    for (const std::string& part : parts) joined += (joined.empty() ? "" : ", ") + part;
    errors = absl::StrCat(errors, " (", joined, ")");
  }
  std::string out = absl::StrCat("requests ", Count(requests_total), "   errors ", errors,
                                 "   retries ", Count(retries), "   inflight ", Count(inflight),
                                 "   queued ", Count(queue_depth), "\n\n");
  Table latency({"LATENCY", "COUNT", "MEAN", "P50", "P90", "P99"});
  for (const auto& [name, s] : {std::pair<const char*, const LatencySummary&>{"ttft", ttft},
                                {"tpot", tpot},
                                {"e2e", e2e}}) {
    latency.AddRow({name, Count(s.count), Ms(s.mean), Ms(s.p50), Ms(s.p90), Ms(s.p99)});
  }
  out += latency.Render();
  if (!routes.empty()) {
    Table t({"ROUTE", "REQUESTS", "2XX", "4XX", "5XX"});
    for (const RouteRequests& r : routes) {
      t.AddRow(
          {r.route, Count(r.total), Count(r.ok), Count(r.client_error), Count(r.server_error)});
    }
    out += '\n';
    out += t.Render();
  }
  Table t({"WORKER", "HEALTHY", "CIRCUIT", "INFLIGHT", "RUNNING", "QUEUED", "FREE KV"});
  for (const WorkerMetrics& w : workers) {
    t.AddRow({w.url, w.healthy ? (*w.healthy ? "yes" : "no") : "-",
              w.circuit.empty() ? "-" : w.circuit, Count(w.inflight), Count(w.running_requests),
              Count(w.queued_requests), w.free_kv_blocks ? Count(*w.free_kv_blocks) : "-"});
  }
  out += '\n';
  out += workers.empty() ? std::string("no workers registered\n") : t.Render();
  return out;
}

}  // namespace tandem::ctl

// router_bench: tandem-router beside nginx as a round-robin HTTP proxy, in one run.
//
//   router_bench --json out.json [--requests 20000] [--concurrency 16] [--backends 2] [--rounds 3]
//
// Both proxies sit in front of K fast stand-in backends living in this process:
//   - tandem-router (the real binary from this binary's directory, plain mode, round_robin) in
//     front of K gRPC servers implementing proto::Worker whose Decode answers at once;
//   - nginx (worker_processes 1, upstream round robin with keepalive; generated config in a temp
//     dir, so it runs unprivileged) in front of K HTTP servers answering POST /generate with the
//     very body the router returned for the same request (same size on the wire).
// The same closed-loop load (C keep-alive connections, N requests in total per side) drives each
// proxy and each set of backends directly. A proxy's added latency is its percentile minus the
// same percentile of its backends reached directly at the same concurrency. Each round measures
// the four paths back to back; figures are medians over rounds, and router_vs_nginx_rps is the
// median of the per-round ratios. Everything runs on
// 127.0.0.1; every child is killed at the end, on failure and on SIGINT/SIGTERM.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "bench/router_bench/children.h"
#include "bench/router_bench/load.h"
#include "bench/router_bench/stand_in_worker.h"
#include "common/http_server.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string json_path;
  int requests = 20000;
  int concurrency = 16;
  int backends = 2;
  int tokens = 4;       // tokens in each stand-in answer
  int prompt_len = 32;  // input_ids per request
  int rounds = 3;       // each round measures all four paths; medians are reported
  int phase_timeout_s = 120;
  std::string bin_dir;
  std::string model_path;
  std::string nginx = "/usr/sbin/nginx";
  bool keep_temp = false;
};

std::string SelfDir() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : self.parent_path().string();
}

// models/tandem-tiny-fortunes from the working directory, else from the source tree two levels
// above the bin dir (build-x/bin).
std::string DefaultModelPath(const std::string& bin_dir) {
  const std::string rel = "models/tandem-tiny-fortunes";
  if (std::filesystem::exists(rel + "/tokenizer.json")) return rel;
  return (std::filesystem::path(bin_dir) / ".." / ".." / rel).lexically_normal().string();
}

std::string RequestBody(const Options& o) {
  std::vector<int> ids;
  for (int i = 0; i < o.prompt_len; ++i) ids.push_back(100 + (i * 37) % 2900);
  json body = {{"input_ids", ids},
               {"sampling_params", {{"max_new_tokens", o.tokens}, {"temperature", 0}}},
               {"stream", false}};
  return body.dump();
}

std::string NginxConfig(const std::string& dir, int port, const std::vector<int>& backends,
                        int keepalive) {
  std::ostringstream c;
  c << "worker_processes 1;\ndaemon off;\npid " << dir << "/nginx.pid;\n"
    << "error_log " << dir << "/nginx_error.log warn;\n"
    << "events { worker_connections 4096; }\nhttp {\n  access_log off;\n"
    << "  client_body_temp_path " << dir << "/client_body;\n"
    << "  proxy_temp_path " << dir << "/proxy;\n  fastcgi_temp_path " << dir << "/fastcgi;\n"
    << "  uwsgi_temp_path " << dir << "/uwsgi;\n  scgi_temp_path " << dir << "/scgi;\n"
    << "  keepalive_requests 1000000;\n  upstream backends {\n";
  for (int p : backends) c << "    server 127.0.0.1:" << p << ";\n";
  c << "    keepalive " << keepalive << ";\n    keepalive_requests 1000000;\n  }\n"
    << "  server {\n    listen 127.0.0.1:" << port << ";\n    location / {\n"
    << "      proxy_pass http://backends;\n      proxy_http_version 1.1;\n"
    << "      proxy_set_header Connection \"\";\n    }\n  }\n}\n";
  return c.str();
}

double Ms(double seconds) { return seconds * 1e3; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Per figure, the median over rounds; counts are summed.
LoadResult MedianOf(const std::vector<LoadResult>& rounds) {
  LoadResult m;
  std::vector<double> rps, p50, p99, mean;
  for (const LoadResult& r : rounds) {
    m.ok += r.ok;
    m.errors += r.errors;
    if (m.first_error.empty()) m.first_error = r.first_error;
    rps.push_back(r.rps);
    p50.push_back(r.p50_s);
    p99.push_back(r.p99_s);
    mean.push_back(r.mean_s);
  }
  m.rps = Median(rps);
  m.p50_s = Median(p50);
  m.p99_s = Median(p99);
  m.mean_s = Median(mean);
  return m;
}

void PrintRow(const char* name, const LoadResult& r) {
  std::printf("%-22s %10.0f %9.3f %9.3f %9.3f %7lld\n", name, r.rps, Ms(r.p50_s), Ms(r.p99_s),
              Ms(r.mean_s), static_cast<long long>(r.errors));
}

// The body of one successful answer, or an error naming the status and body.
absl::StatusOr<std::string> OneAnswer(int port, const std::string& body) {
  LoadSpec spec;
  spec.ports = {port};
  spec.body = body;
  spec.requests = 1;
  spec.concurrency = 1;
  spec.timeout = std::chrono::seconds(10);
  spec.keep_last_body = true;
  LoadResult r = RunHttpLoad(spec);
  if (r.ok != 1) return absl::UnavailableError(absl::StrCat("no answer: ", r.first_error));
  return r.last_body;
}

int Run(const Options& o) {
  if (o.requests < 1 || o.concurrency < 1 || o.backends < 1 || o.tokens < 1 || o.prompt_len < 1) {
    std::fprintf(stderr,
                 "router_bench: --requests, --concurrency, --backends, --tokens, "
                 "--prompt-len and --rounds must be positive\n");
    return 2;
  }
  const std::string bin_dir = o.bin_dir.empty() ? SelfDir() : o.bin_dir;
  const std::string router_bin = bin_dir + "/tandem-router";
  const std::string model = o.model_path.empty() ? DefaultModelPath(bin_dir) : o.model_path;
  if (access(router_bin.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "router_bench: %s is not an executable (build tandem-router)\n",
                 router_bin.c_str());
    return 2;
  }
  if (access(o.nginx.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "router_bench: nginx not found at %s (apt-get install nginx-light)\n",
                 o.nginx.c_str());
    return 2;
  }
  auto temp = TempDir::Create("router_bench", o.keep_temp);
  if (!temp.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(temp.status().message()).c_str());
    return 2;
  }
  const std::string dir = (*temp)->path();
  // Declared before the children so that they are destroyed after them: the proxies go first,
  // then the backends they were connected to.
  std::vector<std::unique_ptr<StandInWorker>> workers;
  std::vector<std::unique_ptr<HttpServer>> http_backends;
  ChildSet children;
  InstallChildKiller(o.keep_temp ? "" : dir);

  const std::string body = RequestBody(o);
  const auto timeout = std::chrono::seconds(o.phase_timeout_s);

  // gRPC stand-ins and the router in front of them.
  std::vector<std::string> urls;
  for (int i = 0; i < o.backends; ++i) {
    auto w = StandInWorker::Start(o.tokens, model);
    if (!w.ok()) {
      std::fprintf(stderr, "router_bench: stand-in worker: %s\n",
                   std::string(w.status().message()).c_str());
      return 1;
    }
    urls.push_back(absl::StrCat("http://127.0.0.1:", (*w)->port()));
    workers.push_back(std::move(*w));
  }
  const int router_port = FreeLoopbackPort();
  std::vector<std::string> router_argv = {router_bin,
                                          "--host",
                                          "127.0.0.1",
                                          "--port",
                                          std::to_string(router_port),
                                          "--model-path",
                                          model,
                                          "--policy",
                                          "round_robin",
                                          "--health-check-interval-secs",
                                          "1",
                                          "--health-success-threshold",
                                          "1",
                                          "--worker-urls"};
  router_argv.insert(router_argv.end(), urls.begin(), urls.end());
  auto router = children.Spawn("tandem-router", router_argv, dir + "/router.log");
  if (!router.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(router.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::string> answer = absl::UnavailableError("not started");
  for (auto until = Clock::now() + std::chrono::seconds(60); Clock::now() < until;) {
    if (!children.AllRunning()) break;
    answer = OneAnswer(router_port, body);
    if (answer.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!answer.ok()) {
    std::fprintf(
        stderr, "router_bench: tandem-router never answered /generate (%s); its log:\n%s\n",
        std::string(answer.status().message()).c_str(), children.LogTail("tandem-router").c_str());
    return 1;
  }

  // HTTP backends answering the router's own body, and nginx in front of them.
  const std::string reply = *answer;
  std::vector<int> http_ports;
  for (int i = 0; i < o.backends; ++i) {
    HttpServerOptions so;
    so.host = "127.0.0.1";
    so.threads = 1;
    auto server = std::make_unique<HttpServer>(so);
    server->Handle("POST", "/generate", [reply](HttpRequest, HttpResponder responder) {
      responder.Send(HttpResponse::Json(200, reply));
    });
    if (absl::Status s = server->Start(); !s.ok()) {
      std::fprintf(stderr, "router_bench: HTTP backend: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    http_ports.push_back(server->port());
    http_backends.push_back(std::move(server));
  }
  const int nginx_port = FreeLoopbackPort();
  {
    std::ofstream conf(dir + "/nginx.conf");
    conf << NginxConfig(dir, nginx_port, http_ports, 2 * o.concurrency);
    if (!conf) {
      std::fprintf(stderr, "router_bench: cannot write %s/nginx.conf\n", dir.c_str());
      return 1;
    }
  }
  auto nginx = children.Spawn(
      "nginx",
      {o.nginx, "-p", dir + "/", "-c", dir + "/nginx.conf", "-e", dir + "/nginx_error.log"},
      dir + "/nginx.log");
  if (!nginx.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(nginx.status().message()).c_str());
    return 1;
  }
  absl::StatusOr<std::string> nginx_answer = absl::UnavailableError("not started");
  for (auto until = Clock::now() + std::chrono::seconds(20); Clock::now() < until;) {
    if (!children.AllRunning()) break;
    nginx_answer = OneAnswer(nginx_port, body);
    if (nginx_answer.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!nginx_answer.ok() || *nginx_answer != reply) {
    std::string err;
    std::ifstream f(dir + "/nginx_error.log");
    std::getline(f, err, '\0');
    std::fprintf(
        stderr, "router_bench: nginx did not relay the backends' answer (%s):\n%s%s\n",
        nginx_answer.ok() ? "different body" : std::string(nginx_answer.status().message()).c_str(),
        children.LogTail("nginx").c_str(), err.c_str());
    return 1;
  }

  // The measured phases. Each starts with a short warm-up on the same connections' path.
  // `cpu_s`: CPU seconds the process tree of `pid` used during the measured part (pid 0: none).
  auto http_phase = [&](const std::vector<int>& ports, pid_t pid = 0, double* cpu_s = nullptr) {
    LoadSpec spec;
    spec.ports = ports;
    spec.body = body;
    spec.concurrency = o.concurrency;
    spec.timeout = timeout;
    spec.requests = std::max(o.concurrency, o.requests / 10);
    RunHttpLoad(spec);  // warm-up
    spec.requests = o.requests;
    const double cpu_before = pid > 0 ? ProcessTreeCpuSeconds(pid) : 0;
    LoadResult r = RunHttpLoad(spec);
    if (cpu_s != nullptr) *cpu_s = ProcessTreeCpuSeconds(pid) - cpu_before;
    return r;
  };
  std::vector<int> grpc_ports;
  for (const auto& w : workers) grpc_ports.push_back(w->port());
  auto grpc_phase = [&]() {
    GrpcLoadSpec spec;
    spec.ports = grpc_ports;
    spec.prompt_len = o.prompt_len;
    spec.tokens = o.tokens;
    spec.concurrency = o.concurrency;
    spec.timeout = timeout;
    spec.requests = std::max(o.concurrency, o.requests / 10);
    RunGrpcDecodeLoad(spec);  // warm-up
    spec.requests = o.requests;
    return RunGrpcDecodeLoad(spec);
  };
  std::printf("router_bench: %d requests per side, %d connections, %d backends, %zu-byte answers\n",
              o.requests, o.concurrency, o.backends, reply.size());
  // The four paths run back to back in each round, so a burst of load from elsewhere on the
  // machine hits one round, not one side; the reported figures are medians over rounds.
  std::vector<LoadResult> grpc_rounds, router_rounds, http_rounds, nginx_rounds;
  std::vector<double> ratios, router_cpu_us, nginx_cpu_us;
  json rounds = json::array();
  for (int round = 0; round < o.rounds; ++round) {
    grpc_rounds.push_back(grpc_phase());
    double router_cpu = 0, nginx_cpu = 0;
    router_rounds.push_back(http_phase({router_port}, *router, &router_cpu));
    http_rounds.push_back(http_phase(http_ports));
    nginx_rounds.push_back(http_phase({nginx_port}, *nginx, &nginx_cpu));
    router_cpu_us.push_back(1e6 * router_cpu / static_cast<double>(o.requests));
    nginx_cpu_us.push_back(1e6 * nginx_cpu / static_cast<double>(o.requests));
    const double router_rps = router_rounds.back().rps;
    const double nginx_rps = nginx_rounds.back().rps;
    ratios.push_back(nginx_rps > 0 ? router_rps / nginx_rps : 0);
    std::printf(
        "round %d: router %.0f req/s (%.0f us CPU/req), nginx %.0f req/s (%.0f us CPU/req), "
        "ratio %.3f\n",
        round + 1, router_rps, router_cpu_us.back(), nginx_rps, nginx_cpu_us.back(), ratios.back());
    rounds.push_back({{"router_rps", router_rps},
                      {"nginx_rps", nginx_rps},
                      {"grpc_direct_rps", grpc_rounds.back().rps},
                      {"http_direct_rps", http_rounds.back().rps},
                      {"router_cpu_us_per_request", router_cpu_us.back()},
                      {"nginx_cpu_us_per_request", nginx_cpu_us.back()},
                      {"router_p99_ms", Ms(router_rounds.back().p99_s)},
                      {"nginx_p99_ms", Ms(nginx_rounds.back().p99_s)}});
  }
  const LoadResult grpc_direct = MedianOf(grpc_rounds);
  const LoadResult router_r = MedianOf(router_rounds);
  const LoadResult http_direct = MedianOf(http_rounds);
  const LoadResult nginx_r = MedianOf(nginx_rounds);
  if (!children.AllRunning()) {
    std::fprintf(stderr, "router_bench: a proxy exited during the run:\n%s\n%s\n",
                 children.LogTail("tandem-router").c_str(), children.LogTail("nginx").c_str());
    return 1;
  }

  std::printf("\nmedians over %d rounds\n%-22s %10s %9s %9s %9s %7s\n", o.rounds, "path", "req/s",
              "p50 ms", "p99 ms", "mean ms", "errors");
  PrintRow("gRPC backends direct", grpc_direct);
  PrintRow("tandem-router", router_r);
  PrintRow("HTTP backends direct", http_direct);
  PrintRow("nginx", nginx_r);
  const double ratio = Median(ratios);  // of the per-round ratios (side by side)
  json out = {
      {"requests", o.requests},
      {"concurrency", o.concurrency},
      {"backends", o.backends},
      {"rounds", o.rounds},
      {"per_round", rounds},
      {"answer_bytes", reply.size()},
      {"router_rps", router_r.rps},
      {"nginx_rps", nginx_r.rps},
      {"router_vs_nginx_rps", ratio},
      {"router_p50_ms", Ms(router_r.p50_s)},
      {"router_p99_ms", Ms(router_r.p99_s)},
      {"nginx_p50_ms", Ms(nginx_r.p50_s)},
      {"nginx_p99_ms", Ms(nginx_r.p99_s)},
      {"grpc_direct_rps", grpc_direct.rps},
      {"grpc_direct_p50_ms", Ms(grpc_direct.p50_s)},
      {"grpc_direct_p99_ms", Ms(grpc_direct.p99_s)},
      {"http_direct_rps", http_direct.rps},
      {"http_direct_p50_ms", Ms(http_direct.p50_s)},
      {"http_direct_p99_ms", Ms(http_direct.p99_s)},
      {"router_added_p50_ms", Ms(router_r.p50_s - grpc_direct.p50_s)},
      {"router_added_p99_ms", Ms(router_r.p99_s - grpc_direct.p99_s)},
      {"nginx_added_p50_ms", Ms(nginx_r.p50_s - http_direct.p50_s)},
      {"nginx_added_p99_ms", Ms(nginx_r.p99_s - http_direct.p99_s)},
      {"router_cpu_us_per_request", Median(router_cpu_us)},
      {"nginx_cpu_us_per_request", Median(nginx_cpu_us)},
      {"router_errors", router_r.errors},
      {"nginx_errors", nginx_r.errors},
  };
  std::printf(
      "\nrouter_vs_nginx_rps %.3f   added p50/p99 ms: router %.3f / %.3f, nginx %.3f / %.3f\n",
      ratio, out["router_added_p50_ms"].get<double>(), out["router_added_p99_ms"].get<double>(),
      out["nginx_added_p50_ms"].get<double>(), out["nginx_added_p99_ms"].get<double>());
  std::printf("proxy CPU per request (us): router %.1f, nginx %.1f\n", Median(router_cpu_us),
              Median(nginx_cpu_us));
  for (const LoadResult* r : {&grpc_direct, &router_r, &http_direct, &nginx_r}) {
    if (r->errors > 0)
      std::fprintf(stderr, "router_bench: first error: %s\n", r->first_error.c_str());
  }
  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "router_bench: cannot write %s\n", o.json_path.c_str());
      return 1;
    }
  }
  const bool failed =
      router_r.errors + nginx_r.errors + grpc_direct.errors + http_direct.errors > 0;
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  tandem::bench::Options o;
  CLI::App app{"tandem-router vs nginx: requests/s and added latency over fast stand-in backends"};
  app.add_option("--json", o.json_path, "Write the results here as JSON");
  app.add_option("--requests", o.requests, "Requests per side (router, nginx, each direct run)");
  app.add_option("--concurrency", o.concurrency, "Keep-alive connections driving the load");
  app.add_option("--backends", o.backends, "Stand-in backends behind each proxy");
  app.add_option("--tokens", o.tokens, "Tokens in each stand-in answer");
  app.add_option("--prompt-len", o.prompt_len, "input_ids per request");
  app.add_option("--rounds", o.rounds, "Rounds of the four measurements; medians reported");
  app.add_option("--phase-timeout", o.phase_timeout_s, "Seconds a measured phase may take");
  app.add_option("--bin-dir", o.bin_dir, "Where tandem-router is (default: this binary's dir)");
  app.add_option("--model-path", o.model_path,
                 "Tokenizer dir for the router "
                 "(default models/tandem-tiny-fortunes)");
  app.add_option("--nginx", o.nginx, "nginx binary");
  app.add_flag("--keep-temp", o.keep_temp, "Keep the temp dir (configs, logs)");
  CLI11_PARSE(app, argc, argv);
  return tandem::bench::Run(o);
}

// router_bench: tandem-router beside nginx as a round-robin HTTP proxy, in one run.
//
//   router_bench --json out.json [--requests 20000] [--concurrency 16] [--backends 2] [--rounds 3]
//                [--grpc-sessions] [--router-arg=--http-threads --router-arg=1 ...]
//
// What each side runs (every process on 127.0.0.1, all sharing the machine's cores):
//   - load generator (this process, the same code for both proxies): C threads, each with one
//     keep-alive HTTP/1.1 connection (Boost.Beast, blocking), sending POST /generate back to
//     back; for the gRPC-direct baseline, C threads each with a gRPC channel of its own calling
//     Decode synchronously;
//   - router side: tandem-router (the real binary from this binary's directory, plain mode,
//     round_robin, its default --http-threads, plus any --router-arg) in front of K stand-in
//     workers (StandInWorker: the workers' own session code on their session socket, which
//     Health advertises as a worker's does; with --grpc-sessions no socket, so the legs go on
//     rpc Session; gRPC callback API, GRPC_ARG_MINIMAL_STACK, one write-and-finish per Decode),
//     all K in one child process (this binary re-executed with --serve-stand-ins);
//   - nginx side: nginx (worker_processes 1, upstream round robin with keepalive; generated
//     config in a temp dir, so it runs unprivileged) in front of K HTTP servers (the same
//     HttpServer the daemons use, one I/O thread each) answering POST /generate with the very
//     body the router returned for the same request (same size on the wire), all K in one child
//     process (--serve-http).
// The same closed-loop load (C connections, N requests in total per side) drives each proxy and
// each set of backends directly. A proxy's added latency is its percentile minus the same
// percentile of its backends reached directly at the same concurrency. Each round measures the
// four paths back to back; figures are medians over rounds, and router_vs_nginx_rps is the
// median of the per-round ratios.
//
// CPU accounting: around each measured phase the CPU time (user + system) of every process is
// read (this process by getrusage, the children from /proc, nginx with its worker), so the output
// shows, per path, the microseconds of CPU per request spent by the load generator, the proxy
// and the backends, their total, and the machine's total (/proc/stat) including whatever else ran
// meanwhile. On a shared 2-core box the total per request is what sets the achievable rate.
// Every child is killed at the end, on failure and on SIGINT/SIGTERM.

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
#include "bench/router_bench/backends.h"
#include "bench/router_bench/children.h"
#include "bench/router_bench/load.h"
#include "bench/router_bench/report.h"
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
  // Internal: this binary re-executed as a backend process (see bench/router_bench/backends.h).
  bool grpc_sessions = false;            // stand-ins without the session socket
  std::vector<std::string> router_args;  // appended to tandem-router's command line
  int serve_stand_ins = 0;
  int serve_http = 0;
  std::string reply_file;
  std::string ports_file;
};

std::string SelfExe() {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : self.string();
}

std::string SelfDir() {
  const std::string self = SelfExe();
  return self.empty() ? std::string(".") : std::filesystem::path(self).parent_path().string();
}

// models/tandem-tiny-english from the working directory, else from the source tree two levels
// above the bin dir (build-x/bin).
std::string DefaultModelPath(const std::string& bin_dir) {
  const std::string rel = "models/tandem-tiny-english";
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
  ChildSet children;
  InstallChildKiller(o.keep_temp ? "" : dir);
  const std::string self_exe = SelfExe();
  if (self_exe.empty()) {
    std::fprintf(stderr, "router_bench: cannot read /proc/self/exe to start the backends\n");
    return 2;
  }

  const std::string body = RequestBody(o);
  const auto timeout = std::chrono::seconds(o.phase_timeout_s);
  const auto start_timeout = std::chrono::seconds(60);
  Pids pids;

  // gRPC stand-ins (one process) and the router in front of them.
  const std::string standin_ports_file = dir + "/stand_ins.ports";
  std::vector<std::string> stand_in_args = {
      self_exe,   "--serve-stand-ins",      std::to_string(o.backends),
      "--tokens", std::to_string(o.tokens), "--model-path",
      model,      "--ports-file",           standin_ports_file};
  if (o.grpc_sessions) stand_in_args.push_back("--grpc-sessions");
  auto stand_ins = children.Spawn("stand-ins", stand_in_args, dir + "/stand_ins.log");
  if (!stand_ins.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(stand_ins.status().message()).c_str());
    return 1;
  }
  pids.stand_ins = *stand_ins;
  auto grpc_ports =
      WaitForPorts(children, "stand-ins", standin_ports_file, o.backends, start_timeout);
  if (!grpc_ports.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(grpc_ports.status().message()).c_str());
    return 1;
  }
  std::vector<std::string> urls;
  for (int port : *grpc_ports) urls.push_back(absl::StrCat("http://127.0.0.1:", port));
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
  router_argv.insert(router_argv.end(), o.router_args.begin(), o.router_args.end());
  auto router = children.Spawn("tandem-router", router_argv, dir + "/router.log");
  if (!router.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(router.status().message()).c_str());
    return 1;
  }
  pids.router = *router;
  absl::StatusOr<std::string> answer = absl::UnavailableError("not started");
  for (auto until = Clock::now() + start_timeout; Clock::now() < until;) {
    if (!children.AllRunning()) break;
    answer = OneAnswer(router_port, body);
    if (answer.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (!answer.ok()) {
    std::fprintf(stderr,
                 "router_bench: tandem-router never answered /generate (%s); its log:\n%s\n%s\n",
                 std::string(answer.status().message()).c_str(),
                 children.LogTail("tandem-router").c_str(), children.LogTail("stand-ins").c_str());
    return 1;
  }

  // HTTP backends (one process) answering the router's own body, and nginx in front of them.
  const std::string reply = *answer;
  const std::string reply_file = dir + "/reply.json";
  {
    std::ofstream f(reply_file, std::ios::binary);
    f << reply;
    if (!f) {
      std::fprintf(stderr, "router_bench: cannot write %s\n", reply_file.c_str());
      return 1;
    }
  }
  const std::string http_ports_file = dir + "/http_backends.ports";
  auto http_backends = children.Spawn("http-backends",
                                      {self_exe, "--serve-http", std::to_string(o.backends),
                                       "--reply-file", reply_file, "--ports-file", http_ports_file},
                                      dir + "/http_backends.log");
  if (!http_backends.ok()) {
    std::fprintf(stderr, "router_bench: %s\n",
                 std::string(http_backends.status().message()).c_str());
    return 1;
  }
  pids.http = *http_backends;
  auto http_ports =
      WaitForPorts(children, "http-backends", http_ports_file, o.backends, start_timeout);
  if (!http_ports.ok()) {
    std::fprintf(stderr, "router_bench: %s\n", std::string(http_ports.status().message()).c_str());
    return 1;
  }
  const int nginx_port = FreeLoopbackPort();
  {
    std::ofstream conf(dir + "/nginx.conf");
    conf << NginxConfig(dir, nginx_port, *http_ports, 2 * o.concurrency);
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
  pids.nginx = *nginx;
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

  // The measured phases. Each starts with a short warm-up on the same connections' path; the
  // CPU of every process is read around the measured part only.
  const double n_req = static_cast<double>(o.requests);
  auto per_request_us = [n_req](double before, double after) {
    return 1e6 * (after - before) / n_req;
  };
  auto http_phase = [&](const std::vector<int>& ports, CpuSample* before, CpuSample* after) {
    LoadSpec spec;
    spec.ports = ports;
    spec.body = body;
    spec.concurrency = o.concurrency;
    spec.timeout = timeout;
    spec.requests = std::max(o.concurrency, o.requests / 10);
    RunHttpLoad(spec);  // warm-up
    spec.requests = o.requests;
    *before = ReadCpu(pids);
    LoadResult r = RunHttpLoad(spec);
    *after = ReadCpu(pids);
    return r;
  };
  auto grpc_phase = [&](CpuSample* before, CpuSample* after) {
    GrpcLoadSpec spec;
    spec.ports = *grpc_ports;
    spec.prompt_len = o.prompt_len;
    spec.tokens = o.tokens;
    spec.concurrency = o.concurrency;
    spec.timeout = timeout;
    spec.requests = std::max(o.concurrency, o.requests / 10);
    RunGrpcDecodeLoad(spec);  // warm-up
    spec.requests = o.requests;
    *before = ReadCpu(pids);
    LoadResult r = RunGrpcDecodeLoad(spec);
    *after = ReadCpu(pids);
    return r;
  };
  std::printf("router_bench: %d requests per side, %d connections, %d backends, %zu-byte answers\n",
              o.requests, o.concurrency, o.backends, reply.size());
  // The four paths run back to back in each round, so a burst of load from elsewhere on the
  // machine hits one round, not one side; the reported figures are medians over rounds.
  std::vector<LoadResult> grpc_rounds, router_rounds, http_rounds, nginx_rounds;
  std::vector<double> ratios;
  // Per path, per round: CPU per request.
  std::vector<PathCpu> grpc_cpu, router_cpu, http_cpu, nginx_cpu;
  json rounds = json::array();
  for (int round = 0; round < o.rounds; ++round) {
    CpuSample b, a;
    grpc_rounds.push_back(grpc_phase(&b, &a));
    grpc_cpu.push_back({per_request_us(b.client, a.client), 0,
                        per_request_us(b.stand_ins, a.stand_ins), per_request_us(b.box, a.box)});
    router_rounds.push_back(http_phase({router_port}, &b, &a));
    router_cpu.push_back({per_request_us(b.client, a.client), per_request_us(b.router, a.router),
                          per_request_us(b.stand_ins, a.stand_ins), per_request_us(b.box, a.box)});
    http_rounds.push_back(http_phase(*http_ports, &b, &a));
    http_cpu.push_back({per_request_us(b.client, a.client), 0, per_request_us(b.http, a.http),
                        per_request_us(b.box, a.box)});
    nginx_rounds.push_back(http_phase({nginx_port}, &b, &a));
    nginx_cpu.push_back({per_request_us(b.client, a.client), per_request_us(b.nginx, a.nginx),
                         per_request_us(b.http, a.http), per_request_us(b.box, a.box)});
    const double router_rps = router_rounds.back().rps;
    const double nginx_rps = nginx_rounds.back().rps;
    ratios.push_back(nginx_rps > 0 ? router_rps / nginx_rps : 0);
    std::printf(
        "round %d: router %.0f req/s (%.0f us CPU/req: client %.0f, router %.0f, stand-ins %.0f), "
        "nginx %.0f req/s (%.0f us CPU/req: client %.0f, nginx %.0f, backends %.0f), "
        "ratio %.3f\n",
        round + 1, router_rps, router_cpu.back().total(), router_cpu.back().client,
        router_cpu.back().proxy, router_cpu.back().backends, nginx_rps, nginx_cpu.back().total(),
        nginx_cpu.back().client, nginx_cpu.back().proxy, nginx_cpu.back().backends, ratios.back());
    rounds.push_back({{"router_rps", router_rps},
                      {"nginx_rps", nginx_rps},
                      {"grpc_direct_rps", grpc_rounds.back().rps},
                      {"http_direct_rps", http_rounds.back().rps},
                      {"router_cpu_us_per_request", router_cpu.back().proxy},
                      {"nginx_cpu_us_per_request", nginx_cpu.back().proxy},
                      {"cpu_us_per_request",
                       {{"grpc_direct", PathCpuJson(grpc_cpu.back())},
                        {"router", PathCpuJson(router_cpu.back())},
                        {"http_direct", PathCpuJson(http_cpu.back())},
                        {"nginx", PathCpuJson(nginx_cpu.back())}}},
                      {"router_p99_ms", Ms(router_rounds.back().p99_s)},
                      {"nginx_p99_ms", Ms(nginx_rounds.back().p99_s)}});
  }
  const LoadResult grpc_direct = MedianOf(grpc_rounds);
  const LoadResult router_r = MedianOf(router_rounds);
  const LoadResult http_direct = MedianOf(http_rounds);
  const LoadResult nginx_r = MedianOf(nginx_rounds);
  const PathCpu grpc_c = MedianOf(grpc_cpu);
  const PathCpu router_c = MedianOf(router_cpu);
  const PathCpu http_c = MedianOf(http_cpu);
  const PathCpu nginx_c = MedianOf(nginx_cpu);
  if (!children.AllRunning()) {
    std::fprintf(stderr, "router_bench: a child exited during the run:\n%s\n%s\n%s\n%s\n",
                 children.LogTail("tandem-router").c_str(), children.LogTail("nginx").c_str(),
                 children.LogTail("stand-ins").c_str(), children.LogTail("http-backends").c_str());
    return 1;
  }

  std::printf("\nmedians over %d rounds\n%-22s %10s %9s %9s %9s %7s\n", o.rounds, "path", "req/s",
              "p50 ms", "p99 ms", "mean ms", "errors");
  PrintRow("gRPC backends direct", grpc_direct);
  PrintRow("tandem-router", router_r);
  PrintRow("HTTP backends direct", http_direct);
  PrintRow("nginx", nginx_r);
  std::printf("\nCPU per request (us), medians over rounds\n%-22s %8s %8s %9s %8s %9s\n", "path",
              "client", "proxy", "backends", "total", "machine");
  PrintCpuRow("gRPC backends direct", grpc_c);
  PrintCpuRow("tandem-router", router_c);
  PrintCpuRow("HTTP backends direct", http_c);
  PrintCpuRow("nginx", nginx_c);
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
      // Router path: load generator, tandem-router, gRPC stand-ins.
      {"client_cpu_us_per_request", router_c.client},
      {"router_cpu_us_per_request", router_c.proxy},
      {"standin_cpu_us_per_request", router_c.backends},
      {"router_path_cpu_us_per_request", router_c.total()},
      // nginx path: the same load generator, nginx, HTTP backends.
      {"nginx_client_cpu_us_per_request", nginx_c.client},
      {"nginx_cpu_us_per_request", nginx_c.proxy},
      {"http_backend_cpu_us_per_request", nginx_c.backends},
      {"nginx_path_cpu_us_per_request", nginx_c.total()},
      {"cpu_us_per_request",
       {{"grpc_direct", PathCpuJson(grpc_c)},
        {"router", PathCpuJson(router_c)},
        {"http_direct", PathCpuJson(http_c)},
        {"nginx", PathCpuJson(nginx_c)}}},
      {"router_errors", router_r.errors},
      {"nginx_errors", nginx_r.errors},
  };
  std::printf(
      "\nrouter_vs_nginx_rps %.3f   added p50/p99 ms: router %.3f / %.3f, nginx %.3f / %.3f\n",
      ratio, out["router_added_p50_ms"].get<double>(), out["router_added_p99_ms"].get<double>(),
      out["nginx_added_p50_ms"].get<double>(), out["nginx_added_p99_ms"].get<double>());
  std::printf(
      "proxy CPU per request (us): router %.1f, nginx %.1f; path total: router %.1f, "
      "nginx %.1f\n",
      router_c.proxy, nginx_c.proxy, router_c.total(), nginx_c.total());
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
                 "(default models/tandem-tiny-english)");
  app.add_option("--nginx", o.nginx, "nginx binary");
  app.add_flag("--keep-temp", o.keep_temp, "Keep the temp dir (configs, logs)");
  app.add_option(
         "--router-arg", o.router_args,
         "An extra tandem-router argument (repeat for each), e.g. --router-arg=--http-threads "
         "--router-arg=1")
      ->allow_extra_args(false);
  app.add_flag("--grpc-sessions", o.grpc_sessions,
               "Stand-ins serve no session socket, so the router sends legs on rpc Session");
  // Internal: the backend processes router_bench starts by re-executing itself.
  app.add_option("--serve-stand-ins", o.serve_stand_ins)->group("");
  app.add_option("--serve-http", o.serve_http)->group("");
  app.add_option("--reply-file", o.reply_file)->group("");
  app.add_option("--ports-file", o.ports_file)->group("");
  CLI11_PARSE(app, argc, argv);
  if (o.serve_stand_ins > 0) {
    return tandem::bench::ServeStandIns(o.serve_stand_ins, o.tokens, o.model_path, !o.grpc_sessions,
                                        o.ports_file);
  }
  if (o.serve_http > 0) {
    return tandem::bench::ServeHttpBackends(o.serve_http, o.reply_file, o.ports_file);
  }
  return tandem::bench::Run(o);
}

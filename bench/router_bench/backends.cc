#include "bench/router_bench/backends.h"

#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "bench/router_bench/stand_in_worker.h"
#include "common/http_server.h"

namespace tandem::bench {
namespace {

// Blocks SIGTERM/SIGINT in this thread (and the threads it starts later); WaitForStop takes them.
sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

void WaitForStop(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
}

bool WritePorts(const std::string& path, const std::vector<int>& ports) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    for (int p : ports) f << p << "\n";
    if (!f) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int ServeStandIns(int count, int tokens, const std::string& model_path, bool session_socket,
                  const std::string& ports_file) {
  const sigset_t stop = BlockStopSignals();
  std::vector<std::unique_ptr<StandInWorker>> workers;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    auto w = StandInWorker::Start(tokens, model_path, session_socket);
    if (!w.ok()) {
      std::fprintf(stderr, "stand-in worker: %s\n", std::string(w.status().message()).c_str());
      return 1;
    }
    ports.push_back((*w)->port());
    workers.push_back(std::move(*w));
  }
  if (!WritePorts(ports_file, ports)) {
    std::fprintf(stderr, "stand-ins: cannot write %s\n", ports_file.c_str());
    return 1;
  }
  WaitForStop(stop);
  return 0;
}

int ServeHttpBackends(int count, const std::string& reply_file, const std::string& ports_file) {
  const sigset_t stop = BlockStopSignals();
  std::ifstream in(reply_file, std::ios::binary);
  const std::string reply((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "HTTP backends: cannot read %s\n", reply_file.c_str());
    return 1;
  }
  std::vector<std::unique_ptr<HttpServer>> servers;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    HttpServerOptions so;
    so.host = "127.0.0.1";
    so.threads = 1;
    auto server = std::make_unique<HttpServer>(so);
    server->Handle("POST", "/generate", [reply](HttpRequest, HttpResponder responder) {
      responder.Send(HttpResponse::Json(200, reply));
    });
    if (absl::Status s = server->Start(); !s.ok()) {
      std::fprintf(stderr, "HTTP backend: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    ports.push_back(server->port());
    servers.push_back(std::move(server));
  }
  if (!WritePorts(ports_file, ports)) {
    std::fprintf(stderr, "HTTP backends: cannot write %s\n", ports_file.c_str());
    return 1;
  }
  WaitForStop(stop);
  return 0;
}

absl::StatusOr<std::vector<int>> WaitForPorts(ChildSet& children, const std::string& name,
                                              const std::string& ports_file, int count,
                                              std::chrono::seconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (!children.AllRunning()) {
      return absl::UnavailableError(
          absl::StrCat(name, " exited before listening:\n", children.LogTail(name)));
    }
    std::ifstream f(ports_file);
    if (f) {
      std::vector<int> ports;
      int p = 0;
      while (f >> p) ports.push_back(p);
      if (static_cast<int>(ports.size()) == count) return ports;
      return absl::InternalError(absl::StrCat(name, " listed ", ports.size(), " ports in ",
                                              ports_file, ", expected ", count));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(name, " did not listen within ", timeout.count(),
                                                  " s:\n", children.LogTail(name)));
}

}  // namespace tandem::bench

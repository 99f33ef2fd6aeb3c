// kv_peer: a process owning one tcp transfer engine, for the integration tests and by hand.
//
// It registers region 1 (source, --region-bytes, filled from --seed) and region 2 (destination,
// zeroed; --restricted makes it window-only), starts, prints "DESCRIPTOR <hex>" and then serves
// commands on stdin, one per line, answering one line each:
//   HASH <offset> <length>          -> "HASH <fnv1a-64 of region 2 bytes>"
//   READ <offset> <length>          -> "READ <hex of region 2 bytes>"
//   WINDOW <peer> <offset> <length> -> "WINDOW <id>" or "ERROR <message>"
//   IMPORT <hex descriptor>         -> "PEER <id>" or "ERROR <message>"
//   WRITE <peer> <local> <remote> <length> <deadline ms> -> "STATE <state> <message>"
//   NOTES                           -> "NOTES <n> <msg>:<hash of region 2 at arrival> ..."
//   STATS                           -> "STATS applied=<n> rejected=<n> dropped=<n>
//   handshakes_rejected=<n>" QUIT
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/synchronization/mutex.h"
#include "kvtransfer/factory.h"

namespace {

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return def;
}
bool HasFlag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == "--" + name) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::kv;
  // stdout carries the command protocol; logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("kv_peer"));
  const uint64_t bytes = std::stoull(Flag(argc, argv, "region-bytes", "16777216"));
  std::vector<uint8_t> src(bytes), dst(bytes, 0);
  std::mt19937_64 rng(std::stoull(Flag(argc, argv, "seed", "1")));
  for (auto& b : src) b = static_cast<uint8_t>(rng());

  absl::Mutex mu;
  std::vector<std::string> notes;
  EngineOptions o;
  o.name = Flag(argc, argv, "name", "kv-peer");
  o.cluster_secret = Flag(argc, argv, "cluster-secret", "");
  o.compat.model_id = Flag(argc, argv, "model-id", "qwen2.5-0.5b");
  o.compat.layer_count = 24;
  o.compat.kv_heads = 2;
  o.compat.head_dim = 64;
  o.compat.dtype = "bf16";
  o.compat.block_size = 16;
  o.compat.layout = "layer/kv/block/head/dim";
  o.lanes = std::stoi(Flag(argc, argv, "lanes", "2"));
  o.heartbeat_interval = absl::Milliseconds(200);
  o.on_notification = [&](const std::string&, const std::string& msg) {
    std::string entry = msg + ":" + std::to_string(Fnv1a(dst.data(), dst.size()));
    absl::MutexLock lock(&mu);
    notes.push_back(entry);
  };
  auto engine = CreateTransferEngine("tcp", o);
  if (!engine.ok()) {
    std::cerr << "kv_peer: " << engine.status() << "\n";
    return 2;
  }
  TransferEngine& e = **engine;
  if (!e.RegisterRegion({1, src.data(), bytes, false}).ok() ||
      !e.RegisterRegion({2, dst.data(), bytes, HasFlag(argc, argv, "restricted")}).ok()) {
    return 2;
  }
  if (auto s = e.Start(); !s.ok()) {
    std::cerr << "kv_peer: " << s << "\n";
    return 2;
  }
  std::cout << "DESCRIPTOR " << absl::BytesToHexString(*e.ExportDescriptor()) << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "QUIT") break;
    if (cmd == "HASH" || cmd == "READ") {
      uint64_t off = 0, len = 0;
      in >> off >> len;
      if (off > bytes || len > bytes - off) {
        std::cout << "ERROR range" << std::endl;
        continue;
      }
      if (cmd == "HASH") {
        std::cout << "HASH " << Fnv1a(dst.data() + off, len) << std::endl;
      } else {
        std::string raw(reinterpret_cast<const char*>(dst.data() + off), len);
        std::cout << "READ " << absl::BytesToHexString(raw) << std::endl;
      }
    } else if (cmd == "WINDOW") {
      std::string peer;
      uint64_t off = 0, len = 0;
      in >> peer >> off >> len;
      auto w = e.OpenWindow(peer, 2, off, len);
      if (w.ok()) {
        std::cout << "WINDOW " << *w << std::endl;
      } else {
        std::cout << "ERROR " << w.status().message() << std::endl;
      }
    } else if (cmd == "IMPORT") {
      std::string hex;
      in >> hex;
      auto p = e.ImportPeer(absl::HexStringToBytes(hex));
      if (p.ok()) {
        std::cout << "PEER " << *p << std::endl;
      } else {
        std::cout << "ERROR " << p.status().message() << std::endl;
      }
    } else if (cmd == "WRITE") {
      uint64_t peer = 0, local = 0, remote = 0, len = 0, ms = 0;
      in >> peer >> local >> remote >> len >> ms;
      SubmitOptions so;
      so.deadline = absl::Now() + absl::Milliseconds(ms);
      auto r = e.Submit(peer, {{WriteOp{1, local, 2, remote, len}}}, so);
      if (!r.ok() || !r->accepted) {
        std::cout << "ERROR " << (r.ok() ? "no room" : std::string(r.status().message()))
                  << std::endl;
        continue;
      }
      auto s = e.Wait(r->id, absl::InfiniteFuture());
      std::cout << "STATE " << BatchStateName(s->state) << " " << s->error.message() << std::endl;
      (void)e.Release(r->id);
    } else if (cmd == "NOTES") {
      absl::MutexLock lock(&mu);
      std::cout << "NOTES " << notes.size();
      for (const auto& n : notes) std::cout << " " << n;
      std::cout << std::endl;
    } else if (cmd == "STATS") {
      EngineStats s = e.stats();
      std::cout << "STATS applied=" << s.writes_applied << " rejected=" << s.writes_rejected
                << " dropped=" << s.frames_dropped
                << " handshakes_rejected=" << s.handshakes_rejected << std::endl;
    } else {
      std::cout << "ERROR unknown command" << std::endl;
    }
  }
  e.Shutdown();
  return 0;
}

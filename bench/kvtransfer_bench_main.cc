// kvtransfer_bench: the tcp transfer backend against a raw TCP socket stream, in the same run.
//
//   kvtransfer_bench [--json out.json] [--seconds-per-point 0.4] [--lanes 4]
//
// 1. Raw TCP on loopback: one blocking socket stream, the sender write()s messages of each size,
//    the receiver read()s them into a buffer of the same size. This is the baseline.
// 2. Our tcp backend: two engines in this process (sender and receiver, each with its own I/O
//    thread), batches of non-contiguous writes of each size, up to 4 batches in flight; GB/s and
//    p50/p99 batch latency (submit -> acknowledged by the receiver).
// 3. The KV-shaped case: one 2,048-token prompt of the Qwen2.5-0.5B shape (24 layers, 2 KV heads
//    x 64 dims, bf16, K and V, 16-token blocks = 4 KiB per block per K or V) shipped layer by
//    layer, one batch per layer into scattered destination blocks, then a notification; the time
//    is first submit -> notification delivered.
// Prints a table and writes the figures as JSON. Bounded to well under a minute.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "kvtransfer/factory.h"

namespace {

using namespace tandem::kv;

constexpr uint64_t kRegionBytes = 256ull << 20;

struct Point {
  uint64_t write_bytes = 0;
  int batch_ops = 0;
  double gbps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// ---- raw TCP baseline ----
double RawTcpGbps(uint64_t msg_bytes, double seconds) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(listener, 1);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> received{0};
  std::thread receiver([&] {
    int c = accept(listener, nullptr, nullptr);
    std::vector<char> buf(msg_bytes);
    while (true) {
      ssize_t n = read(c, buf.data(), buf.size());
      if (n <= 0) break;
      received += n;
    }
    close(c);
  });
  int s = socket(AF_INET, SOCK_STREAM, 0);
  connect(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::vector<char> msg(msg_bytes, 'x');
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  uint64_t sent = 0;
  while (absl::Now() < end) {
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = write(s, msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += n;
    }
    sent += msg.size();
  }
  shutdown(s, SHUT_WR);
  receiver.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  close(s);
  close(listener);
  stop = true;
  return received.load() / secs / 1e9;
}

// ---- our engines ----
struct Pair {
  std::vector<uint8_t> src, dst;
  TransferEnginePtr sender, receiver;
  PeerId peer = 0;
};

std::unique_ptr<Pair> MakePair(int lanes, uint64_t slice_bytes) {
  auto p = std::make_unique<Pair>();
  p->src.assign(kRegionBytes, 7);
  p->dst.assign(kRegionBytes, 0);
  auto make = [&](const std::string& name) {
    EngineOptions o;
    o.name = name;
    o.cluster_secret = "bench-cluster-secret-0123456789";
    o.compat = {"qwen2.5-0.5b", 24, 2, 64, "bf16", 16, "layer/kv/block/head/dim"};
    o.lanes = lanes;
    o.slice_bytes = slice_bytes;
    o.max_queued_bytes_per_peer = 4ull << 30;
    auto e = CreateTransferEngine("tcp", o);
    if (!e.ok()) {
      std::fprintf(stderr, "kvtransfer_bench: %s\n", std::string(e.status().message()).c_str());
      std::exit(2);
    }
    return std::move(*e);
  };
  p->sender = make("bench-sender");
  p->receiver = make("bench-receiver");
  if (!p->sender->RegisterRegion({1, p->src.data(), kRegionBytes, false}).ok() ||
      !p->receiver->RegisterRegion({2, p->dst.data(), kRegionBytes, false}).ok() ||
      !p->sender->Start().ok() || !p->receiver->Start().ok()) {
    std::exit(2);
  }
  auto peer = p->sender->ImportPeer(*p->receiver->ExportDescriptor());
  if (!peer.ok()) {
    std::fprintf(stderr, "kvtransfer_bench: %s\n", std::string(peer.status().message()).c_str());
    std::exit(2);
  }
  p->peer = *peer;
  return p;
}

// Non-contiguous ops (a gap between destinations) so that nothing coalesces.
std::vector<WriteOp> StridedOps(uint64_t write_bytes, int count, uint64_t base) {
  std::vector<WriteOp> ops;
  const uint64_t stride = write_bytes * 2 > kRegionBytes / count ? write_bytes : write_bytes * 2;
  for (int i = 0; i < count; ++i) {
    uint64_t off = (base + i * stride) % (kRegionBytes - write_bytes + 1);
    ops.push_back(
        WriteOp{1, i * write_bytes % (kRegionBytes - write_bytes + 1), 2, off, write_bytes});
  }
  return ops;
}

Point MeasureEngine(Pair& p, uint64_t write_bytes, int batch_ops, double seconds) {
  const int kInFlight = 4;
  std::deque<std::pair<BatchId, absl::Time>> inflight;
  std::vector<double> lat_ms;
  uint64_t bytes = 0;
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::Seconds(seconds);
  uint64_t base = 0;
  auto reap = [&]() {
    auto [id, t0] = inflight.front();
    inflight.pop_front();
    auto s = p.sender->Wait(id, absl::InfiniteFuture());
    if (!s.ok() || s->state != BatchState::kCompleted) {
      std::fprintf(stderr, "kvtransfer_bench: batch failed: %s\n",
                   s.ok() ? std::string(s->error.message()).c_str() : "unknown");
      std::exit(3);
    }
    lat_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    bytes += s->bytes_total;
    (void)p.sender->Release(id);
  };
  while (absl::Now() < end || lat_ms.size() < 3) {
    if (static_cast<int>(inflight.size()) >= kInFlight) reap();
    auto ops = StridedOps(write_bytes, batch_ops, base);
    base += write_bytes;
    auto r = p.sender->Submit(p.peer, ops, {});
    if (!r.ok()) std::exit(3);
    if (!r->accepted) {
      reap();
      continue;
    }
    inflight.push_back({r->id, absl::Now()});
  }
  while (!inflight.empty()) reap();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  return Point{write_bytes, batch_ops, bytes / secs / 1e9, Percentile(lat_ms, 0.5),
               Percentile(lat_ms, 0.99)};
}

// One 2,048-token prompt, layer by layer; returns milliseconds first submit -> notified.
double KvPrompt(Pair& p, std::mt19937_64& rng) {
  constexpr int kLayers = 24, kTokens = 2048, kBlockTokens = 16;
  constexpr uint64_t kBlockBytes = kBlockTokens * 2 /*heads*/ * 64 /*dim*/ * 2 /*bf16*/;
  constexpr int kBlocks = kTokens / kBlockTokens;  // 128 per layer for K, 128 for V
  constexpr int kPoolBlocks = 1024;                // the decode side's pool per layer and K/V
  std::vector<int> pool(kPoolBlocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const absl::Time start = absl::Now();
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<WriteOp> ops;
    for (int kv = 0; kv < 2; ++kv) {
      for (int b = 0; b < kBlocks; ++b) {
        uint64_t src = ((layer * 2 + kv) * static_cast<uint64_t>(kBlocks) + b) * kBlockBytes;
        uint64_t dst =
            ((layer * 2 + kv) * static_cast<uint64_t>(kPoolBlocks) + pool[b]) * kBlockBytes;
        ops.push_back(WriteOp{1, src, 2, dst, kBlockBytes});
      }
    }
    SubmitOptions o;
    o.on_done = [](BatchId, const BatchStatus& s) {
      if (s.state != BatchState::kCompleted) std::exit(3);
    };
    auto r = p.sender->Submit(p.peer, ops, o);
    if (!r.ok() || !r->accepted) std::exit(3);
  }
  auto n = p.sender->Notify(p.peer, "room done", {});
  auto s = p.sender->Wait(*n, absl::InfiniteFuture());
  if (s->state != BatchState::kCompleted) std::exit(3);
  (void)p.sender->Release(*n);
  return absl::ToDoubleMilliseconds(absl::Now() - start);
}

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return argv[i + 1];
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string json_path = Flag(argc, argv, "json", "");
  const double secs = std::stod(Flag(argc, argv, "seconds-per-point", "0.4"));
  const int lanes = std::stoi(Flag(argc, argv, "lanes", "4"));
  const uint64_t slice = std::stoull(Flag(argc, argv, "slice-bytes", std::to_string(1 << 20)));
  nlohmann::json out;
  const std::vector<uint64_t> sizes = {4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

  std::printf("%-10s %-6s %10s %10s %8s %10s %10s\n", "write", "ops", "raw GB/s", "tcp GB/s",
              "ratio", "p50 ms", "p99 ms");
  auto pair = MakePair(lanes, slice);
  double raw_1mib = 0, tcp_1mib = 0;
  for (uint64_t size : sizes) {
    const double raw = RawTcpGbps(size, secs);
    for (int ops : {1, 16, 64}) {
      if (size * ops > (128ull << 20)) continue;
      Point pt = MeasureEngine(*pair, size, ops, secs);
      std::printf("%-10llu %-6d %10.2f %10.2f %8.2f %10.3f %10.3f\n",
                  static_cast<unsigned long long>(size), ops, raw, pt.gbps, pt.gbps / raw,
                  pt.p50_ms, pt.p99_ms);
      out["sweep"].push_back({{"write_bytes", size},
                              {"batch_ops", ops},
                              {"raw_tcp_gbps", raw},
                              {"tcp_gbps", pt.gbps},
                              {"ratio", pt.gbps / raw},
                              {"p50_ms", pt.p50_ms},
                              {"p99_ms", pt.p99_ms}});
      if (size == (1 << 20) && ops == 16) {
        raw_1mib = std::max(raw_1mib, raw);
        tcp_1mib = std::max(tcp_1mib, pt.gbps);
      }
    }
  }
  // The headline ratio: raw and ours alternate three times and each keeps its best, so that a
  // burst of load from other processes does not land on one side only.
  for (int round = 0; round < 3; ++round) {
    raw_1mib = std::max(raw_1mib, RawTcpGbps(1 << 20, secs));
    tcp_1mib = std::max(tcp_1mib, MeasureEngine(*pair, 1 << 20, 16, secs).gbps);
  }
  std::mt19937_64 rng(1);
  std::vector<double> kv_ms;
  for (int i = 0; i < 7; ++i) kv_ms.push_back(KvPrompt(*pair, rng));
  const double kv_med = Percentile(kv_ms, 0.5);
  const double kv_bytes = 24.0 * 2 * 128 * 4096;
  std::printf(
      "\nbest of 4 alternating runs: raw TCP 1 MiB: %.2f GB/s   tcp backend 1 MiB x16: "
      "%.2f GB/s   ratio %.3f\n",
      raw_1mib, tcp_1mib, tcp_1mib / raw_1mib);
  std::printf(
      "KV 2048-token prompt (24 layers, %.1f MiB, 6144 blocks of 4 KiB): median %.2f ms,"
      " %.2f GB/s (min %.2f ms over %zu runs)\n",
      kv_bytes / (1 << 20), kv_med, kv_bytes / (kv_med / 1e3) / 1e9,
      *std::min_element(kv_ms.begin(), kv_ms.end()), kv_ms.size());
  out["raw_tcp_gbps"] = raw_1mib;
  out["tcp_gbps_1mib"] = tcp_1mib;
  out["tcp_ratio_1mib"] = tcp_1mib / raw_1mib;
  out["kv2048_ms"] = kv_med;
  out["kv2048_ms_min"] = *std::min_element(kv_ms.begin(), kv_ms.end());
  out["kv2048_gbps"] = kv_bytes / (kv_med / 1e3) / 1e9;
  out["lanes"] = lanes;
  out["slice_bytes"] = slice;
  pair->sender->Shutdown();
  pair->receiver->Shutdown();
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(2) << "\n";
  }
  return 0;
}

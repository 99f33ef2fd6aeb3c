// KV events end to end: tandem-router --kv-events --policy cache_aware over two real prefill
// workers and a decode worker. The router's index follows each prefill worker's radix cache
// (its /metrics shows the blocks per worker), and requests sharing a prefix go to the worker
// whose cache holds it, decided from the events, and that worker's cache reuses it. A prefill
// worker restarted on the same port is a new incarnation: the router's index for it empties,
// resyncs from a snapshot, and routing follows what the new process caches. Evictions in a small
// cache are reflected block for block. A worker that never answers delays only its own index.
// Bounded waits only.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;

// Polls the router's /metrics until `metric` is at least `want` (up to 30 s).
bool WaitForMetricAtLeast(int port, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<double> v = MetricValue(HttpGet(port, "/metrics").body, metric);
    if (v.has_value() && *v >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

double Metric(int port, const std::string& metric) {
  return MetricValue(HttpGet(port, "/metrics").body, metric).value_or(0);
}

std::string Auth(const std::string& key) { return "Authorization: Bearer " + key + "\r\n"; }

double WorkerMetric(const WorkerProcess& w, const std::string& metric) {
  return MetricValue(HttpGet(w.http_port, "/metrics").body, metric).value_or(0);
}

// Polls the worker's /metrics until `metric` is at least `want` (up to 30 s).
bool WaitForWorkerMetricAtLeast(const WorkerProcess& w, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (WorkerMetric(w, metric) >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Polls the router's /metrics until `metric` equals `want` (up to 30 s).
bool WaitForMetricEq(int port, const std::string& metric, double want) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::optional<double> v = MetricValue(HttpGet(port, "/metrics").body, metric);
    if (v.has_value() && *v == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Until the router's /workers shows `url` healthy (up to 30 s).
bool WaitForHealthy(int port, const std::string& url) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = RouterRequest(port, "GET", "/workers", "", Auth(kTestAdminKey));
    const json states = json::parse(r.body, nullptr, false);
    if (states.is_object() && states.contains("workers")) {
      for (const json& s : states["workers"]) {
        if (s.value("url", "") == url && s.value("healthy", false)) return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::string Blocks(const WorkerProcess& w) {
  return "tandem_router_kv_index_blocks{worker=\"" + w.url() + "\"}";
}
std::string Synced(const WorkerProcess& w) {
  return "tandem_router_kv_index_synced{worker=\"" + w.url() + "\"}";
}
std::string Decided(const WorkerProcess& w) {
  return "tandem_router_policy_decisions_total{policy=\"cache_aware\",worker=\"" + w.url() + "\"}";
}

// A prompt of `group`'s 192-token prefix (12 blocks of 16) and 8 tokens of its own.
std::vector<int32_t> Prompt(int group, int k) {
  std::vector<int32_t> ids;
  for (int i = 0; i < 192; ++i) ids.push_back(100 + (group * 1000 + i) % 2900);
  for (int i = 0; i < 8; ++i) ids.push_back(2000 + 10 * k + i);
  return ids;
}

json Generate(const std::vector<int32_t>& ids) {
  return {{"input_ids", ids},
          {"sampling_params", {{"max_new_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}}}};
}

TEST(RouterKvEventsTest, SharedPrefixesGoToTheWorkerHoldingThem) {
  auto p0 = StartWorker("prefill");
  auto p1 = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--policy",
                   "cache_aware", "--kv-events", "--kv-events-poll-ms", "10", "--prefill",
                   p0->url(), std::to_string(p0->bootstrap_port), "--prefill", p1->url(),
                   std::to_string(p1->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(router, nullptr);
  const int port = router->port;
  for (const auto* w : {p0.get(), p1.get()}) {
    ASSERT_TRUE(
        WaitForMetricAtLeast(port, "tandem_router_kv_index_synced{worker=\"" + w->url() + "\"}", 1))
        << w->url() << " never synced";
  }

  // Two groups of prompts, each sharing a 192-token prefix (12 blocks of 16).
  for (int group = 0; group < 2; ++group) {
    std::vector<int32_t> prefix;
    for (int i = 0; i < 192; ++i) prefix.push_back(100 + group * 1000 + i);
    auto prompt = [&](int k) {
      std::vector<int32_t> ids = prefix;
      for (int i = 0; i < 8; ++i) ids.push_back(2000 + 10 * k + i);
      return ids;
    };
    auto blocks = [&](const WorkerProcess* w) {
      return "tandem_router_kv_index_blocks{worker=\"" + w->url() + "\"}";
    };
    const double blocks0 = Metric(port, blocks(p0.get())), blocks1 = Metric(port, blocks(p1.get()));
    auto r = RouterRequest(port, "POST", "/generate", Generate(prompt(0)).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    // The worker that got it: the one whose indexed blocks grow by the prefix's 12 (no other
    // request runs meanwhile).
    std::string holder;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (holder.empty() && std::chrono::steady_clock::now() < deadline) {
      if (Metric(port, blocks(p0.get())) >= blocks0 + 12) holder = p0->url();
      if (Metric(port, blocks(p1.get())) >= blocks1 + 12) holder = p1->url();
      if (holder.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(holder.empty()) << HttpGet(port, "/metrics").body;
    const std::string decided =
        "tandem_router_policy_decisions_total{policy=\"cache_aware\",worker=\"" + holder + "\"}";
    const double before = Metric(port, decided);
    const WorkerProcess* holding = holder == p0->url() ? p0.get() : p1.get();
    const double reused_before = MetricValue(HttpGet(holding->http_port, "/metrics").body,
                                             "tandem_engine_cached_prompt_tokens_total")
                                     .value_or(0);
    const double from_events =
        Metric(port, "tandem_router_cache_aware_source_total{source=\"events\"}");
    for (int k = 1; k <= 4; ++k) {
      auto rk = RouterRequest(port, "POST", "/generate", Generate(prompt(k)).dump());
      ASSERT_EQ(rk.status, 200) << rk.body;
    }
    EXPECT_EQ(Metric(port, decided), before + 4) << HttpGet(port, "/metrics").body;
    // And that worker's radix cache really reused the prefix each time (read until it shows: the
    // engine publishes its counters after a scheduler step, which may follow the answer).
    EXPECT_TRUE(WaitForWorkerMetricAtLeast(*holding, "tandem_engine_cached_prompt_tokens_total",
                                           reused_before + 4 * 192))
        << WorkerMetric(*holding, "tandem_engine_cached_prompt_tokens_total");
    EXPECT_GE(Metric(port, "tandem_router_cache_aware_source_total{source=\"events\"}"),
              from_events + 4);
  }
}

TEST(RouterKvEventsTest, RestartedWorkerIsResyncedAndRoutedToFromItsNewCache) {
  auto p0 = StartWorker("prefill");
  auto p1 = StartWorker("prefill");
  auto decode = StartWorker("decode");
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--policy",
                   "cache_aware", "--kv-events", "--kv-events-poll-ms", "10", "--prefill",
                   p0->url(), std::to_string(p0->bootstrap_port), "--prefill", p1->url(),
                   std::to_string(p1->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(router, nullptr);
  const int port = router->port;
  for (const auto* w : {p0.get(), p1.get()}) {
    ASSERT_TRUE(WaitForMetricAtLeast(port, Synced(*w), 1)) << w->url() << " never synced";
  }
  // Group 0 lands on one worker (the holder), group 1 then on the other (fewer cached blocks).
  ASSERT_EQ(RouterRequest(port, "POST", "/generate", Generate(Prompt(0, 0)).dump()).status, 200);
  WorkerProcess* holder = nullptr;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (holder == nullptr && std::chrono::steady_clock::now() < deadline) {
    if (Metric(port, Blocks(*p0)) >= 12) holder = p0.get();
    if (Metric(port, Blocks(*p1)) >= 12) holder = p1.get();
    if (holder == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(holder, nullptr) << HttpGet(port, "/metrics").body;
  WorkerProcess* other = holder == p0.get() ? p1.get() : p0.get();
  ASSERT_EQ(RouterRequest(port, "POST", "/generate", Generate(Prompt(1, 0)).dump()).status, 200);
  ASSERT_TRUE(WaitForMetricAtLeast(port, Blocks(*other), 12)) << HttpGet(port, "/metrics").body;
  const double holder_blocks = Metric(port, Blocks(*holder));

  // Same port, new process: its cache is empty and its events another incarnation.
  std::string why;
  ASSERT_TRUE(holder->Restart(&why)) << why;
  ASSERT_TRUE(WaitForMetricEq(port, Blocks(*holder), 0))
      << "the index kept " << holder_blocks << " blocks of a restarted worker:\n"
      << HttpGet(port, "/metrics").body;
  ASSERT_TRUE(WaitForMetricEq(port, Synced(*holder), 1)) << HttpGet(port, "/metrics").body;
  ASSERT_TRUE(WaitForHealthy(port, holder->url()));

  // Group 0 is cached nowhere now: it goes to the emptier restarted worker, whose new cache then
  // serves the next one (the events of the new incarnation, or the request pending there).
  // (A first leg may find the router's old channel to the restarted worker and be retried: count
  // decisions as at least one per request, and none for the other worker.)
  const double decided_before = Metric(port, Decided(*holder));
  const double other_decided = Metric(port, Decided(*other));
  for (int k = 1; k <= 3; ++k) {
    auto r = RouterRequest(port, "POST", "/generate", Generate(Prompt(0, k)).dump());
    ASSERT_EQ(r.status, 200) << r.body;
  }
  EXPECT_GE(Metric(port, Decided(*holder)), decided_before + 3) << HttpGet(port, "/metrics").body;
  EXPECT_EQ(Metric(port, Decided(*other)), other_decided) << HttpGet(port, "/metrics").body;
  EXPECT_TRUE(
      WaitForWorkerMetricAtLeast(*holder, "tandem_engine_cached_prompt_tokens_total", 2 * 192));
  EXPECT_TRUE(WaitForMetricAtLeast(port, Blocks(*holder), 12));
  // Group 1 still follows the worker that kept it.
  const double other_before = Metric(port, Decided(*other));
  ASSERT_EQ(RouterRequest(port, "POST", "/generate", Generate(Prompt(1, 1)).dump()).status, 200);
  EXPECT_EQ(Metric(port, Decided(*other)), other_before + 1);
}

TEST(RouterKvEventsTest, EvictionsAreReflectedBlockForBlock) {
  // A cache of about 100 blocks: 16 prompts of 12 full blocks each evict the oldest.
  auto p0 = StartWorker("prefill", {"--kv-cache-memory", "1MiB"});
  auto decode = StartWorker("decode");
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--policy",
                   "cache_aware", "--kv-events", "--kv-events-poll-ms", "10", "--prefill",
                   p0->url(), std::to_string(p0->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(router, nullptr);
  const int port = router->port;
  ASSERT_TRUE(WaitForMetricAtLeast(port, Synced(*p0), 1));
  const double total = WorkerMetric(*p0, "tandem_engine_kv_total_blocks");
  ASSERT_GT(total, 0);
  ASSERT_LT(total, 16 * 13) << "the cache must be too small for every prompt";
  for (int group = 0; group < 16; ++group) {
    auto r = RouterRequest(port, "POST", "/generate", Generate(Prompt(group, 0)).dump());
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Quiet now: the router's index holds exactly the blocks the worker's cache holds (both read
  // until they agree: the worker publishes its gauges after a scheduler step).
  double cached = -1, indexed = -2;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (cached != indexed && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cached = WorkerMetric(*p0, "tandem_engine_radix_cached_blocks");
    indexed = Metric(port, Blocks(*p0));
  }
  EXPECT_EQ(indexed, cached);
  EXPECT_GT(cached, 0);
  EXPECT_LE(cached, total);
  EXPECT_GE(WorkerMetric(*p0, "tandem_engine_radix_evicted_blocks_total"), 16 * 12 - total);
  // The first prompt's blocks were evicted: asking again reuses nothing, as predicted.
  const double reused = WorkerMetric(*p0, "tandem_engine_cached_prompt_tokens_total");
  const double prompts = WorkerMetric(*p0, "tandem_engine_prompt_tokens_total");
  ASSERT_EQ(RouterRequest(port, "POST", "/generate", Generate(Prompt(0, 1)).dump()).status, 200);
  ASSERT_TRUE(WaitForWorkerMetricAtLeast(*p0, "tandem_engine_prompt_tokens_total", prompts + 200));
  EXPECT_EQ(WorkerMetric(*p0, "tandem_engine_cached_prompt_tokens_total"), reused);
}

// A loopback port that accepts connections (the kernel's backlog) and never answers: a worker
// hung or behind a black-holing network. Closed on destruction.
class SilentPort {
 public:
  SilentPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(fd_, 64) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPort() {
    if (fd_ >= 0) close(fd_);
  }
  SilentPort(const SilentPort&) = delete;
  SilentPort& operator=(const SilentPort&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A prefill worker that never answers (each call to it waits out its 5 s deadline) does not hold
// up the index of the one that does: a new prefix is indexed well within that time, every time.
TEST(RouterKvEventsTest, SilentWorkerDoesNotDelayTheOthersIndex) {
  SilentPort silent;
  ASSERT_GT(silent.port(), 0);
  auto p0 = StartWorker("prefill");
  auto decode = StartWorker("decode");
  const std::string silent_url = "http://127.0.0.1:" + std::to_string(silent.port());
  auto router =
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--policy",
                   "cache_aware", "--kv-events", "--kv-events-poll-ms", "10", "--prefill",
                   silent_url, std::to_string(FreePort()), "--prefill", p0->url(),
                   std::to_string(p0->bootstrap_port), "--decode", decode->url()});
  ASSERT_NE(router, nullptr);
  const int port = router->port;
  ASSERT_TRUE(WaitForMetricAtLeast(port, Synced(*p0), 1));
  for (int group = 0; group < 3; ++group) {
    const double before = Metric(port, Blocks(*p0));
    ASSERT_EQ(RouterRequest(port, "POST", "/generate", Generate(Prompt(group, 0)).dump()).status,
              200);
    const auto answered = std::chrono::steady_clock::now();
    bool indexed = false;
    while (!indexed && std::chrono::steady_clock::now() - answered < std::chrono::seconds(2)) {
      indexed = Metric(port, Blocks(*p0)) >= before + 12;
      if (!indexed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(indexed) << "group " << group << " was not indexed within 2 s";
  }
  EXPECT_EQ(Metric(port, "tandem_router_kv_index_synced{worker=\"" + silent_url + "\"}"), 0);
}

}  // namespace
}  // namespace tandem::itest

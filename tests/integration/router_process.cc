#include "tests/integration/router_process.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/common/http_test_client.h"

namespace tandem::itest {

void RouterProcess::Kill() {
  process->Signal(SIGKILL);
  process->Wait(std::chrono::seconds(10));
}

bool RouterProcess::Launch(std::string* why) {
  process = std::make_unique<Process>(argv);
  if (WaitForHttp(port, "/health", 200, std::chrono::seconds(60))) return true;
  if (why != nullptr) *why = process->Output();
  return false;
}

std::unique_ptr<RouterProcess> StartRouter(const std::vector<std::string>& extra) {
  auto r = std::make_unique<RouterProcess>();
  r->port = FreePort();
  std::vector<std::string>& argv = r->argv;
  argv = {BinaryPath("tandem-router"),
          "--port",
          std::to_string(r->port),
          "--model-path",
          SourcePath("models/tandem-tiny-english"),
          "--health-check-interval-secs",
          "1",
          "--health-success-threshold",
          "1",
          "--health-failure-threshold",
          "1",
          "--worker-load-check-interval",
          "1",
          "--retry-initial-backoff-ms",
          "20",
          "--request-timeout-secs",
          "60",
          "--policy",
          "round_robin"};
  // The admin API is closed without a key; tests that exercise other admin setups say so.
  const bool own_admin = std::find_if(extra.begin(), extra.end(), [](const std::string& a) {
                           return a == "--admin-key-file" || a == "--disable-admin-auth";
                         }) != extra.end();
  if (!own_admin) argv.insert(argv.end(), {"--admin-key", kTestAdminKey});
  // Only a default is replaced: repeated flags (--prefill, --decode) are all kept.
  const size_t defaults = argv.size();
  for (size_t i = 0; i < extra.size(); ++i) {
    auto given = std::find(argv.begin() + 1, argv.begin() + defaults, extra[i]);
    if (given != argv.begin() + defaults && i + 1 < extra.size() &&
        extra[i + 1].rfind("--", 0) != 0) {
      *(given + 1) = extra[++i];
    } else {
      argv.push_back(extra[i]);
    }
  }
  std::string why;
  EXPECT_TRUE(r->Launch(&why)) << "tandem-router did not come up:\n" << why;
  return r;
}

std::optional<double> MetricValue(const std::string& text, const std::string& metric) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#' || line.rfind(metric, 0) != 0) continue;
    const char next = line.size() > metric.size() ? line[metric.size()] : '\0';
    // `metric` must be the whole name (or the whole name and a label prefix).
    if (metric.back() != '"' && metric.back() != ',' && next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) return std::nullopt;
    char* end = nullptr;
    const std::string value = line.substr(space + 1);
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str()) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

bool WaitForAllKvBlocksFree(int router_port, const std::string& admin_key, int worker_http_port,
                            std::string* why) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    testing::TestClient flush(static_cast<uint16_t>(router_port), 30);
    flush.SendRequest("POST", "/flush_cache", "",
                      "Authorization: Bearer " + admin_key + "\r\nConnection: close\r\n");
    flush.ReadResponse();
    const std::string metrics = HttpGet(worker_http_port, "/metrics").body;
    const std::optional<double> free = MetricValue(metrics, "tandem_engine_kv_free_blocks");
    const std::optional<double> total = MetricValue(metrics, "tandem_engine_kv_total_blocks");
    *why = "free " + (free ? std::to_string(*free) : "?") + " of " +
           (total ? std::to_string(*total) : "?");
    if (free && total && *total > 0 && *free == *total) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

testing::ClientResponse RouterRequest(int port, const std::string& method,
                                      const std::string& target, const std::string& body,
                                      const std::string& headers) {
  testing::TestClient c(static_cast<uint16_t>(port), 60);
  EXPECT_TRUE(c.connected());
  EXPECT_TRUE(c.SendRequest(method, target, body,
                            "Content-Type: application/json\r\nConnection: close\r\n" + headers));
  std::optional<testing::ClientResponse> r = c.ReadResponse();
  EXPECT_TRUE(r.has_value()) << method << " " << target;
  return r.value_or(testing::ClientResponse{});
}

std::vector<nlohmann::json> SseEvents(const std::string& body, bool* done) {
  std::vector<nlohmann::json> events;
  *done = false;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      *done = true;
      continue;
    }
    events.push_back(nlohmann::json::parse(data));
  }
  return events;
}

}  // namespace tandem::itest

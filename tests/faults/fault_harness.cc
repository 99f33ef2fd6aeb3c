#include "tests/faults/fault_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/common/http_test_client.h"
#include "tests/integration/router_process.h"

namespace tandem::itest::faults {
namespace {

using nlohmann::json;
using testing::TestClient;

// The error message of an `{"error":{"message":...}}` body, "" if it is not one.
std::string ErrorMessage(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return "";
}

// Folds the SSE events of `chunk` ("data: {...}\n\n" lines) into `r`.
void ReadEvents(const std::string& chunk, CallResult* r, bool* saw_token) {
  size_t at = 0;
  while ((at = chunk.find("data: ", at)) != std::string::npos) {
    size_t end = chunk.find("\n\n", at);
    if (end == std::string::npos) end = chunk.size();
    const std::string data = chunk.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      r->done = true;
      continue;
    }
    json e = json::parse(data, nullptr, false);
    if (e.is_discarded()) {
      r->error = "unparsable SSE event: " + data;
      continue;
    }
    if (std::string m = ErrorMessage(data); !m.empty()) r->error = m;
    if (e.contains("output_ids")) {
      r->output_ids = e["output_ids"];
      *saw_token = true;
    }
  }
}

HttpReply Post(int port, const std::string& method, const std::string& target,
               const std::string& body, const std::string& extra_headers = "") {
  TestClient c(static_cast<uint16_t>(port), 30);
  HttpReply reply;
  if (!c.connected() ||
      !c.SendRequest(method, target, body,
                     "Content-Type: application/json\r\nConnection: close\r\n" + extra_headers)) {
    return reply;
  }
  std::optional<testing::ClientResponse> r = c.ReadResponse();
  if (!r) return reply;
  reply.status = r->status;
  reply.body = r->body;
  return reply;
}

}  // namespace

CallResult Generate(int port, const json& body, const std::function<void()>& on_first_chunk) {
  const auto start = std::chrono::steady_clock::now();
  CallResult r;
  // Connection: close, so the response ends at EOF; every read waits at most the deadline.
  std::string raw;
  const int fd = ConnectLoopback(port, kClientDeadlineSecs);
  const std::string payload = body.dump();
  const std::string request =
      "POST /generate HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
      "Connection: close\r\nContent-Length: " +
      std::to_string(payload.size()) + "\r\n\r\n" + payload;
  if (fd >= 0 && ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                     static_cast<ssize_t>(request.size())) {
    bool first_reported = false;
    char buf[16384];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) r.timed_out = true;
      if (n <= 0) break;
      raw.append(buf, static_cast<size_t>(n));
      if (!first_reported && on_first_chunk && raw.find("\"output_ids\"") != std::string::npos) {
        first_reported = true;
        on_first_chunk();
      }
    }
  }
  if (fd >= 0) ::close(fd);
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  r.timed_out |= r.elapsed >= std::chrono::seconds(kClientDeadlineSecs);
  const size_t head_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string::npos) return r;
  r.status = std::atoi(raw.substr(9, 3).c_str());
  std::string head = raw.substr(0, head_end);
  for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const std::string content = raw.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") == std::string::npos) {
    const size_t at = head.find("content-length: ");
    const size_t size = at == std::string::npos ? content.size() : std::stoul(head.substr(at + 16));
    r.complete = content.size() >= size;
    r.body = content.substr(0, size);
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_discarded() && j.is_object() && j.contains("output_ids"))
      r.output_ids = j["output_ids"];
    r.error = ErrorMessage(r.body);
    return r;
  }
  size_t at = 0;
  bool saw_token = false;
  while (at < content.size()) {
    const size_t line_end = content.find("\r\n", at);
    if (line_end == std::string::npos) break;
    const size_t size = std::strtoul(content.substr(at, line_end - at).c_str(), nullptr, 16);
    if (size == 0) {
      r.complete = true;
      break;
    }
    if (line_end + 2 + size > content.size()) break;  // cut mid-chunk
    r.body += content.substr(line_end + 2, size);
    at = line_end + 2 + size + 2;
  }
  ReadEvents(r.body, &r, &saw_token);
  return r;
}

json GreedyBody(int i, int max_new, bool stream) {
  return {
      {"text", "Fortune number " + std::to_string(i) + ": tell me about the sea."},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new}, {"ignore_eos", true}}},
      {"stream", stream}};
}

json LongPromptBody(int i, int n_tokens, int max_new) {
  json body = {
      {"input_ids", json::array()},
      {"sampling_params", {{"temperature", 0}, {"max_new_tokens", max_new}, {"ignore_eos", true}}}};
  for (int k = 0; k < n_tokens; ++k) body["input_ids"].push_back(10 + (k * 37 + i * 11) % 3000);
  return body;
}

std::string Tally::Add(const CallResult& r, const json& expected, bool drop_allowed) {
  ++requests;
  const std::string seen = "status " + std::to_string(r.status) + " after " +
                           std::to_string(r.elapsed.count()) + " ms: " + r.body.substr(0, 400);
  if (r.timed_out) {
    ++wrong;
    return "hung past the " + std::to_string(kClientDeadlineSecs) + " s deadline; " + seen;
  }
  if (r.status == 200 && r.complete && r.error.empty() && !r.output_ids.is_null() &&
      (r.body.find("data: ") == std::string::npos || r.done)) {
    if (!expected.is_null() && r.output_ids != expected) {
      ++wrong;
      return "succeeded with output " + r.output_ids.dump() + " instead of " + expected.dump();
    }
    ++ok;
    return "";
  }
  if (r.status >= 400 && !r.error.empty()) {
    ++errors;
    return "";
  }
  if (r.status == 200 && !r.error.empty()) {  // the stream had started; its error event ends it
    ++errors;
    return "";
  }
  if (!r.complete && drop_allowed) {
    ++dropped;
    return "";
  }
  ++wrong;
  return "neither a success nor a clear error; " + seen;
}

void Tally::Print(const std::string& test) const {
  std::printf(
      "[fault-summary] %s: faults_injected=%d requests=%d succeeded=%d clear_errors=%d "
      "dropped_connections=%d wrong_or_hung=%d router_retries=%d\n",
      test.c_str(), faults, requests, ok, errors, dropped, wrong, retries);
  std::fflush(stdout);
}

std::vector<json> ReferenceOutputs(int router_port, const std::vector<json>& bodies) {
  std::vector<json> out;
  for (json body : bodies) {
    body["stream"] = false;
    CallResult r = Generate(router_port, body);
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_FALSE(r.output_ids.is_null()) << r.body;
    out.push_back(r.output_ids);
  }
  return out;
}

HttpReply RouterAdmin(int router_port, const std::string& method, const std::string& target,
                      const std::string& body) {
  return Post(router_port, method, target, body,
              std::string("Authorization: Bearer ") + kTestAdminKey + "\r\n");
}

bool BlocksFreeEqualTotal(int router_port, const WorkerProcess& w, std::string* why) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    RouterAdmin(router_port, "POST", "/flush_cache");
    const HttpReply m = HttpGet(w.http_port, "/metrics");
    const auto free = MetricValue(m.body, "tandem_engine_kv_free_blocks");
    const auto total = MetricValue(m.body, "tandem_engine_kv_total_blocks");
    *why = w.role + " worker on " + w.url() + ": free " + (free ? std::to_string(*free) : "?") +
           " of " + (total ? std::to_string(*total) : "?") + " KV blocks";
    if (free && total && *total > 0 && *free == *total) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool HealthConverges(int router_port, const std::map<std::string, bool>& healthy,
                     std::string* why) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const HttpReply r = RouterAdmin(router_port, "GET", "/workers");
    *why = r.body;
    json j = json::parse(r.body, nullptr, false);
    if (r.status == 200 && !j.is_discarded() && j.contains("workers") &&
        j["workers"].size() == healthy.size()) {
      bool all = true;
      for (const json& w : j["workers"]) {
        auto want = healthy.find(w.value("url", ""));
        all &= want != healthy.end() && w.value("healthy", !want->second) == want->second;
      }
      if (all) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

double Metric(int http_port, const std::string& metric) {
  return MetricValue(HttpGet(http_port, "/metrics").body, metric).value_or(-1);
}

SecretFile::SecretFile() {
  char path[] = "/tmp/tandem-fault-secret-XXXXXX";
  const int fd = mkstemp(path);
  if (fd >= 0) {
    const std::string line = std::string(kTestClusterSecret) + "\n";
    EXPECT_EQ(write(fd, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    close(fd);
  }
  path_ = path;
}

SecretFile::~SecretFile() { unlink(path_.c_str()); }

}  // namespace tandem::itest::faults

#include "tests/badinput/background_load.h"

#include <chrono>
#include <optional>
#include <utility>

#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"

namespace tandem::itest {
namespace {

using nlohmann::json;
using testing::ClientResponse;
using testing::TestClient;

constexpr int kMaxNewTokens = 8;

struct Kind {
  const char* route;
  bool stream;
};
constexpr Kind kKinds[] = {{"/generate", false},
                           {"/generate", true},
                           {"/v1/completions", false},
                           {"/v1/chat/completions", true},
                           {"/v1/chat/completions", false},
                           {"/v1/completions", true}};

json Body(const Kind& kind, int n) {
  const std::string prompt = "Fortune number " + std::to_string(n) + " for a calm sea:";
  if (std::string(kind.route) == "/generate") {
    return {{"text", prompt},
            {"sampling_params",
             {{"temperature", 0}, {"max_new_tokens", kMaxNewTokens}, {"ignore_eos", true}}},
            {"stream", kind.stream}};
  }
  json body = {{"model", "tandem-tiny-english"},
               {"max_tokens", kMaxNewTokens},
               {"temperature", 0},
               {"ignore_eos", true},
               {"stream", kind.stream}};
  if (std::string(kind.route) == "/v1/completions") {
    body["prompt"] = prompt;
  } else {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  }
  return body;
}

}  // namespace

BackgroundLoad::BackgroundLoad(const std::vector<int>& ports, std::string api_key)
    : api_key_(std::move(api_key)) {
  for (size_t i = 0; i < ports.size(); ++i) {
    threads_.emplace_back([this, port = ports[i], i] { Run(port, static_cast<int>(i)); });
  }
}

BackgroundLoad::~BackgroundLoad() { Stop(); }

void BackgroundLoad::Stop() {
  stop_ = true;
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

std::vector<std::string> BackgroundLoad::failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failures_;
}

void BackgroundLoad::Run(int port, int seed) {
  for (int n = seed; !stop_; n += 1) {
    ++sent_;
    std::string error = SendOne(port, n);
    if (error.empty()) {
      ++succeeded_;
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      failures_.push_back(std::move(error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string BackgroundLoad::SendOne(int port, int n) const {
  const Kind& kind = kKinds[n % (sizeof(kKinds) / sizeof(kKinds[0]))];
  const std::string what =
      "port " + std::to_string(port) + " " + kind.route + (kind.stream ? " (stream)" : "") + ": ";
  // Generous: the machine is shared and the suite loads it on purpose.
  TestClient client(static_cast<uint16_t>(port), 120);
  if (!client.connected()) return what + "cannot connect";
  if (!client.SendRequest("POST", kind.route, Body(kind, n).dump(),
                          "Content-Type: application/json\r\nConnection: close\r\n"
                          "Authorization: Bearer " +
                              api_key_ + "\r\n")) {
    return what + "send failed";
  }
  std::optional<ClientResponse> r = client.ReadResponse();
  if (!r) return what + "no complete response";
  if (r->status != 200) return what + std::to_string(r->status) + " " + r->body;
  if (kind.stream) {
    if (r->body.find("data: [DONE]") == std::string::npos ||
        r->body.find("\"error\"") != std::string::npos) {
      return what + "stream did not end well: " + r->body;
    }
    return "";
  }
  const json body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return what + "not JSON: " + r->body;
  const json& usage = body.contains("usage") ? body["usage"] : body["meta_info"];
  if (!usage.is_object() || usage.value("completion_tokens", -1) != kMaxNewTokens) {
    return what + "wrong completion_tokens: " + r->body;
  }
  return "";
}

}  // namespace tandem::itest

// The HTTP server test fixture shared by http_server_test.cc and http_server_stream_test.cc: a
// server on an ephemeral loopback port with the standard routes (/health, /metrics), /echo for
// GET and POST, and any routes a test adds before StartServer().
#ifndef TANDEM_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_
#define TANDEM_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/daemon.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/common/http_test_client.h"

namespace tandem::testing {

class Signal {
 public:
  void Notify() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  bool WaitFor(std::chrono::seconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.host = "127.0.0.1";
    options.port = 0;
    if (options.threads == 1) options.threads = 2;
    server_ = std::make_unique<HttpServer>(options);
    AddStandardRoutes(*server_, registry_, [this](std::function<void(absl::Status)> done) {
      absl::Status health;
      {
        std::lock_guard<std::mutex> lock(health_mu_);
        health = health_;
      }
      done(health);
    });
    server_->Handle("GET", "/echo", [](HttpRequest request, HttpResponder responder) {
      nlohmann::json query = nlohmann::json::array();
      for (const auto& [name, value] : request.query) query.push_back({name, value});
      nlohmann::json body = {{"method", request.method},
                             {"path", request.path},
                             {"query", query},
                             {"peer", request.peer},
                             {"host", request.Header("HOST").value_or("")}};
      responder.Send(HttpResponse::Json(200, body.dump()));
    });
    server_->Handle("POST", "/echo", [](HttpRequest request, HttpResponder responder) {
      responder.Send(HttpResponse::Text(200, request.body));
    });
    for (auto& route : extra_routes_) {
      server_->Handle(route.method, route.path, route.handler, route.head_check);
    }
    for (const std::string& path : same_origin_paths_) server_->KeepSameOrigin(path);
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
  }

  void AddRoute(std::string method, std::string path, HttpHandler handler,
                HttpHeadCheck head_check = nullptr) {
    extra_routes_.push_back(
        {std::move(method), std::move(path), std::move(handler), std::move(head_check)});
  }

  std::optional<ClientResponse> Get(const std::string& target) {
    TestClient client(server_->port());
    if (!client.SendRequest("GET", target)) return std::nullopt;
    return client.ReadResponse();
  }

  struct Route {
    std::string method, path;
    HttpHandler handler;
    HttpHeadCheck head_check;
  };
  MetricsRegistry registry_;
  std::mutex health_mu_;
  absl::Status health_ = absl::OkStatus();
  std::vector<Route> extra_routes_;
  std::vector<std::string> same_origin_paths_;  // HttpServer::KeepSameOrigin at start
  std::unique_ptr<HttpServer> server_;
};

inline nlohmann::json ParseJson(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tandem::testing

#endif  // TANDEM_TESTS_COMMON_HTTP_SERVER_FIXTURE_H_

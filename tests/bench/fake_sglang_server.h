// A test double of an SGLang server for tandem-bench's tests: POST /generate (SGLang-native,
// cumulative "text" + meta_info.completion_tokens per event, then "data: [DONE]"),
// POST /v1/completions and /v1/chat/completions (OpenAI chunks, a usage chunk when asked), and
// GET /v1/models, POST /flush_cache (counted). Each answer is produced by its own thread that
// writes one token per `token_interval`, so timings look like a real stream. It counts what it
// served, so tests can compare the benchmark's table with the server's own numbers.
//
// Thread-safe. Stop() (or the destructor) stops the HTTP server and joins the producers.
#ifndef TANDEM_TESTS_BENCH_FAKE_SGLANG_SERVER_H_
#define TANDEM_TESTS_BENCH_FAKE_SGLANG_SERVER_H_

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/http_server.h"
#include "nlohmann/json.hpp"

namespace tandem::bench::testing {

class FakeSglangServer {
 public:
  struct Options {
    std::chrono::milliseconds token_interval{1};
    // Requests are held (not answered) until this many are in flight at once, or until
    // `gather_timeout` passes; 0 answers at once. Lets tests see the client's concurrency.
    int gather = 0;
    std::chrono::milliseconds gather_timeout{3000};
    int fail_every = 0;  // every n-th request gets a 500 (0: never)
  };

  explicit FakeSglangServer(Options options) : options_(options), server_(ServerOptions()) {
    server_.Handle("POST", "/generate", [this](HttpRequest r, HttpResponder w) {
      Serve(std::move(r), std::move(w), Kind::kGenerate);
    });
    server_.Handle("POST", "/v1/completions", [this](HttpRequest r, HttpResponder w) {
      Serve(std::move(r), std::move(w), Kind::kCompletions);
    });
    server_.Handle("POST", "/v1/chat/completions", [this](HttpRequest r, HttpResponder w) {
      Serve(std::move(r), std::move(w), Kind::kChat);
    });
    server_.Handle("POST", "/flush_cache", [this](HttpRequest, HttpResponder w) {
      {
        absl::MutexLock lock(&mu_);
        ++flushes_;
      }
      w.Send(HttpResponse::Json(200, "{}"));
    });
    server_.Handle("GET", "/v1/models", [](HttpRequest, HttpResponder w) {
      w.Send(HttpResponse::Json(200, R"({"object":"list","data":[{"id":"fake-model"}]})"));
    });
  }
  ~FakeSglangServer() { Stop(); }
  FakeSglangServer(const FakeSglangServer&) = delete;
  FakeSglangServer& operator=(const FakeSglangServer&) = delete;

  absl::Status Start() { return server_.Start(); }
  uint16_t port() const { return server_.port(); }
  void Stop() {
    server_.Stop();
    std::vector<std::thread> producers;
    {
      absl::MutexLock lock(&mu_);
      producers.swap(producers_);
    }
    for (auto& t : producers) t.join();
  }

  int requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  long long tokens_sent() const {
    absl::MutexLock lock(&mu_);
    return tokens_sent_;
  }
  int max_in_flight() const {
    absl::MutexLock lock(&mu_);
    return max_in_flight_;
  }
  std::vector<std::string> prompts() const {
    absl::MutexLock lock(&mu_);
    return prompts_;
  }
  // The last request body received, and the number of /flush_cache calls.
  nlohmann::json last_body() const {
    absl::MutexLock lock(&mu_);
    return last_body_;
  }
  int flushes() const {
    absl::MutexLock lock(&mu_);
    return flushes_;
  }

 private:
  enum class Kind { kGenerate, kCompletions, kChat };

  static HttpServerOptions ServerOptions() {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.threads = 2;
    return options;
  }

  void Serve(HttpRequest request, HttpResponder responder, Kind kind) {
    auto body = nlohmann::json::parse(request.body, nullptr, false);
    if (!body.is_object()) {
      responder.Send(HttpResponse::Error(400, "body is not a JSON object"));
      return;
    }
    int max_tokens = kind == Kind::kGenerate ? body["sampling_params"].value("max_new_tokens", 16)
                     : body.contains("max_completion_tokens")
                         ? body.value("max_completion_tokens", 16)
                         : body.value("max_tokens", 16);
    bool stream = body.value("stream", false);
    bool usage =
        body.contains("stream_options") && body["stream_options"].value("include_usage", false);
    std::string prompt = kind == Kind::kGenerate      ? body.value("text", "")
                         : kind == Kind::kCompletions ? body.value("prompt", "")
                                                      : body["messages"][0].value("content", "");
    int number;
    {
      absl::MutexLock lock(&mu_);
      number = ++requests_;
      prompts_.push_back(prompt);
      last_body_ = body;
      ++in_flight_;
      max_in_flight_ = std::max(max_in_flight_, in_flight_);
      producers_.emplace_back([this, kind, max_tokens, stream, usage, number,
                               responder = std::move(responder)]() mutable {
        Produce(kind, max_tokens, stream, usage, number, std::move(responder));
      });
    }
  }

  void Produce(Kind kind, int max_tokens, bool stream, bool usage, int number,
               HttpResponder responder) {
    {
      absl::MutexLock lock(&mu_);
      auto enough = [this] { return in_flight_ >= options_.gather; };
      mu_.AwaitWithTimeout(absl::Condition(&enough),
                           absl::Milliseconds(options_.gather_timeout.count()));
    }
    auto finish = [this](int tokens) {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      tokens_sent_ += tokens;
    };
    if (options_.fail_every > 0 && number % options_.fail_every == 0) {
      finish(0);
      responder.Send(HttpResponse::Error(500, "injected failure"));
      return;
    }
    std::string text;
    if (!stream) {
      for (int i = 0; i < max_tokens; ++i) text += " luck";
      nlohmann::json answer;
      if (kind == Kind::kGenerate) {
        answer = {{"text", text}, {"meta_info", {{"completion_tokens", max_tokens}}}};
      } else {
        answer = {{"choices", {Choice(kind, text, false)}},
                  {"usage", {{"completion_tokens", max_tokens}}}};
      }
      finish(max_tokens);
      responder.Send(HttpResponse::Json(200, answer.dump()));
      return;
    }
    HttpStreamPtr out = responder.StartStream(200, "text/event-stream");
    for (int i = 1; i <= max_tokens; ++i) {
      std::this_thread::sleep_for(options_.token_interval);
      nlohmann::json event;
      if (kind == Kind::kGenerate) {
        text += " luck";
        event = {{"text", text}, {"meta_info", {{"completion_tokens", i}}}};
      } else {
        event = {{"choices", {Choice(kind, " luck", true)}}};
      }
      out->Write("data: " + event.dump() + "\n\n");
    }
    if (usage && kind != Kind::kGenerate) {
      nlohmann::json event = {{"choices", nlohmann::json::array()},
                              {"usage", {{"completion_tokens", max_tokens}}}};
      out->Write("data: " + event.dump() + "\n\n");
    }
    out->Write("data: [DONE]\n\n");
    finish(max_tokens);
    out->Finish();
  }

  static nlohmann::json Choice(Kind kind, const std::string& text, bool streamed) {
    if (kind == Kind::kChat) {
      return {{"index", 0}, {streamed ? "delta" : "message", {{"content", text}}}};
    }
    return {{"index", 0}, {"text", text}};
  }

  const Options options_;
  HttpServer server_;
  mutable absl::Mutex mu_;
  std::vector<std::thread> producers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> prompts_ ABSL_GUARDED_BY(mu_);
  int requests_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int max_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  long long tokens_sent_ ABSL_GUARDED_BY(mu_) = 0;
  nlohmann::json last_body_ ABSL_GUARDED_BY(mu_);
  int flushes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tandem::bench::testing

#endif  // TANDEM_TESTS_BENCH_FAKE_SGLANG_SERVER_H_

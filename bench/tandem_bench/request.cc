#include "bench/tandem_bench/request.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using Json = nlohmann::json;

constexpr size_t kErrorBodyQuote = 300;  // bytes of an error body quoted in RequestOutput

std::string Quote(std::string_view body) {
  std::string text(body.substr(0, kErrorBodyQuote));
  if (body.size() > kErrorBodyQuote) text += "...";
  return text;
}

// The "completion_tokens" under `key` ("meta_info" or "usage"), or -1.
int CompletionTokens(const Json& data, const char* key) {
  auto it = data.find(key);
  if (it == data.end() || !it->is_object()) return -1;
  auto tokens = it->find("completion_tokens");
  if (tokens == it->end() || !tokens->is_number_integer()) return -1;
  return tokens->get<int>();
}

std::string ErrorMessage(const Json& error) {
  if (error.is_object()) {
    auto message = error.find("message");
    if (message != error.end() && message->is_string()) return message->get<std::string>();
  }
  if (error.is_string()) return error.get<std::string>();
  return error.dump();
}

// The new text an answer or event carries, or nullopt when the shape is wrong.
std::optional<std::string> ContentOf(Backend backend, const Json& data, bool streamed) {
  if (backend == Backend::kSglang) {
    auto text = data.find("text");
    if (text == data.end()) return std::string();
    if (!text->is_string()) return std::nullopt;
    return text->get<std::string>();
  }
  auto choices = data.find("choices");
  if (choices == data.end()) return std::string();  // e.g. a final usage-only chunk
  if (!choices->is_array()) return std::nullopt;
  if (choices->empty()) return std::string();
  const Json& choice = (*choices)[0];
  if (!choice.is_object()) return std::nullopt;
  const char* container =
      backend == Backend::kSglangOaiChat ? (streamed ? "delta" : "message") : nullptr;
  const Json* holder = &choice;
  if (container != nullptr) {
    auto it = choice.find(container);
    if (it == choice.end()) return std::string();
    if (!it->is_object()) return std::nullopt;
    holder = &*it;
  }
  const char* field = backend == Backend::kSglangOaiChat ? "content" : "text";
  auto it = holder->find(field);
  if (it == holder->end() || it->is_null()) return std::string();
  if (!it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

}  // namespace

absl::StatusOr<Backend> ParseBackend(std::string_view name) {
  if (name == "sglang" || name == "sglang-native") return Backend::kSglang;
  if (name == "sglang-oai" || name == "vllm" || name == "lmdeploy") return Backend::kSglangOai;
  if (name == "sglang-oai-chat" || name == "vllm-chat" || name == "lmdeploy-chat") {
    return Backend::kSglangOaiChat;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--backend must be one of sglang, sglang-native, sglang-oai, sglang-oai-chat, vllm, "
      "vllm-chat, lmdeploy, lmdeploy-chat; got '",
      std::string(name), "'"));
}

const char* BackendName(Backend backend) {
  switch (backend) {
    case Backend::kSglang:
      return "sglang";
    case Backend::kSglangOai:
      return "sglang-oai";
    case Backend::kSglangOaiChat:
      return "sglang-oai-chat";
  }
  return "sglang";
}

const char* ApiPath(Backend backend) {
  switch (backend) {
    case Backend::kSglang:
      return "/generate";
    case Backend::kSglangOai:
      return "/v1/completions";
    case Backend::kSglangOaiChat:
      return "/v1/chat/completions";
  }
  return "/generate";
}

std::string BuildRequestBody(const RequestSettings& settings, const DatasetRow& row,
                             int output_len) {
  const Json& extra = settings.extra_body;
  Json body;
  if (settings.backend == Backend::kSglang) {
    if (settings.send_ids) {
      body["input_ids"] = row.prompt_ids;
    } else {
      body["text"] = row.prompt;
    }
    body["sampling_params"] = {
        {"temperature", 0.0}, {"max_new_tokens", output_len}, {"ignore_eos", settings.ignore_eos}};
    body["stream"] = settings.stream;
    body["lora_path"] = nullptr;
    body["return_logprob"] = settings.return_logprob;
    body["return_routed_experts"] = false;
    body["logprob_start_len"] = -1;
  } else {
    body["model"] = settings.model;
    if (settings.backend == Backend::kSglangOai) {
      body["prompt"] = row.prompt;
      body["best_of"] = 1;
      body["max_tokens"] = output_len;
    } else {
      body["messages"] = Json::array({{{"role", "user"}, {"content", row.prompt}}});
      body["max_completion_tokens"] = output_len;
    }
    body["stream"] = settings.stream;
    body["temperature"] = 0.0;
    body["ignore_eos"] = settings.ignore_eos;
  }
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) body[key] = value;
  }
  // Prompts come from arbitrary text files; never let invalid UTF-8 throw here.
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status ResponseAccumulator::HandleJson(std::string_view data, double now_s, bool streamed) {
  Json json;
  try {
    json = Json::parse(data.begin(), data.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed JSON from the server (", e.what(), "): ", Quote(data)));
  }
  if (!json.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("expected a JSON object: ", Quote(data)));
  }
  if (auto error = json.find("error"); error != json.end() && !error->is_null()) {
    return absl::InternalError(absl::StrCat("server error: ", ErrorMessage(*error)));
  }
  std::optional<std::string> content = ContentOf(backend_, json, streamed);
  if (!content) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected response shape for ", BackendName(backend_), ": ", Quote(data)));
  }
  const int tokens = CompletionTokens(json, backend_ == Backend::kSglang ? "meta_info" : "usage");
  if (tokens >= 0) reported_tokens_ = tokens;
  if (content->empty() && !(time_tokens_without_text_ && tokens > last_event_tokens_)) {
    return absl::OkStatus();
  }

  if (backend_ == Backend::kSglang && !out_.generated_text.empty() &&
      content->compare(0, out_.generated_text.size(), out_.generated_text) == 0) {
    out_.generated_text = std::move(*content);  // cumulative text (SGLang's default)
  } else {
    out_.generated_text += *content;
  }
  if (!got_content_) {
    got_content_ = true;
    out_.ttft_s = now_s;
  } else if (backend_ == Backend::kSglang && tokens >= 0) {
    // k new tokens in one event: k equal gaps, as bench_serving counts them.
    const int new_tokens = tokens - last_event_tokens_;
    if (new_tokens <= 0) return absl::OkStatus();
    const double gap = (now_s - last_content_s_) / new_tokens;
    out_.itl_s.insert(out_.itl_s.end(), static_cast<size_t>(new_tokens), gap);
  } else {
    out_.itl_s.push_back(now_s - last_content_s_);
  }
  last_content_s_ = now_s;
  if (tokens >= 0) last_event_tokens_ = tokens;
  return absl::OkStatus();
}

absl::Status ResponseAccumulator::OnEvent(std::string_view data, double now_s) {
  out_.latency_s = now_s;
  if (data == "[DONE]") return absl::OkStatus();
  return HandleJson(data, now_s, /*streamed=*/true);
}

absl::Status ResponseAccumulator::OnBody(std::string_view body, double now_s) {
  out_.latency_s = now_s;
  absl::Status status = HandleJson(body, now_s, /*streamed=*/false);
  out_.ttft_s = now_s;  // without a stream, the first token arrives with the last
  out_.itl_s.clear();
  return status;
}

RequestOutput ResponseAccumulator::Finish() && {
  out_.success = true;
  out_.output_len = reported_tokens_ >= 0 ? reported_tokens_ : requested_tokens_;
  return std::move(out_);
}

RequestOutput SendRequest(const HttpClient& client, const RequestSettings& settings,
                          const DatasetRow& row, int output_len, double start_s,
                          HttpClient::Clock::time_point deadline) {
  using Clock = HttpClient::Clock;
  const std::string body = BuildRequestBody(settings, row, output_len);
  HttpHeaders headers = settings.headers;

  ResponseAccumulator accumulator(settings.backend, output_len, settings.time_tokens_without_text);
  absl::Status event_error;
  const Clock::time_point sent = Clock::now();
  auto since_sent = [&] { return std::chrono::duration<double>(Clock::now() - sent).count(); };

  absl::StatusOr<HttpClientResponse> response;
  if (settings.stream) {
    response = client.PostStream(ApiPath(settings.backend), body, headers, deadline,
                                 [&](std::string_view data) {
                                   event_error = accumulator.OnEvent(data, since_sent());
                                   return event_error.ok();
                                 });
  } else {
    headers.emplace_back("Content-Type", "application/json");
    response = client.Request("POST", ApiPath(settings.backend), body, headers, deadline);
    if (response.ok() && response->status == 200) {
      event_error = accumulator.OnBody(response->body, since_sent());
    }
  }

  RequestOutput out;
  if (!response.ok()) {
    out.error = std::string(response.status().message());
  } else if (response->status != 200) {
    out.error = absl::StrCat("HTTP ", response->status, ": ", Quote(response->body));
  } else if (!event_error.ok()) {
    out.error = std::string(event_error.message());
  } else {
    out = std::move(accumulator).Finish();
  }
  out.prompt_len = row.prompt_len;
  out.start_s = start_s;
  return out;
}

}  // namespace tandem::bench

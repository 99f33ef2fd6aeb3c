// One benchmark request against an SGLang-compatible server: the request body per backend, the
// parsing of its answer (SSE events or one JSON body) and its timing, as bench_serving's request
// functions do them (the version whose flags the seed reports print):
//
//   sglang           POST /generate             {"text" (or "input_ids" with --tokenize-prompt),
//                                                "sampling_params": {"temperature": 0.0,
//                                                "max_new_tokens", "ignore_eos"}, "stream",
//                                                "lora_path": null, "return_logprob",
//                                                "return_routed_experts": false,
//                                                "logprob_start_len": -1}
//                    events carry the text so far (or, from servers that stream increments,
//                    the new piece) and meta_info.completion_tokens so far.
//   sglang-oai       POST /v1/completions       {"model","prompt","best_of":1,"max_tokens",
//                                                "stream","temperature":0.0,"ignore_eos"};
//                                                choices[0].text
//   sglang-oai-chat  POST /v1/chat/completions  {"model","messages":[user prompt],
//                                                "max_completion_tokens","stream",
//                                                "temperature":0.0,"ignore_eos"};
//                                                choices[0].delta.content
// --extra-request-body is merged last (its keys win), as upstream. No backend asks for usage
// (stream_options); the output token count is the server's (meta_info / usage
// completion_tokens) when it sends one, otherwise the max_new_tokens asked for, as upstream.
//
// Counting, as upstream: a request succeeds when the server answers 200 and every event is a
// JSON object of the backend's shape, even when it carries no generated text (an empty answer
// or a zero-token request is a success). It fails on a transport error, a non-200 status (its
// body is quoted) or malformed JSON. One deliberate difference: an event carrying an "error"
// object fails the request (upstream finds no text in it and counts a success for two of the
// three backends).
// One option of our own, --time-tokens-without-text (sglang backend): an event whose
// meta_info.completion_tokens grew times its tokens even when it carries no new text. Upstream
// times text only, so a model whose tokens decode to nothing (a synthetic checkpoint sharing a
// small tokenizer) would show no TTFT and ITLs averaged over long textless stretches.
#ifndef TANDEM_BENCH_TANDEM_BENCH_REQUEST_H_
#define TANDEM_BENCH_TANDEM_BENCH_REQUEST_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/tandem_bench/dataset.h"
#include "bench/tandem_bench/metrics.h"
#include "common/http_client.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

enum class Backend { kSglang, kSglangOai, kSglangOaiChat };

// "sglang" (also "sglang-native"), "sglang-oai", "sglang-oai-chat", and bench_serving's other
// OpenAI-speaking backends, which send the same requests: "vllm" and "lmdeploy" (completions),
// "vllm-chat" and "lmdeploy-chat" (chat). Anything else (trt, gserver, truss: other servers'
// APIs) is InvalidArgument listing the choices.
absl::StatusOr<Backend> ParseBackend(std::string_view name);
const char* BackendName(Backend backend);
const char* ApiPath(Backend backend);  // "/generate", "/v1/completions", "/v1/chat/completions"

struct RequestSettings {
  Backend backend = Backend::kSglang;
  std::string model;  // the "model" field of OpenAI requests
  bool stream = true;
  bool ignore_eos = true;
  bool return_logprob = false;  // --return-logprob (sglang backend)
  bool send_ids = false;        // --tokenize-prompt: input_ids instead of text (sglang backend)
  bool time_tokens_without_text = false;  // --time-tokens-without-text (sglang backend)
  nlohmann::json extra_body = nlohmann::json::object();  // --extra-request-body
  HttpHeaders headers;  // every request's extra headers (Authorization, --header)
};

// The body for one row asking for `output_len` tokens.
std::string BuildRequestBody(const RequestSettings& settings, const DatasetRow& row,
                             int output_len);

// Folds one answer into a RequestOutput as it arrives. Times are seconds since the request was
// sent. Not thread-safe; one per request.
class ResponseAccumulator {
 public:
  // `requested_tokens` is the output length counted when the server reports none;
  // `time_tokens_without_text`: see RequestSettings (sglang backend only).
  ResponseAccumulator(Backend backend, int requested_tokens, bool time_tokens_without_text = false)
      : backend_(backend),
        requested_tokens_(requested_tokens),
        time_tokens_without_text_(time_tokens_without_text && backend == Backend::kSglang) {}

  // One SSE `data:` payload that arrived at `now_s`. "[DONE]" is accepted. An error (malformed
  // JSON, an "error" object from the server) fails the request.
  absl::Status OnEvent(std::string_view data, double now_s);
  // A whole non-streamed JSON body that arrived at `now_s`.
  absl::Status OnBody(std::string_view body, double now_s);

  // The measured output (success true).
  RequestOutput Finish() &&;

 private:
  absl::Status HandleJson(std::string_view data, double now_s, bool streamed);

  Backend backend_;
  int requested_tokens_;
  bool time_tokens_without_text_;
  RequestOutput out_;
  bool got_content_ = false;
  double last_content_s_ = 0.0;
  int reported_tokens_ = -1;   // latest completion_tokens from the server
  int last_event_tokens_ = 0;  // tokens counted up to the previous content event (sglang)
};

// Sends one request and measures it. Never throws; failures are in the result.
// `start_s` is stored as RequestOutput::start_s (the send time relative to the run's start).
RequestOutput SendRequest(const HttpClient& client, const RequestSettings& settings,
                          const DatasetRow& row, int output_len, double start_s,
                          HttpClient::Clock::time_point deadline);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_REQUEST_H_

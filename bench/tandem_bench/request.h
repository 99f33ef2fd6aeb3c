// One benchmark request against an SGLang-compatible server: the request body per backend, the
// parsing of its answer (SSE events or one JSON body) and its timing.
//
//   sglang           POST /generate             {"text", "sampling_params": {temperature 0,
//                                                max_new_tokens, ignore_eos}, "stream"}
//                    events carry the text so far (or, from servers that stream increments,
//                    the new piece) and meta_info.completion_tokens so far.
//   sglang-oai       POST /v1/completions       {"model","prompt","temperature":0,"best_of":1,
//                                                "max_tokens","stream","ignore_eos"};
//                                                choices[0].text
//   sglang-oai-chat  POST /v1/chat/completions  {"model","messages":[user prompt],...};
//                                                choices[0].delta.content
// Streams ask for usage (stream_options.include_usage) so output tokens come from the server;
// without a count from the server the generated text is re-tokenized.
//
// A request fails (RequestOutput::success false, error set) on a transport error, a non-200
// status (its body is quoted), an event that is not JSON or carries an "error" object, or a
// stream that ends without any content.
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

namespace tandem::bench {

enum class Backend { kSglang, kSglangOai, kSglangOaiChat };

// "sglang" (also "sglang-native"), "sglang-oai", "sglang-oai-chat"; anything else is
// InvalidArgument listing the choices.
absl::StatusOr<Backend> ParseBackend(std::string_view name);
const char* BackendName(Backend backend);
const char* ApiPath(Backend backend);  // "/generate", "/v1/completions", "/v1/chat/completions"

struct RequestSettings {
  Backend backend = Backend::kSglang;
  std::string model;  // the "model" field of OpenAI requests
  bool stream = true;
  bool ignore_eos = true;
  std::string api_key;  // sent as "Authorization: Bearer" when not empty
};

std::string BuildRequestBody(const RequestSettings& settings, const std::string& prompt,
                             int output_len);

// Folds one answer into a RequestOutput as it arrives. Times are seconds since the request was
// sent. Not thread-safe; one per request.
class ResponseAccumulator {
 public:
  explicit ResponseAccumulator(Backend backend) : backend_(backend) {}

  // One SSE `data:` payload that arrived at `now_s`. "[DONE]" is accepted. An error (malformed
  // JSON, an "error" object from the server) fails the request.
  absl::Status OnEvent(std::string_view data, double now_s);
  // A whole non-streamed JSON body that arrived at `now_s`.
  absl::Status OnBody(std::string_view body, double now_s);

  // The measured output (success true) or the reason it has none. `count_tokens` gives the
  // output length when the server reported none.
  RequestOutput Finish(const TokenCounter& count_tokens) &&;

 private:
  absl::Status HandleJson(std::string_view data, double now_s, bool streamed);

  Backend backend_;
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
                          HttpClient::Clock::time_point deadline, const TokenCounter& count_tokens);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_TANDEM_BENCH_REQUEST_H_

// Client request parsing for tandem-router: the JSON bodies of SGLang's `POST /generate` and
// OpenAI's `POST /v1/completions` / `POST /v1/chat/completions` become one RoutedRequest —
// validated, tokenized (chat template applied for chat), with the sampling parameters mapped to
// proto::SamplingParams — ready to be routed to the workers.
//
// Thread-safety: the Parse* functions are pure; they may run concurrently. The ApiContext and
// the Tokenizer it points to are borrowed for the call only.
//
// Decisions, where SGLang/OpenAI leave room:
// - One prompt per request: batched /generate (`text` as an array of strings, `input_ids` as an
//   array of arrays) and several OpenAI prompts are a 400.
// - OpenAI `n` must be 1; completions `echo: true`, `best_of` > 1, `suffix`, a completions
//   `logprobs` > 1 or chat `top_logprobs` > 0 (alternatives per position) are 400s: the workers
//   return only the chosen token's logprob. Completions `logprobs: 0|1` and chat `logprobs: true`
//   set return_logprob.
// - Context length (as SGLang): a prompt of `context_length` tokens or more is a 400; a prompt
//   that fits but leaves less room than max_new_tokens has max_new_tokens clamped to
//   context_length - prompt_tokens.
// - SGLang fields we do not serve (image_data, lora_path, ...) are a 400 naming the field;
//   fields neither API knows are ignored, as SGLang and OpenAI servers ignore them.
#ifndef TANDEM_ROUTER_API_REQUEST_H_
#define TANDEM_ROUTER_API_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/worker.pb.h"

namespace tandem::router {

enum class ApiKind { kGenerate, kCompletions, kChatCompletions };

// One client request, validated and tokenized, ready to be routed.
struct RoutedRequest {
  ApiKind kind = ApiKind::kGenerate;
  std::string rid;                 // client's "rid" / request-id header, else generated
  std::string model;               // as the client named it ("" for /generate)
  std::vector<int32_t> input_ids;  // the prompt, tokenized (chat template applied for chat)
  std::string prompt_text;         // the prompt as text when given as text ("" otherwise)
  proto::SamplingParams sampling;  // mapped from SGLang / OpenAI names; skip_special_tokens
                                   // true unless the client said otherwise
  bool stream = false;
  bool return_logprob = false;  // /generate return_logprob, OpenAI logprobs
  int top_logprobs = 0;         // accepted only as 0 (not supported: clear 400 otherwise)
  bool include_usage = false;   // stream_options.include_usage
  bool echo = false;            // completions echo (rejected with 400 when true)
  int64_t created = 0;          // unix seconds, for OpenAI objects
};

struct ApiContext {
  const engine::Tokenizer* tokenizer = nullptr;  // required for text prompts and chat
  std::string served_model_name;                 // /v1/models id; "model" must match it
                                                 // (or be empty/absent) else 404-shaped error
  int context_length = 0;                        // prompt + max_new_tokens must fit; 0 = unchecked
  int default_max_new_tokens = 128;              // SGLang's default for /generate
};

// Parse and validate one body. Errors: absl::InvalidArgumentError naming the field
// ("messages[2].content must be a string or an array of text parts"), NotFoundError for an
// unknown model. Never throws (catch nlohmann exceptions inside). When the body has no "rid",
// a random 32-hex-digit id is generated; a caller that has a request-id header overrides `rid`.
absl::StatusOr<RoutedRequest> ParseGenerate(std::string_view body, const ApiContext& ctx);
absl::StatusOr<RoutedRequest> ParseCompletions(std::string_view body, const ApiContext& ctx);
absl::StatusOr<RoutedRequest> ParseChatCompletions(std::string_view body, const ApiContext& ctx);

// The parser for `kind` (for callers that dispatch on ApiKind, e.g. the fuzz target).
absl::StatusOr<RoutedRequest> ParseRequest(ApiKind kind, std::string_view body,
                                           const ApiContext& ctx);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_API_REQUEST_H_

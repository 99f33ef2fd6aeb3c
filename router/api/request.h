// Client request parsing for tandem-router: the JSON bodies of SGLang's `POST /generate` and
// OpenAI's `POST /v1/completions` / `POST /v1/chat/completions` become one RoutedRequest —
// validated, tokenized (chat template applied for chat), with the sampling parameters mapped to
// proto::SamplingParams — ready to be routed to the workers.
//
// Thread-safety: the Parse* functions are pure; they may run concurrently. The ApiContext and
// the Tokenizer it points to are borrowed for the call only.
//
// Decisions, where SGLang/OpenAI leave room:
// - Parse* read one prompt and one choice: batched /generate (`text` as an array of strings,
//   `input_ids` as an array of arrays, `rid` as a list), several OpenAI prompts and `n` other
//   than 1 are a 400 there ("batched requests are not supported; send one prompt per request").
//   A one-element batch is accepted. ParseBatch (below) is what the router uses: it takes lists
//   and `n` and gives one RoutedRequest per choice.
// - OpenAI `n` and `best_of` must be 1 in Parse*. Completions `echo: true` returns the prompt's
//   text first and, with `logprobs`, scores the prompt (logprob_start_len 0).
// - Logprobs: completions `logprobs: N` (0..5) sets return_logprob and asks for N alternatives
//   per position (0: top_logprobs null); chat `logprobs: true` sets return_logprob and
//   `top_logprobs: N` (0..20) asks for N alternatives, a 400 without `logprobs: true` (as
//   OpenAI); /generate `top_logprobs_num` (0..20) counts only with return_logprob (as SGLang),
//   and applies to the prompt's positions too; `logprob_start_len` (-1: the last prompt token
//   only, as SGLang before it dropped that entry; at least the prompt's length: a 400, as
//   SGLang) and `return_text_in_logprobs` are SGLang's.
//   The alternatives are the most likely tokens of the distribution the chosen token's logprob
//   comes from (engine/sampler.h), sent to the workers as sampling.top_logprobs_num.
// - max_new_tokens when the client gives none: /generate and chat use
//   ApiContext::default_max_new_tokens (SGLang's 128), completions OpenAI's 16. Chat (and
//   completions, for clients that send chat's name everywhere) takes max_completion_tokens over
//   the deprecated max_tokens when both are present.
// - Context length (as SGLang): a prompt of `context_length` tokens or more is a 400; a prompt
//   that fits but leaves less room than max_new_tokens has max_new_tokens clamped to
//   context_length - prompt_tokens.
// - JSON null means absent. Integers may be sent as integral floats (3.0). Numbers outside a
//   field's range are a 400 naming the field; a literal too large for a double (1e999) fails
//   JSON parsing ("number overflow"). Invalid UTF-8 anywhere in the body, nesting deeper than 64
//   levels, and a top level that is not an object are 400s.
// - SGLang fields we do not serve (image_data, lora_path, ..., and the sampling parameters
//   regex/json_schema/ebnf/min_new_tokens/repetition_penalty != 1 ...) are a 400 naming the field
//   when set to anything but their default; unknown keys inside /generate's sampling_params are a
//   400 (SGLang's SamplingParams rejects them too); other unknown top-level fields are ignored, as
//   SGLang and OpenAI servers ignore them.
// - Chat: roles system, user, assistant, tool ("developer" is read as system); content a string
//   or an array of text parts (absent/null on assistant turns: ""); assistant tool_calls with
//   their arguments parsed from JSON text; `tools`, `tool_choice` and `chat_template_kwargs`
//   as router/api/chat_tools.h reads them; the function role, function_call and non-text parts
//   are 400s, and so are the legacy top-level `functions` / `function_call` (other than
//   "none") rather than answered without the call they ask for. SGLang's chat `input_ids`, when
//   given, is the prompt instead of the template's rendering of `messages`; `reasoning_effort`
//   "none" turns thinking off (chat_tools.h). response_format is read for completions too (as
//   vLLM and SGLang do).
// - skip_special_tokens defaults to true (SGLang's default); the workers take it as sent.
// - Client strings the router echoes are bounded at parse time with a 400 naming the field:
//   `rid` (and the request-id headers, router/request_headers.h) at most kMaxRidBytes of
//   printable ASCII; `model` and `user` at most kMaxNameBytes without control characters.
//   Strings quoted back in error messages (roles, part types, unsupported values) are cut to
//   64 bytes. SGLang takes any string as rid; these ids go into x-request-id, logs and the
//   router's table of live requests, where a 64 KiB value would break the header.
// - The body must end with the JSON object: trailing bytes other than whitespace, a NUL
//   included, are a 400.
// - A text prompt whose byte length proves it longer than the context (bytes / (the longest
//   token's bytes * 3, the most Unicode normalization can shrink text) >= context_length) is a
//   400 before it is tokenized, in the same words as the exact check.
#ifndef TANDEM_ROUTER_API_REQUEST_H_
#define TANDEM_ROUTER_API_REQUEST_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "proto/worker.pb.h"

namespace tandem::router {

// kResponses: OpenAI's /v1/responses, served as a chat request (router/api/responses.h).
enum class ApiKind { kGenerate, kCompletions, kChatCompletions, kResponses };

class ResponseStore;
struct ResponsesRequest;

// How a chat answer's tool calls are written (router/api/tool_calls.h), from the chat template's
// family: kQwen for ChatML templates (Qwen2.5, Qwen3, Hermes style), kLlama3 for Llama 3.x.
enum class ToolCallSyntax { kNone, kQwen, kLlama3 };

// The longest `rid` / request-id header accepted (bytes of printable ASCII).
inline constexpr size_t kMaxRidBytes = 256;
// The longest `model` / `user` accepted.
inline constexpr size_t kMaxNameBytes = 256;

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
  // Alternatives per position (= sampling.top_logprobs_num); 0 without return_logprob.
  int top_logprobs = 0;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions echo: the prompt's text (and logprobs) first
  // With return_logprob: the first prompt position whose logprobs are returned (/generate
  // logprob_start_len; 0 for completions echo with logprobs); -1: the last prompt token only.
  int32_t logprob_start_len = -1;
  bool return_text_in_logprobs = false;  // /generate: token texts in the logprob triples
  int64_t created = 0;                   // unix seconds, for OpenAI objects
  // One item of a batch (RoutedBatch): the client's id of the whole request, which OpenAI
  // response ids are made of, and this item's place in the answer (OpenAI choices[].index,
  // SGLang's list position and streamed "index"). "" and 0 for a request of one choice.
  std::string batch_rid;
  int index = 0;
  // Chat with tools and a tool_choice other than "none": the answer's tool calls, in this
  // syntax and naming one of `tool_names`, are returned as tool_calls. kNone: all text.
  ToolCallSyntax tool_call_syntax = ToolCallSyntax::kNone;
  std::vector<std::string> tool_names;
  // Chat: "<think>...</think>" goes to reasoning_content (the router's --reasoning-parser
  // and the request's separate_reasoning, default true, as SGLang).
  bool separate_reasoning = false;
  // With separate_reasoning: the answer starts inside the reasoning block (the rendered prompt
  // ends with "<think>", as Qwen3-Thinking-2507's and DeepSeek-R1's templates make it, or the
  // parser always thinks: ApiContext::reasoning_always), so it is reasoning until "</think>".
  bool reasoning_open = false;
  // kResponses: the request's Responses settings and input (router/api/responses.h).
  std::shared_ptr<const ResponsesRequest> responses;
};

// What a request body's parsed JSON may take (common/json_depth.h's estimate, checked before
// parsing) unless the caller says otherwise; the router allows 8x --max-payload-size.
inline constexpr size_t kDefaultMaxParsedJsonBytes = size_t{256} << 20;

struct ApiContext {
  const engine::Tokenizer* tokenizer = nullptr;  // required for text prompts and chat
  std::string served_model_name;                 // /v1/models id; the "model" of a request
                                                 // that names none
  // The model directory's last component, also accepted as a request's "model"
  // (ModelNameServed, request_common.h), and whether every name is (--any-model-name).
  std::string model_dir_name;
  bool any_model_name = false;
  int context_length = 0;  // prompt + max_new_tokens must fit; 0 = unchecked
  // The model's vocabulary (config.json's vocab_size, which may exceed the tokenizer's):
  // logit_bias ids must be below it; 0 = unchecked (the workers check).
  int vocab_size = 0;
  // Bytes of the longest token of the vocabulary (special tokens included); with
  // context_length, text prompts certainly over the context are refused before tokenizing.
  // 0 = no early check.
  int max_token_bytes = 0;
  int default_max_new_tokens = 128;  // SGLang's default for /generate
  // A body whose JSON would take more to parse is refused before parsing (400).
  size_t max_parsed_json_bytes = kDefaultMaxParsedJsonBytes;
  // The router runs with --reasoning-parser: chat answers may have their reasoning separated
  // (RoutedRequest::separate_reasoning); `reasoning_always` for a parser whose models always
  // think (deepseek-r1, qwen3-thinking: SGLang's force_reasoning), whose answers start as
  // reasoning even when the prompt does not end with "<think>".
  bool reasoning_parser = false;
  bool reasoning_always = false;
  // Stored responses, which a /v1/responses previous_response_id names (borrowed; may be null:
  // none are kept).
  ResponseStore* response_store = nullptr;
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

// The most choices one request may ask for: prompts x n (OpenAI's cap on n).
inline constexpr int kMaxBatchChoices = 128;

// One client request that asks for several choices: a list of prompts and/or `n` completions
// per prompt. Items are prompt-major: item i * n + j is prompt i's choice j (OpenAI's and
// SGLang's order), each a complete RoutedRequest the router dispatches on its own.
struct RoutedBatch {
  std::vector<RoutedRequest> items;
  int n = 1;                   // choices per prompt
  std::string rid;             // the client's rid (or generated); items derive theirs from it
  bool rid_list = false;       // /generate gave one rid per prompt
  bool list_response = false;  // /generate answers a JSON list (list input or n > 1)
  bool include_usage = false;  // OpenAI stream_options.include_usage

  bool single() const { return items.size() == 1 && !list_response; }
};

// Parses a body that may hold several prompts and `n` (SGLang `sampling_params.n`, OpenAI `n`;
// completions `best_of` must equal n when given). Every prompt is checked as Parse* checks one
// (errors name the prompt, e.g. "text[2]: ..."); a /generate `sampling_params` list must have
// one object per prompt, all with the same n. With n > 1 and a seed, choice j samples with
// seed + j, so each choice differs and the request is reproducible. Item rids: the request's
// rid when it has one choice; else "<rid>_<index>" (SGLang's form), or with a /generate rid
// list "<rid[i]>" (n = 1) / "<rid[i]>_<j>"; a rid listed twice is a 400. More than
// kMaxBatchChoices choices is a 400.
absl::StatusOr<RoutedBatch> ParseBatch(ApiKind kind, std::string_view body, const ApiContext& ctx);

// Gives the batch (and its items' rids, as ParseBatch derives them) the id `rid`, e.g. from a
// request-id header, which wins over a rid list too.
void SetBatchRid(const std::string& rid, RoutedBatch* batch);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_API_REQUEST_H_

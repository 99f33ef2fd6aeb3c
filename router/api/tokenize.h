// SGLang's POST /tokenize and /detokenize (also under /v1/): the router's tokenizer, the one
// the workers' prompts are made with, answers them without reaching a worker.
//
//   /tokenize   {"prompt": str | [str], "add_special_tokens": true}  or  {"messages": [...]}
//            -> {"tokens": [int] | [[int]], "count": int | [int], "max_model_len": int}
//   /detokenize {"tokens": [int] | [[int]], "skip_special_tokens": true}
//            -> {"text": str | [str]}
//
// A list in gives a list out, as SGLang. `messages` (newer SGLang) is rendered with the model's
// chat template as a chat request would be (generation prompt added, no second BOS). `model` has
// the form every request's must have (a name of at most 256 bytes); tokenizing runs no model, so
// the name itself is not checked. Other keys are ignored.
//
// Errors are InvalidArgument naming the field: not one JSON object, neither or both of prompt
// and messages, a prompt that is not a string or a list of strings, more than kMaxTokenizeItems
// prompts or token lists, a token id outside the vocabulary, a non-boolean flag.
//
// Thread-safety: pure functions; the Tokenizer is borrowed for the call. Never throw.
#ifndef TANDEM_ROUTER_API_TOKENIZE_H_
#define TANDEM_ROUTER_API_TOKENIZE_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"
#include "router/api/request.h"

namespace tandem::router {

// Prompts of a /tokenize list, token lists of a /detokenize list (a client batching more can
// send several requests). The body size limit bounds the bytes.
inline constexpr size_t kMaxTokenizeItems = 1024;

// The JSON answer to a /tokenize body. `max_model_len` is the context length reported. A body
// whose JSON would take more than `max_parsed_json_bytes` to parse is refused before parsing.
absl::StatusOr<std::string> TokenizeBody(std::string_view body, const engine::Tokenizer& tokenizer,
                                         int max_model_len,
                                         size_t max_parsed_json_bytes = kDefaultMaxParsedJsonBytes);

// The JSON answer to a /detokenize body.
absl::StatusOr<std::string> DetokenizeBody(
    std::string_view body, const engine::Tokenizer& tokenizer,
    size_t max_parsed_json_bytes = kDefaultMaxParsedJsonBytes);

}  // namespace tandem::router

#endif  // TANDEM_ROUTER_API_TOKENIZE_H_

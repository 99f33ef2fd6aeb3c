// JSON pieces of the response objects router/api builds: SGLang's finish_reason object,
// OpenAI's finish_reason string and matched_stop, usage, and the logprobs objects of completions
// and chat. Shapes follow SGLang's OpenAI-compatible server (which follows OpenAI's).
//
// Thread-safety: pure functions. Internal to router/api.
#ifndef TANDEM_ROUTER_API_SHAPES_H_
#define TANDEM_ROUTER_API_SHAPES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "proto/worker.pb.h"

namespace tandem::router::api_internal {

using Json = nlohmann::json;

// Compact JSON text; ill-formed UTF-8 in strings becomes U+FFFD instead of throwing.
std::string Dump(const Json& value);

// SGLang: {"type":"length","length":N} | {"type":"stop","matched":id|"text"|null} |
// {"type":"abort","message":"..."}; null for an unset reason.
Json SglangFinishReason(const proto::FinishReason& reason);
// OpenAI: "length" | "stop" | "abort"; null for an unset reason.
Json OpenAiFinishReason(const proto::FinishReason& reason);
// SGLang's matched_stop: the stop token id, the stop string, or null (EOS, length, abort).
Json MatchedStop(const proto::FinishReason& reason);

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};
// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}
Json Usage(const UsageCounts& counts);

// A token's text for logprobs: its decoded text with `tokenizer`, else "token_id:<id>".
std::string TokenText(const engine::Tokenizer* tokenizer, int32_t id);

// The alternatives of each position, in step with the ids (a position the worker sent none for
// has none); null when the client asked for none.
using TopLogprobList = std::vector<proto::TopLogprobs>;

// Completions: {"tokens":[...],"token_logprobs":[...],"top_logprobs":...,"text_offset":[...]};
// offsets count bytes from `text_offset_base` (the completion text already sent). top_logprobs
// is null without `top`, else one {"<token text>": logprob, ...} object per position holding the
// alternatives and, as OpenAI does, the chosen token.
Json CompletionLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                        const std::vector<float>& logprobs, const TopLogprobList* top,
                        int64_t text_offset_base);
// Chat: {"content":[{"token","logprob","bytes":[...],"top_logprobs":[...]}, ...]}; each
// top_logprobs entry is {"token","logprob","bytes"}, empty without `top`.
Json ChatLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                  const std::vector<float>& logprobs, const TopLogprobList* top);
// SGLang /generate: [[logprob, token_id, null], ...].
Json SglangTokenLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& logprobs);
// SGLang /generate output_top_logprobs: per position [[logprob, token_id, null], ...].
Json SglangTopLogprobs(const TopLogprobList& top);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_SHAPES_H_

// JSON pieces of the response objects router/api builds: SGLang's finish_reason object,
// OpenAI's finish_reason string and matched_stop, usage, and the logprobs objects of completions
// and chat. Shapes follow SGLang's OpenAI-compatible server (which follows OpenAI's).
//
// Thread-safety: pure functions. Internal to router/api.
#ifndef TANDEM_ROUTER_API_SHAPES_H_
#define TANDEM_ROUTER_API_SHAPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  std::optional<int64_t> reasoning_tokens;  // chat with separated reasoning
};
// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}},
// and "completion_tokens_details":{"reasoning_tokens"} when counted (OpenAI's chat shape).
Json Usage(const UsageCounts& counts);

// A token's text for logprobs: its bytes (an added token's content, special tokens included)
// where they are well-formed UTF-8; a byte that is not part of a whole character (a token
// holding part of a multi-byte character, as byte-level BPE makes for emoji and CJK) is written
// as the four characters `\xNN` (lowercase hex), as OpenAI does; the raw bytes are in
// TokenBytes. Without a tokenizer: "token_id:<id>".
std::string TokenText(const engine::Tokenizer* tokenizer, int32_t id);

// Counts the characters (Unicode code points, as OpenAI's text_offset and Python's len) of a
// text that arrives as bytes in pieces: a character counts once its last byte arrived; an
// ill-formed byte counts as one character (it is shown as U+FFFD).
class CharCounter {
 public:
  explicit CharCounter(int64_t chars = 0) : chars_(chars) {}
  void Add(std::string_view bytes);
  int64_t chars() const { return chars_; }

 private:
  int64_t chars_;
  int pending_ = 0;  // continuation bytes the current character still needs
};

// The alternatives of each position, in step with the ids (a position the worker sent none for
// has none); null when the client asked for none.
using TopLogprobList = std::vector<proto::TopLogprobs>;

// Completions: {"tokens":[...],"token_logprobs":[...],"top_logprobs":...,"text_offset":[...]};
// each offset is the character position where the token's text starts in the returned text
// (`offsets` has counted what precedes `ids` and is advanced past them; special tokens count
// as the text skip_special_tokens leaves). A NaN logprob is null (echo's first prompt token).
// top_logprobs is null without `top`, else one {"<token text>": logprob, ...} object per position
// holding the alternatives and, as OpenAI does, the chosen token.
Json CompletionLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                        const std::vector<float>& logprobs, const TopLogprobList* top,
                        bool skip_special_tokens, CharCounter* offsets);
// Chat: {"content":[{"token","logprob","bytes":[...],"top_logprobs":[...]}, ...]}; each
// top_logprobs entry is {"token","logprob","bytes"}, empty without `top`.
Json ChatLogprobs(const engine::Tokenizer* tokenizer, const std::vector<int32_t>& ids,
                  const std::vector<float>& logprobs, const TopLogprobList* top);
// SGLang /generate: [[logprob, token_id, text], ...], text null unless `tokenizer` is given
// (return_text_in_logprobs); a NaN or missing logprob is null.
Json SglangTokenLogprobs(const std::vector<int32_t>& ids, const std::vector<float>& logprobs,
                         const engine::Tokenizer* tokenizer);
// SGLang /generate {input,output}_top_logprobs: per position [[logprob, token_id, text], ...];
// the first `null_positions` positions are null (the first prompt token's).
Json SglangTopLogprobs(const TopLogprobList& top, const engine::Tokenizer* tokenizer,
                       size_t null_positions = 0);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_SHAPES_H_

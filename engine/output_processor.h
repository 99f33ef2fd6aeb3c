// OutputProcessor: turns one request's generated token ids into its text stream and decides when
// the request ends (stop token / EOS, stop string, max_new_tokens).
//
// Stream rules:
//  - Text is released only in whole UTF-8 characters: bytes of a character split across tokens
//    (CJK, emoji through byte-level tokens) are held until it completes.
//  - The longest tail of the text that is a proper prefix of some stop string is held back, so a
//    stop string split across tokens is never partly emitted. When the match fails, the held
//    text is released with the next update.
//  - Stop strings are matched on the streamed text (Tokenizer::Decode without clean-up of
//    tokenization spaces, special tokens per skip_special_tokens). When several match, the one
//    that completes first in the text wins (ties: the one that starts first), so the outcome does
//    not depend on how the text was split into tokens.
//  - The first min_new_tokens tokens never end the request by stop token or EOS (the Sampler
//    masks them there); a stop string ends it only once at least min_new_tokens tokens have been
//    generated. A stop string completed earlier stays part of the text.
//  - The finishing update releases everything still held, except a trimmed stop string. An
//    incomplete UTF-8 sequence at the very end becomes U+FFFD.
//
// Thread-compatible: one per request, used by one thread at a time. Borrows `tokenizer`, which
// must outlive it. Not copyable (it streams one request); movable.
#ifndef TANDEM_ENGINE_OUTPUT_PROCESSOR_H_
#define TANDEM_ENGINE_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/finish_reason.h"
#include "engine/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

class OutputProcessor {
 public:
  // `params` must have passed ValidateSamplingParams; only max_new_tokens, min_new_tokens, stop,
  // stop_token_ids, ignore_eos, skip_special_tokens and no_stop_trim are used (copied).
  // `eos_token_ids` end the request unless params.ignore_eos.
  OutputProcessor(const Tokenizer& tokenizer, const SamplingParams& params,
                  std::vector<int32_t> eos_token_ids);
  OutputProcessor(const OutputProcessor&) = delete;
  OutputProcessor& operator=(const OutputProcessor&) = delete;
  OutputProcessor(OutputProcessor&&) = default;

  struct Update {
    std::string text;                    // newly final text (may be empty)
    std::optional<FinishReason> finish;  // set when this token ends the request
  };

  // Feeds the next generated token. Checks in order:
  //  1. a stop_token_id, or an EOS id unless ignore_eos (not among the first min_new_tokens
  //     tokens) -> FinishReason::StopToken; the token's own text is not emitted;
  //  2. a stop string in the text -> FinishReason::StopString; the text is cut before the match
  //     (after it with no_stop_trim) and nothing after the match is emitted;
  //  3. num_tokens() >= max_new_tokens -> FinishReason::Length(num_tokens()).
  // Callers push at least one token (max_new_tokens == 0 is handled without an
  // OutputProcessor). After a finishing update Push changes nothing and returns no text with the
  // same finish reason.
  Update Push(int32_t token);

  // Releases the held-back text, for a request that ends otherwise (abort). Empty afterwards.
  std::string Flush();

  // Tokens pushed so far, the finishing one included.
  int64_t num_tokens() const { return num_tokens_; }
  // All text emitted so far, by Push and Flush (cumulative, SGLang's "text").
  const std::string& text() const { return text_; }
  bool finished() const { return finish_.has_value(); }

 private:
  bool IsStopToken(int32_t token) const;
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t HoldBackLength() const;
  // Moves pending_[0, n) to text_ and returns it.
  std::string Release(size_t n);
  Update Finish(std::string text, FinishReason reason);

  int32_t max_new_tokens_;
  int32_t min_new_tokens_;
  std::vector<std::string> stop_;
  std::vector<int32_t> stop_ids_;  // stop_token_ids, plus EOS ids unless ignore_eos; sorted
  bool no_stop_trim_;
  IncrementalDetokenizer detok_;
  std::string pending_;  // decoded, complete characters not yet released
  std::string text_;
  int64_t num_tokens_ = 0;
  std::optional<FinishReason> finish_;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_OUTPUT_PROCESSOR_H_

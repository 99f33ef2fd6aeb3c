#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::Push(int32_t id) {
  pending_.append(tokenizer_.TokenBytes(id, skip_special_tokens_));
  const size_t complete = CompletePrefixLength(pending_);
  if (complete == 0) return std::string();
  std::string text = SanitizeUtf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return text;
}

std::string IncrementalDetokenizer::Finish() {
  std::string text = SanitizeUtf8(pending_);
  pending_.clear();
  return text;
}

}  // namespace tandem::engine

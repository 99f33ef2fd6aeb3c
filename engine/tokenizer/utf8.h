// UTF-8 helpers shared by the tokenizer: validation with replacement, code point iteration and
// the length of a complete prefix (for streaming). Pure functions, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_UTF8_H_
#define TANDEM_ENGINE_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::engine {

// The UTF-8 encoding of U+FFFD REPLACEMENT CHARACTER.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Length of the well-formed UTF-8 sequence starting at text[0], or 0 if text[0] does not start
// one (truncated, overlong, surrogate, > U+10FFFF or a stray continuation byte). `text` is
// non-empty.
size_t ValidSequenceLength(std::string_view text);

// Length of the "maximal subpart" of an ill-formed sequence starting at text[0]: the bytes that
// one U+FFFD replaces under the WHATWG / Unicode recommendation (what JavaScript's TextDecoder,
// Rust's String::from_utf8_lossy and Python's errors="replace" do). At least 1.
size_t MaximalSubpartLength(std::string_view text);

// Returns `text` with every ill-formed subsequence replaced by U+FFFD. Valid input is returned
// unchanged.
std::string SanitizeUtf8(std::string_view text);

// True if `text` is well-formed UTF-8.
bool IsValidUtf8(std::string_view text);

// Length of the longest prefix of `bytes` that does not end inside an incomplete but so far
// well-formed multi-byte sequence: bytes beyond it could still become a character when more
// bytes arrive. Ill-formed bytes are not held back.
size_t CompletePrefixLength(std::string_view bytes);

// Appends the UTF-8 encoding of code point `cp` (which must be a Unicode scalar value).
void AppendUtf8(char32_t cp, std::string* out);

// Decodes the scalar value at the start of well-formed `text` and stores its length in `*len`.
char32_t DecodeUtf8(std::string_view text, size_t* len);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_UTF8_H_

// Unicode character classes the tokenizer needs outside regexes. Pure functions.
#ifndef TANDEM_ENGINE_TOKENIZER_UNICODE_CLASS_H_
#define TANDEM_ENGINE_TOKENIZER_UNICODE_CLASS_H_

namespace tandem::engine {

// The White_Space property (Rust's char::is_whitespace, Oniguruma's \s).
bool IsWhiteSpace(char32_t c);

// A letter, a number or '_' (what separates a `single_word` added token from its neighbours).
bool IsWordChar(char32_t c);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_UNICODE_CLASS_H_

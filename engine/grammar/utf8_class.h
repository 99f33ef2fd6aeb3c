// Character classes over Unicode code points, lowered to byte-level grammar symbols: a class is
// the choice of the UTF-8 byte sequences of its code points (ASCII in one terminal, longer
// characters as sequences of byte ranges). Surrogates (U+D800..U+DFFF) are never members.
#ifndef TANDEM_ENGINE_GRAMMAR_UTF8_CLASS_H_
#define TANDEM_ENGINE_GRAMMAR_UTF8_CLASS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/grammar/grammar.h"

namespace tandem::engine::grammar {

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Inclusive code point ranges, in any order, possibly overlapping.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// Sorted, merged, surrogates removed; with `negate`, the complement within [0, kMaxCodepoint].
CodepointRanges NormalizeRanges(CodepointRanges ranges, bool negate);
bool RangesContain(const CodepointRanges& normalized, uint32_t codepoint);
// Normalized `ranges` minus `removed` (both normalized).
CodepointRanges SubtractRanges(const CodepointRanges& ranges, const CodepointRanges& removed);

// A symbol matching one character of `normalized` (NormalizeRanges output); a class with no
// member yields a terminal with no byte (alternatives using it are dropped by Build()).
Symbol CodepointClass(GrammarBuilder& builder, const CodepointRanges& normalized);

// The UTF-8 encoding of `codepoint` appended to `out`.
void AppendUtf8(uint32_t codepoint, std::string& out);
// Decodes one UTF-8 character at `text[*pos]`, advancing *pos; false on ill-formed input.
bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* codepoint);

}  // namespace tandem::engine::grammar

#endif  // TANDEM_ENGINE_GRAMMAR_UTF8_CLASS_H_

#include "engine/grammar/utf8_class.h"

#include <algorithm>

namespace tandem::engine::grammar {
namespace {

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

int EncodedLength(uint32_t cp) { return cp <= 0x7F ? 1 : cp <= 0x7FF ? 2 : cp <= 0xFFFF ? 3 : 4; }

// Splits [lo, hi] (same encoded length or not) into ranges whose UTF-8 encodings are products of
// byte ranges, appending one ByteRanges per piece.
void SplitRange(uint32_t lo, uint32_t hi, std::vector<ByteRanges>& out) {
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= boundary && hi > boundary) {
      SplitRange(lo, boundary, out);
      SplitRange(boundary + 1, hi, out);
      return;
    }
  }
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t mask = (1u << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        SplitRange(lo, lo | mask, out);
        SplitRange((lo | mask) + 1, hi, out);
        return;
      }
      if ((hi & mask) != mask) {
        SplitRange(lo, (hi & ~mask) - 1, out);
        SplitRange(hi & ~mask, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, a);
  AppendUtf8(hi, b);
  ByteRanges piece;
  for (size_t i = 0; i < a.size(); ++i) {
    piece.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out.push_back(std::move(piece));
}

}  // namespace

CodepointRanges NormalizeRanges(CodepointRanges ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    hi = std::min(hi, kMaxCodepoint);
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.emplace_back(lo, hi);
    }
  }
  if (negate) {
    CodepointRanges complement;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) complement.emplace_back(next, lo - 1);
      next = hi + 1;
    }
    if (next <= kMaxCodepoint) complement.emplace_back(next, kMaxCodepoint);
    merged = std::move(complement);
  }
  return SubtractRanges(merged, {{0xD800, 0xDFFF}});
}

CodepointRanges SubtractRanges(const CodepointRanges& ranges, const CodepointRanges& removed) {
  CodepointRanges out;
  for (auto [lo, hi] : ranges) {
    uint32_t start = lo;
    bool done = false;
    for (auto [rlo, rhi] : removed) {
      if (rhi < start || rlo > hi) continue;
      if (rlo > start) out.emplace_back(start, rlo - 1);
      if (rhi >= hi) {
        done = true;
        break;
      }
      start = rhi + 1;
    }
    if (!done) out.emplace_back(start, hi);
  }
  return out;
}

bool RangesContain(const CodepointRanges& normalized, uint32_t codepoint) {
  for (auto [lo, hi] : normalized) {
    if (codepoint >= lo && codepoint <= hi) return true;
  }
  return false;
}

Symbol CodepointClass(GrammarBuilder& builder, const CodepointRanges& normalized) {
  ByteSet ascii;
  std::vector<ByteRanges> pieces;
  for (auto [lo, hi] : normalized) {
    if (lo <= 0x7F) {
      for (uint32_t c = lo; c <= std::min(hi, 0x7Fu); ++c) ascii.set(c);
      if (hi <= 0x7F) continue;
      lo = 0x80;
    }
    SplitRange(lo, hi, pieces);
  }
  if (pieces.empty()) return builder.Terminal(ascii);
  std::vector<Sequence> alternatives;
  if (ascii.any()) alternatives.push_back({builder.Terminal(ascii)});
  for (const ByteRanges& piece : pieces) {
    Sequence seq;
    for (auto [blo, bhi] : piece) {
      ByteSet set;
      for (uint32_t b = blo; b <= bhi; ++b) set.set(b);
      seq.push_back(builder.Terminal(set));
    }
    alternatives.push_back(std::move(seq));
  }
  return builder.Choice(std::move(alternatives));
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp <= 0x7F) {
    out.push_back(static_cast<char>(cp));
  } else if (cp <= 0x7FF) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp <= 0xFFFF) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool DecodeUtf8(std::string_view text, size_t* pos, uint32_t* codepoint) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(*pos);
  int length = lead < 0x80           ? 1
               : (lead >> 5) == 0x6  ? 2
               : (lead >> 4) == 0xE  ? 3
               : (lead >> 3) == 0x1E ? 4
                                     : 0;
  if (length == 0 || *pos + length > text.size()) return false;
  uint32_t cp = length == 1 ? lead : lead & (0x3F >> (length - 1));
  for (int i = 1; i < length; ++i) {
    const uint8_t next = byte(*pos + i);
    if ((next & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (next & 0x3F);
  }
  if (EncodedLength(cp) != length || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return false;
  }
  *pos += length;
  *codepoint = cp;
  return true;
}

}  // namespace tandem::engine::grammar

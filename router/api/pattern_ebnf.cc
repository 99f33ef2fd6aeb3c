#include "router/api/pattern_ebnf.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "engine/grammar/utf8_class.h"

namespace tandem::router::api_internal {
namespace {

using engine::grammar::CodepointRanges;
using engine::grammar::NormalizeRanges;
using engine::grammar::RangesContain;
using engine::grammar::SubtractRanges;

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int kMaxRepeat = 1000;  // the grammar's repeat bound
constexpr int kMaxDepth = 32;

CodepointRanges Digits() { return {{'0', '9'}}; }
CodepointRanges Word() {
  return NormalizeRanges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, false);
}
CodepointRanges Space() { return NormalizeRanges({{'\t', '\r'}, {' ', ' '}}, false); }

// One character of a set as JSON string content: the raw characters JSON allows, plus the
// escapes of '"', '\' and the controls in the set.
std::string JsonCharOf(const CodepointRanges& set) {
  const CodepointRanges specials = NormalizeRanges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, false);
  std::vector<std::string> alternatives;
  const CodepointRanges raw = SubtractRanges(set, specials);
  if (!raw.empty()) {
    std::string cls = "[";
    for (const auto& [lo, hi] : raw) {
      absl::StrAppend(&cls, absl::StrFormat("\\U%08X", lo));
      if (hi != lo) absl::StrAppend(&cls, absl::StrFormat("-\\U%08X", hi));
    }
    alternatives.push_back(cls + "]");
  }
  if (RangesContain(set, '"')) alternatives.push_back(R"("\\\"")");
  if (RangesContain(set, '\\')) alternatives.push_back(R"("\\\\")");
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!RangesContain(set, c)) continue;
    switch (c) {
      case '\n':
        alternatives.push_back(R"("\\n")");
        break;
      case '\r':
        alternatives.push_back(R"("\\r")");
        break;
      case '\t':
        alternatives.push_back(R"("\\t")");
        break;
      case '\b':
        alternatives.push_back(R"("\\b")");
        break;
      case '\f':
        alternatives.push_back(R"("\\f")");
        break;
      default:
        alternatives.push_back(absl::StrFormat(R"("\\u%04x")", c));
        break;
    }
  }
  if (alternatives.empty()) return "";  // an empty set matches nothing
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

class PatternParser {
 public:
  explicit PatternParser(std::string_view pattern) : text_(pattern) {}

  absl::StatusOr<std::string> Parse() {
    bool anchored_start = false;
    bool anchored_end = false;
    if (!text_.empty() && text_.front() == '^') {
      anchored_start = true;
      ++pos_;
    }
    std::string_view body = text_;
    if (body.size() > pos_ && body.back() == '$' && !EscapedAt(body.size() - 1)) {
      anchored_end = true;
      end_ = body.size() - 1;
    } else {
      end_ = body.size();
    }
    ASSIGN_OR_RETURN(std::string expr, Alternation(0));
    if (pos_ != end_) return Error("unmatched ')'");
    return absl::StrCat("( ", anchored_start ? "" : "chr* ", expr, anchored_end ? "" : " chr*",
                        " )");
  }

 private:
  // Whether the byte at `at` is escaped by an odd run of backslashes before it.
  bool EscapedAt(size_t at) const {
    size_t n = 0;
    while (at > n && text_[at - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }
  bool AtEnd() const { return pos_ >= end_; }
  char Peek() const { return text_[pos_]; }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("pattern: ", std::string(what), " at offset ", pos_));
  }

  absl::StatusOr<std::string> Alternation(int depth) {
    if (depth > kMaxDepth) return Error("groups nest too deep");
    std::vector<std::string> branches;
    while (true) {
      ASSIGN_OR_RETURN(std::string branch, Concatenation(depth));
      branches.push_back(branch.empty() ? "\"\"" : branch);
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return absl::StrCat("( ", absl::StrJoin(branches, " | "), " )");
  }

  absl::StatusOr<std::string> Concatenation(int depth) {
    std::vector<std::string> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      ASSIGN_OR_RETURN(std::string atom, Atom(depth));
      ASSIGN_OR_RETURN(std::string quantified, Quantified(std::move(atom)));
      items.push_back(std::move(quantified));
    }
    return absl::StrJoin(items, " ");
  }

  absl::StatusOr<std::string> Quantified(std::string atom) {
    if (AtEnd()) return atom;
    std::string suffix;
    const char c = Peek();
    if (c == '?' || c == '*' || c == '+') {
      suffix = std::string(1, c);
      ++pos_;
    } else if (c == '{') {
      const size_t close = text_.find('}', pos_);
      if (close == std::string_view::npos || close >= end_) return Error("unterminated {m,n}");
      const std::string_view inside = text_.substr(pos_ + 1, close - pos_ - 1);
      int min = 0;
      int max = -1;
      const size_t comma = inside.find(',');
      auto number = [](std::string_view s, int* out) {
        if (s.empty() || s.size() > 4) return false;
        *out = 0;
        for (char d : s) {
          if (d < '0' || d > '9') return false;
          *out = *out * 10 + (d - '0');
        }
        return true;
      };
      const bool ok =
          comma == std::string_view::npos
              ? number(inside, &min) && (max = min, true)
              : number(inside.substr(0, comma), &min) &&
                    (comma + 1 == inside.size() || number(inside.substr(comma + 1), &max));
      if (!ok) return Error("malformed {m,n}");
      if (min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && max < min)) {
        return Error("repeat bound out of range");
      }
      suffix = max < 0 ? absl::StrCat("{", min, ",}") : absl::StrCat("{", min, ",", max, "}");
      pos_ = close + 1;
    } else {
      return atom;
    }
    if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: the same language
    if (!AtEnd() && (Peek() == '+' || Peek() == '?' || Peek() == '*' || Peek() == '{')) {
      return Error("possessive or repeated quantifier");
    }
    if (atom.empty()) return Error("quantifier without an operand");
    return absl::StrCat("( ", atom, " )", suffix);
  }

  absl::StatusOr<std::string> Atom(int depth) {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && Peek() == '?') {
        const std::string_view rest = text_.substr(pos_);
        if (rest.starts_with("?:")) {
          pos_ += 2;
        } else if (rest.starts_with("?<") || rest.starts_with("?P<")) {
          const size_t close = text_.find('>', pos_);
          if (close == std::string_view::npos || rest.starts_with("?<=") ||
              rest.starts_with("?<!")) {
            return Error("unsupported group");
          }
          pos_ = close + 1;
        } else {
          return Error("unsupported group");
        }
      }
      ASSIGN_OR_RETURN(std::string inner, Alternation(depth + 1));
      if (AtEnd() || Peek() != ')') return Error("missing ')'");
      ++pos_;
      return inner;
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return JsonCharOf(NormalizeRanges({{'\n', '\n'}}, true));
    }
    if (c == '^' || c == '$') return Error("anchor inside the pattern");
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("quantifier without an operand");
    CodepointRanges set;
    ASSIGN_OR_RETURN(set, Char(/*in_class=*/false));
    const std::string out = JsonCharOf(set);
    if (out.empty()) return Error("empty class");
    return out;
  }

  // One character or escape (outside or inside a class) as a set of code points.
  absl::StatusOr<CodepointRanges> Char(bool in_class) {
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c != '\\') {
      // A UTF-8 sequence: its code point.
      int length = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      if (length == 0 || pos_ + static_cast<size_t>(length) > end_) return Error("invalid UTF-8");
      uint32_t cp = length == 1 ? c : c & (0x7F >> length);
      for (int i = 1; i < length; ++i) {
        const unsigned char next = static_cast<unsigned char>(text_[pos_ + i]);
        if ((next & 0xC0) != 0x80) return Error("invalid UTF-8");
        cp = (cp << 6) | (next & 0x3F);
      }
      pos_ += static_cast<size_t>(length);
      return CodepointRanges{{cp, cp}};
    }
    ++pos_;
    if (AtEnd()) return Error("trailing backslash");
    const char e = Peek();
    ++pos_;
    switch (e) {
      case 'd':
        return Digits();
      case 'w':
        return Word();
      case 's':
        return Space();
      case 'D':
        return NormalizeRanges(Digits(), true);
      case 'W':
        return NormalizeRanges(Word(), true);
      case 'S':
        return NormalizeRanges(Space(), true);
      case 'n':
        return CodepointRanges{{'\n', '\n'}};
      case 'r':
        return CodepointRanges{{'\r', '\r'}};
      case 't':
        return CodepointRanges{{'\t', '\t'}};
      case 'f':
        return CodepointRanges{{'\f', '\f'}};
      case 'v':
        return CodepointRanges{{'\v', '\v'}};
      case 'x': {
        uint32_t cp = 0;
        const bool braced = !AtEnd() && Peek() == '{';
        if (braced) ++pos_;
        int digits = 0;
        while (!AtEnd() && (braced ? Peek() != '}' : digits < 2)) {
          const char h = Peek();
          const int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
          if (v < 0 || ++digits > 6) return Error("malformed \\x escape");
          cp = cp * 16 + static_cast<uint32_t>(v);
          ++pos_;
        }
        if (braced) {
          if (AtEnd()) return Error("malformed \\x escape");
          ++pos_;
        }
        if (digits == 0 || cp > kMaxCodepoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
          return Error("malformed \\x escape");
        }
        return CodepointRanges{{cp, cp}};
      }
      default:
        if ((e >= '!' && e <= '/') || (e >= ':' && e <= '@') || (e >= '[' && e <= '`') ||
            (e >= '{' && e <= '~') || (in_class && e == '-')) {
          return CodepointRanges{{static_cast<uint32_t>(e), static_cast<uint32_t>(e)}};
        }
        return Error(absl::StrCat("unsupported escape \\", std::string(1, e)));
    }
  }

  absl::StatusOr<std::string> Class() {
    ++pos_;
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      if (Peek() == '[' && text_.substr(pos_).starts_with("[:")) {
        return Error("POSIX classes are not supported");
      }
      first = false;
      ASSIGN_OR_RETURN(CodepointRanges lo, Char(/*in_class=*/true));
      if (lo.size() == 1 && lo[0].first == lo[0].second && pos_ + 1 < end_ && Peek() == '-' &&
          text_[pos_ + 1] != ']') {
        ++pos_;
        ASSIGN_OR_RETURN(CodepointRanges hi, Char(/*in_class=*/true));
        if (hi.size() != 1 || hi[0].first != hi[0].second || hi[0].first < lo[0].first) {
          return Error("bad class range");
        }
        ranges.emplace_back(lo[0].first, hi[0].first);
      } else {
        ranges.insert(ranges.end(), lo.begin(), lo.end());
      }
    }
    const std::string out = JsonCharOf(NormalizeRanges(std::move(ranges), negate));
    if (out.empty()) return Error("empty class");
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

}  // namespace

absl::StatusOr<std::string> PatternEbnf(std::string_view pattern) {
  return PatternParser(pattern).Parse();
}

}  // namespace tandem::router::api_internal

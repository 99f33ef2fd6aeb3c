#include "engine/grammar/regex_compiler.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace tandem::engine::grammar {
namespace {

const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};  // \t \n \v \f \r and space

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& builder, std::string_view pattern, const RegexOptions& options)
      : builder_(builder), pattern_(pattern), options_(options) {}

  absl::StatusOr<Sequence> Parse() {
    bool anchored_start = false, anchored_end = false;
    size_t begin = 0, end = pattern_.size();
    if (end > 0 && pattern_[0] == '^') {
      anchored_start = true;
      begin = 1;
    }
    if (end > begin && pattern_[end - 1] == '$') {
      size_t backslashes = 0;
      for (size_t i = end - 1; i > begin && pattern_[i - 1] == '\\'; --i) ++backslashes;
      if (backslashes % 2 == 0) {
        anchored_end = true;
        --end;
      }
    }
    pattern_ = pattern_.substr(0, end);
    pos_ = begin;
    bool top_level_alternation = false;
    ASSIGN_OR_RETURN(Sequence seq, ParseAlternation(0, &top_level_alternation));
    if (pos_ != pattern_.size()) return Error("unmatched ')'");
    if (!options_.json_string_content) return seq;
    if (top_level_alternation && (anchored_start || anchored_end)) {
      return Error("an anchor beside a top-level alternation is not supported");
    }
    Sequence result;
    if (!anchored_start) result.push_back(builder_.Star({AnyJsonChar()}));
    result.push_back(builder_.Group(std::move(seq)));
    if (!anchored_end) result.push_back(builder_.Star({AnyJsonChar()}));
    return result;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("regex: ", std::string(what), " at offset ",
                                                   pos_, " of \"", std::string(pattern_), "\""));
  }
  bool AtEnd() const { return pos_ >= pattern_.size(); }
  char Peek() const { return pattern_[pos_]; }

  Symbol AnyJsonChar() { return JsonStringCharClass(builder_, NormalizeRanges({}, true)); }

  Symbol ClassSymbol(const CodepointRanges& normalized) {
    if (options_.json_string_content) return JsonStringCharClass(builder_, normalized);
    return CodepointClass(builder_, normalized);
  }

  absl::StatusOr<Sequence> ParseAlternation(int depth, bool* has_alternation) {
    if (depth > builder_.limits().max_nesting_depth) return Error("groups nested too deeply");
    std::vector<Sequence> alternatives;
    ASSIGN_OR_RETURN(Sequence first, ParseConcatenation(depth));
    alternatives.push_back(std::move(first));
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      ASSIGN_OR_RETURN(Sequence next, ParseConcatenation(depth));
      alternatives.push_back(std::move(next));
    }
    if (has_alternation != nullptr) *has_alternation = alternatives.size() > 1;
    if (alternatives.size() == 1) return std::move(alternatives[0]);
    return Sequence{builder_.Choice(std::move(alternatives))};
  }

  absl::StatusOr<Sequence> ParseConcatenation(int depth) {
    Sequence seq;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      ASSIGN_OR_RETURN(Sequence atom, ParseAtom(depth));
      ASSIGN_OR_RETURN(Sequence repeated, ParseQuantifiers(std::move(atom)));
      seq.insert(seq.end(), repeated.begin(), repeated.end());
      if (builder_.failed()) return seq;
    }
    return seq;
  }

  // {m}, {m,}, {m,n} at pos_ ('{'); false (pos_ unchanged) if not a quantifier (a literal '{').
  bool ParseBraces(int64_t* min, int64_t* max) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t* out) {
      size_t start = p;
      int64_t value = 0;
      while (p < pattern_.size() && IsDigit(pattern_[p])) {
        value = std::min<int64_t>(value * 10 + (pattern_[p] - '0'), 1 << 30);
        ++p;
      }
      *out = value;
      return p > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (p < pattern_.size() && pattern_[p] == ',') {
      ++p;
      if (!number(max)) *max = -1;
    }
    if (p >= pattern_.size() || pattern_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }

  absl::StatusOr<Sequence> ParseQuantifiers(Sequence atom) {
    while (!AtEnd()) {
      const char c = Peek();
      int64_t min = 0, max = 0;
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{') {
        if (!ParseBraces(&min, &max)) return atom;
      } else {
        return atom;
      }
      if (!AtEnd() && Peek() == '?') ++pos_;  // lazy: same language
      if (!AtEnd() && Peek() == '+') return Error("possessive quantifiers are not supported");
      if (min == 0 && max == -1) {
        atom = {builder_.Star(atom)};
      } else if (min == 1 && max == -1) {
        atom = {builder_.Plus(atom)};
      } else if (min == 0 && max == 1) {
        atom = {builder_.Optional(atom)};
      } else {
        atom = {builder_.Repeat(atom, min, max)};
      }
    }
    return atom;
  }

  absl::StatusOr<Sequence> ParseAtom(int depth) {
    const char c = Peek();
    if (c == '(') {
      ++pos_;
      if (!AtEnd() && Peek() == '?') {
        std::string_view rest = pattern_.substr(pos_);
        if (rest.starts_with("?:")) {
          pos_ += 2;
        } else if (rest.starts_with("?<") && rest.size() > 2 && rest[2] != '=' && rest[2] != '!') {
          size_t close = rest.find('>');
          if (close == std::string_view::npos) return Error("unterminated group name");
          pos_ += close + 1;
        } else if (rest.starts_with("?P<")) {
          size_t close = rest.find('>');
          if (close == std::string_view::npos) return Error("unterminated group name");
          pos_ += close + 1;
        } else {
          return Error("group flags, lookaround and other (?...) constructs are not supported");
        }
      }
      ASSIGN_OR_RETURN(Sequence inner, ParseAlternation(depth + 1, nullptr));
      if (AtEnd() || Peek() != ')') return Error("missing ')'");
      ++pos_;
      return Sequence{builder_.Group(std::move(inner))};
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++pos_;
      return Sequence{ClassSymbol(NormalizeRanges({{'\n', '\n'}}, true))};
    }
    if (c == '^' || c == '$') return Error("anchors are only supported at the pattern's ends");
    if (c == '*' || c == '+' || c == '?') return Error("quantifier without an operand");
    CodepointRanges ranges;
    if (c == '\\') {
      RETURN_IF_ERROR(ParseEscape(/*in_class=*/false, &ranges));
    } else {
      uint32_t cp = 0;
      if (!DecodeUtf8(pattern_, &pos_, &cp)) return Error("ill-formed UTF-8");
      ranges = {{cp, cp}};
    }
    return Sequence{ClassSymbol(NormalizeRanges(std::move(ranges), false))};
  }

  // At a backslash: the class it denotes (a single character for literal escapes).
  absl::Status ParseEscape(bool in_class, CodepointRanges* out) {
    ++pos_;
    if (AtEnd()) return Error("trailing backslash");
    const char c = Peek();
    ++pos_;
    auto single = [&](uint32_t cp) {
      *out = {{cp, cp}};
      return absl::OkStatus();
    };
    switch (c) {
      case 'd':
        *out = kDigit;
        return absl::OkStatus();
      case 'w':
        *out = kWord;
        return absl::OkStatus();
      case 's':
        *out = kSpace;
        return absl::OkStatus();
      case 'D':
        *out = NormalizeRanges(kDigit, true);
        return absl::OkStatus();
      case 'W':
        *out = NormalizeRanges(kWord, true);
        return absl::OkStatus();
      case 'S':
        *out = NormalizeRanges(kSpace, true);
        return absl::OkStatus();
      case 'n':
        return single('\n');
      case 'r':
        return single('\r');
      case 't':
        return single('\t');
      case 'f':
        return single('\f');
      case 'v':
        return single('\v');
      case 'x': {
        uint32_t value = 0;
        if (!AtEnd() && Peek() == '{') {
          size_t close = pattern_.find('}', pos_);
          if (close == std::string_view::npos || close == pos_ + 1 || close - pos_ > 7) {
            return Error("malformed \\x{...}");
          }
          for (size_t i = pos_ + 1; i < close; ++i) {
            if (HexValue(pattern_[i]) < 0) return Error("malformed \\x{...}");
            value = value * 16 + HexValue(pattern_[i]);
          }
          pos_ = close + 1;
        } else {
          for (int i = 0; i < 2; ++i) {
            if (AtEnd() || HexValue(Peek()) < 0) return Error("malformed \\xHH");
            value = value * 16 + HexValue(Peek());
            ++pos_;
          }
        }
        if (value > kMaxCodepoint) return Error("code point out of range");
        return single(value);
      }
      default:
        break;
    }
    if (c == 'b' && in_class) return single('\b');
    if (IsAlnum(c)) {
      --pos_;
      return Error(absl::StrCat("unsupported escape \\", std::string(1, c)));
    }
    if (static_cast<uint8_t>(c) >= 0x80) return Error("escaped non-ASCII character");
    return single(static_cast<uint8_t>(c));
  }

  absl::StatusOr<Sequence> ParseClass() {
    ++pos_;  // '['
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
      first = false;
      if (pattern_.substr(pos_).starts_with("[:")) return Error("POSIX classes are not supported");
      CodepointRanges item;
      RETURN_IF_ERROR(ParseClassChar(&item));
      // A range a-b: both ends single characters.
      if (item.size() == 1 && item[0].first == item[0].second && pos_ + 1 < pattern_.size() &&
          Peek() == '-' && pattern_[pos_ + 1] != ']') {
        ++pos_;
        CodepointRanges upper;
        RETURN_IF_ERROR(ParseClassChar(&upper));
        if (upper.size() != 1 || upper[0].first != upper[0].second) {
          return Error("a class shorthand cannot end a range");
        }
        if (upper[0].first < item[0].first) return Error("range out of order");
        item = {{item[0].first, upper[0].first}};
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    return Sequence{ClassSymbol(NormalizeRanges(std::move(ranges), negate))};
  }

  absl::Status ParseClassChar(CodepointRanges* out) {
    if (Peek() == '\\') return ParseEscape(/*in_class=*/true, out);
    uint32_t cp = 0;
    if (!DecodeUtf8(pattern_, &pos_, &cp)) return Error("ill-formed UTF-8");
    *out = {{cp, cp}};
    return absl::OkStatus();
  }

  GrammarBuilder& builder_;
  std::string_view pattern_;
  RegexOptions options_;
  size_t pos_ = 0;
};

}  // namespace

Symbol JsonStringCharClass(GrammarBuilder& builder, const CodepointRanges& normalized) {
  std::vector<Sequence> alternatives;
  CodepointRanges raw = SubtractRanges(normalized, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  if (!raw.empty()) alternatives.push_back({CodepointClass(builder, raw)});
  for (uint32_t cp = 0; cp <= 0x1F; ++cp) {
    if (!RangesContain(normalized, cp)) continue;
    std::string escape;
    switch (cp) {
      case '\b':
        escape = "\\b";
        break;
      case '\f':
        escape = "\\f";
        break;
      case '\n':
        escape = "\\n";
        break;
      case '\r':
        escape = "\\r";
        break;
      case '\t':
        escape = "\\t";
        break;
      default:
        escape = absl::StrFormat("\\u%04x", cp);
    }
    alternatives.push_back(builder.Literal(escape));
  }
  if (RangesContain(normalized, '"')) alternatives.push_back(builder.Literal("\\\""));
  if (RangesContain(normalized, '\\')) alternatives.push_back(builder.Literal("\\\\"));
  if (alternatives.size() == 1 && alternatives[0].size() == 1) return alternatives[0][0];
  return builder.Choice(std::move(alternatives));
}

absl::StatusOr<Sequence> CompileRegexInto(GrammarBuilder& builder, std::string_view pattern,
                                          const RegexOptions& options) {
  return RegexParser(builder, pattern, options).Parse();
}

absl::StatusOr<GrammarPtr> CompileRegex(std::string_view pattern, const GrammarLimits& limits) {
  GrammarBuilder builder(limits);
  ASSIGN_OR_RETURN(Sequence seq, CompileRegexInto(builder, pattern, RegexOptions()));
  int32_t root = builder.NewRule("root");
  builder.AddAlternative(root, std::move(seq));
  return builder.Build(root);
}

}  // namespace tandem::engine::grammar

#include "engine/grammar/ebnf_compiler.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/grammar/utf8_class.h"

namespace tandem::engine::grammar {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class EbnfParser {
 public:
  EbnfParser(std::string_view text, const GrammarLimits& limits) : text_(text), builder_(limits) {}

  absl::StatusOr<GrammarPtr> Parse() {
    SkipSpace();
    while (!AtEnd()) {
      const size_t name_pos = pos_;
      std::string name = ParseName();
      if (name.empty()) return Error("expected a rule name");
      SkipSpace();
      if (!text_.substr(pos_).starts_with("::=")) return Error("expected '::=' after rule name");
      pos_ += 3;
      const int32_t rule = RuleFor(name);
      if (defined_[rule]) {
        pos_ = name_pos;
        return Error(absl::StrCat("rule '", name, "' is defined twice"));
      }
      defined_[rule] = true;
      ASSIGN_OR_RETURN(std::vector<Sequence> alternatives, ParseAlternation(0));
      for (Sequence& seq : alternatives) builder_.AddAlternative(rule, std::move(seq));
      SkipSpace();
      if (!AtEnd() && Peek() == ')') return Error("unmatched ')'");
    }
    for (const auto& [name, rule] : rules_) {
      if (!defined_[rule]) {
        return absl::InvalidArgumentError(absl::StrCat("ebnf: undefined rule '", name, "'"));
      }
    }
    auto root = rules_.find("root");
    if (root == rules_.end()) return absl::InvalidArgumentError("ebnf: no rule named 'root'");
    return builder_.Build(root->second);
  }

 private:
  absl::Status Error(std::string_view what) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("ebnf: ", std::string(what), " at line ", line, ", column ", column));
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipSpace() {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // At a name followed by "::=" (the next rule begins).
  bool AtRuleStart() {
    const size_t saved = pos_;
    const bool has_name = !ParseName().empty();
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t')) ++pos_;
    const bool result = has_name && text_.substr(pos_).starts_with("::=");
    pos_ = saved;
    return result;
  }

  int32_t RuleFor(const std::string& name) {
    auto [it, inserted] = rules_.try_emplace(name, 0);
    if (inserted) {
      it->second = builder_.NewRule(name);
      defined_.resize(it->second + 1, false);
    }
    return it->second;
  }

  absl::StatusOr<std::vector<Sequence>> ParseAlternation(int depth) {
    if (depth > builder_.limits().max_nesting_depth) return Error("groups nested too deeply");
    std::vector<Sequence> alternatives;
    while (true) {
      ASSIGN_OR_RETURN(Sequence seq, ParseSequence(depth));
      alternatives.push_back(std::move(seq));
      SkipSpace();
      if (AtEnd() || Peek() != '|') break;
      ++pos_;
    }
    return alternatives;
  }

  absl::StatusOr<Sequence> ParseSequence(int depth) {
    Sequence seq;
    while (true) {
      SkipSpace();
      if (AtEnd() || Peek() == '|' || Peek() == ')' || AtRuleStart()) break;
      ASSIGN_OR_RETURN(Sequence element, ParseElement(depth));
      ASSIGN_OR_RETURN(element, ParseQuantifiers(std::move(element)));
      seq.insert(seq.end(), element.begin(), element.end());
      if (builder_.failed()) break;
    }
    return seq;
  }

  absl::StatusOr<Sequence> ParseQuantifiers(Sequence element) {
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '*') {
        element = {builder_.Star(element)};
      } else if (c == '+') {
        element = {builder_.Plus(element)};
      } else if (c == '?') {
        element = {builder_.Optional(element)};
      } else if (c == '{') {
        ++pos_;
        int64_t min = 0, max = 0;
        if (!ParseNumber(&min)) return Error("expected a number in {m,n}");
        max = min;
        if (!AtEnd() && Peek() == ',') {
          ++pos_;
          if (!ParseNumber(&max)) max = -1;
        }
        if (AtEnd() || Peek() != '}') return Error("expected '}'");
        element = {builder_.Repeat(element, min, max)};
      } else {
        return element;
      }
      ++pos_;
    }
    return element;
  }

  bool ParseNumber(int64_t* out) {
    const size_t start = pos_;
    int64_t value = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      value = std::min<int64_t>(value * 10 + (Peek() - '0'), 1 << 30);
      ++pos_;
    }
    *out = value;
    return pos_ > start;
  }

  absl::StatusOr<Sequence> ParseElement(int depth) {
    const char c = Peek();
    if (c == '"' || c == '\'') return ParseString(c);
    if (c == '[') return ParseClass();
    if (c == '(') {
      ++pos_;
      SkipSpace();
      if (!AtEnd() && Peek() == '=') return Error("lookahead assertions are not supported");
      ASSIGN_OR_RETURN(std::vector<Sequence> alternatives, ParseAlternation(depth + 1));
      if (AtEnd() || Peek() != ')') return Error("expected ')'");
      ++pos_;
      if (alternatives.size() == 1) return Sequence{builder_.Group(std::move(alternatives[0]))};
      return Sequence{builder_.Choice(std::move(alternatives))};
    }
    if (IsNameChar(c)) return Sequence{RuleFor(ParseName())};
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  // One character of a string or class body: an escape or a UTF-8 character.
  absl::Status ParseChar(uint32_t* cp) {
    if (Peek() != '\\') {
      if (!DecodeUtf8(text_, &pos_, cp)) return Error("ill-formed UTF-8");
      return absl::OkStatus();
    }
    ++pos_;
    if (AtEnd()) return Error("trailing backslash");
    const char c = Peek();
    ++pos_;
    int hex_digits = 0;
    switch (c) {
      case 'n':
        *cp = '\n';
        return absl::OkStatus();
      case 'r':
        *cp = '\r';
        return absl::OkStatus();
      case 't':
        *cp = '\t';
        return absl::OkStatus();
      case '\\':
      case '"':
      case '\'':
      case '[':
      case ']':
      case '-':
      case '^':
        *cp = static_cast<uint8_t>(c);
        return absl::OkStatus();
      case 'x':
        hex_digits = 2;
        break;
      case 'u':
        hex_digits = 4;
        break;
      case 'U':
        hex_digits = 8;
        break;
      default:
        return Error(absl::StrCat("unsupported escape \\", std::string(1, c)));
    }
    uint32_t value = 0;
    for (int i = 0; i < hex_digits; ++i) {
      if (AtEnd() || HexValue(Peek()) < 0) return Error("malformed hex escape");
      value = value * 16 + HexValue(Peek());
      ++pos_;
    }
    if (value > kMaxCodepoint || (value >= 0xD800 && value <= 0xDFFF)) {
      return Error("escape is not a Unicode scalar value");
    }
    *cp = value;
    return absl::OkStatus();
  }

  absl::StatusOr<Sequence> ParseString(char quote) {
    ++pos_;
    std::string bytes;
    while (true) {
      if (AtEnd() || Peek() == '\n') return Error("unterminated string");
      if (Peek() == quote) {
        ++pos_;
        break;
      }
      uint32_t cp = 0;
      RETURN_IF_ERROR(ParseChar(&cp));
      AppendUtf8(cp, bytes);
    }
    return builder_.Literal(bytes);
  }

  absl::StatusOr<Sequence> ParseClass() {
    ++pos_;
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges ranges;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      uint32_t lo = 0;
      RETURN_IF_ERROR(ParseChar(&lo));
      uint32_t hi = lo;
      if (pos_ + 1 < text_.size() && Peek() == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        RETURN_IF_ERROR(ParseChar(&hi));
        if (hi < lo) return Error("range out of order");
      }
      ranges.emplace_back(lo, hi);
    }
    return Sequence{CodepointClass(builder_, NormalizeRanges(std::move(ranges), negate))};
  }

  std::string_view text_;
  size_t pos_ = 0;
  GrammarBuilder builder_;
  absl::flat_hash_map<std::string, int32_t> rules_;
  std::vector<bool> defined_;
};

}  // namespace

absl::StatusOr<GrammarPtr> CompileEbnf(std::string_view text, const GrammarLimits& limits) {
  return EbnfParser(text, limits).Parse();
}

}  // namespace tandem::engine::grammar

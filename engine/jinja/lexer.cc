#include "engine/jinja/lexer.h"

#include <cctype>

#include "absl/strings/str_cat.h"
#include "engine/jinja/text.h"

namespace tandem::jinja {
namespace {

// Jinja2 treats only \r\n, \r and \n as line breaks and writes them all as \n; one trailing
// line break is dropped (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsAllPythonSpace(std::string_view text) {
  if (text.empty()) return false;
  const std::vector<size_t> offsets = CodePointOffsets(text);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (!IsPythonSpace(DecodeAt(text, offsets[i]))) return false;
  }
  return true;
}

std::string RStripPythonSpace(std::string_view text) { return PyStrip(text, nullptr, false, true); }

// Python's "unicode-escape" decoding of a string literal's body, as Jinja2 applies it.
absl::StatusOr<std::string> DecodeStringLiteral(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out.push_back(body[i]);
      continue;
    }
    const char e = body[++i];
    const auto hex = [&](size_t digits) -> absl::StatusOr<char32_t> {
      char32_t c = 0;
      for (size_t k = 1; k <= digits; ++k) {
        const char h = i + k < body.size() ? body[i + k] : '\0';
        if (!std::isxdigit(static_cast<unsigned char>(h))) {
          return absl::InvalidArgumentError(absl::StrCat(
              "line ", line, ": truncated \\", std::string(1, e), " escape in a string literal"));
        }
        c = c * 16 +
            static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                      ? h - '0'
                                      : std::tolower(static_cast<unsigned char>(h)) - 'a' + 10);
      }
      i += digits;
      return c;
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(e);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        auto c = hex(e == 'x' ? 2 : e == 'u' ? 4 : 8);
        if (!c.ok()) return c.status();
        if (*c > 0x10FFFF || (*c >= 0xD800 && *c <= 0xDFFF)) {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": string literal escape outside Unicode scalars"));
        }
        AppendUtf8(*c, &out);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t c = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            c = c * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          AppendUtf8(c, &out);
        } else if (e == 'N') {
          return absl::InvalidArgumentError(
              absl::StrCat("line ", line, ": \\N{...} escapes are not supported"));
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        Emit(Token::Kind::kText, src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      if (sign == '-') {
        text = RStripPythonSpace(text);
      } else if (sign != '+' && options_.lstrip_blocks && type != '{') {
        const size_t line_pos = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((line_pos > 0 || line_starting) &&
            IsAllPythonSpace(std::string_view(text).substr(line_pos))) {
          text.resize(line_pos);
        }
      }
      if (!text.empty()) Emit(Token::Kind::kText, text);
      CountLines(pos_, tag);
      pos_ = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      absl::Status status = type == '#'   ? Comment()
                            : type == '%' ? Tag(Token::Kind::kBlockBegin)
                                          : Tag(Token::Kind::kVariableBegin);
      if (!status.ok()) return status;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    Emit(Token::Kind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void Emit(Token::Kind kind, std::string value) {
    tokens_.push_back(Token{kind, std::move(value), line_});
  }
  void CountLines(size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) line_ += src_[i] == '\n';
  }
  void Advance(size_t to) {
    CountLines(pos_, to);
    pos_ = to;
  }

  // After a block or comment end: `-` strips all following whitespace, otherwise trim_blocks
  // drops one newline (unless the end was written `+%}`).
  void AfterBlockEnd(bool strip, bool keep) {
    if (strip) {
      size_t end = pos_;
      while (end < src_.size() && IsPythonSpace(DecodeAt(src_, end))) {
        end += CodePointOffsets(std::string_view(src_).substr(end, 4))[1];
      }
      Advance(end);
    } else if (!keep && options_.trim_blocks && pos_ < src_.size() && src_[pos_] == '\n') {
      Advance(pos_ + 1);
    }
  }

  absl::Status Comment() {
    const int start_line = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("line ", start_line, ": unclosed comment"));
    }
    const bool strip = end > pos_ && src_[end - 1] == '-';
    Advance(end + 2);
    AfterBlockEnd(strip, false);
    return absl::OkStatus();
  }

  // {% raw %} ... {% endraw %}: the text in between is literal.
  bool TryRaw() {
    size_t p = pos_;
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && std::isspace(static_cast<unsigned char>(src_[p]))) ++p;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    if (src_.compare(p, 2, "%}") != 0) return false;
    Advance(p + 2);
    AfterBlockEnd(src_[p - 1] == '-', src_[p - 1] == '+');
    for (size_t q = src_.find("{%", pos_); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t r = q + 2;
      const bool strip_before = r < src_.size() && src_[r] == '-';
      if (strip_before || (r < src_.size() && src_[r] == '+')) ++r;
      while (r < src_.size() && std::isspace(static_cast<unsigned char>(src_[r]))) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && std::isspace(static_cast<unsigned char>(src_[r]))) ++r;
      const char mod = r < src_.size() ? src_[r] : '\0';
      if (mod == '-' || mod == '+') ++r;
      if (src_.compare(r, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, q - pos_);
      if (strip_before) text = RStripPythonSpace(text);
      if (!text.empty()) Emit(Token::Kind::kText, text);
      Advance(r + 2);
      AfterBlockEnd(mod == '-', mod == '+');
      return true;
    }
    raw_unclosed_ = true;
    return true;
  }

  absl::Status Tag(Token::Kind begin) {
    const bool block = begin == Token::Kind::kBlockBegin;
    const int start_line = line_;
    if (block && TryRaw()) {
      if (raw_unclosed_) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", start_line, ": {% raw %} without {% endraw %}"));
      }
      return absl::OkStatus();
    }
    Emit(begin, "");
    std::vector<char> balance;
    while (true) {
      while (pos_ < src_.size() && std::isspace(static_cast<unsigned char>(src_[pos_]))) {
        Advance(pos_ + 1);
      }
      if (pos_ >= src_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("line ", start_line, ": unclosed ",
                                                       block ? "block tag {%" : "expression {{"));
      }
      const std::string_view rest = std::string_view(src_).substr(pos_);
      if (balance.empty()) {
        const std::string_view close = block ? "%}" : "}}";
        const bool strip = rest.size() > 2 && rest[0] == '-' && rest.substr(1, 2) == close;
        const bool keep = block && rest.size() > 2 && rest[0] == '+' && rest.substr(1, 2) == close;
        if (strip || keep || rest.substr(0, 2) == close) {
          Advance(pos_ + (strip || keep ? 3 : 2));
          Emit(block ? Token::Kind::kBlockEnd : Token::Kind::kVariableEnd, "");
          if (block) {
            AfterBlockEnd(strip, keep);
          } else if (strip) {
            AfterBlockEnd(true, false);
          }
          return absl::OkStatus();
        }
      }
      absl::Status status = ExpressionToken(rest, &balance);
      if (!status.ok()) return status;
    }
  }

  absl::Status ExpressionToken(std::string_view rest, std::vector<char>* balance) {
    const char c = rest[0];
    const auto is_digit = [](char ch) { return ch >= '0' && ch <= '9'; };
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t n = 1;
      while (n < rest.size() &&
             (std::isalnum(static_cast<unsigned char>(rest[n])) || rest[n] == '_'))
        ++n;
      Emit(Token::Kind::kName, std::string(rest.substr(0, n)));
      Advance(pos_ + n);
      return absl::OkStatus();
    }
    if (is_digit(c)) {
      size_t n = 0;
      std::string digits;
      const auto take_digits = [&] {
        while (n < rest.size() && (is_digit(rest[n]) || (rest[n] == '_' && n + 1 < rest.size() &&
                                                         is_digit(rest[n + 1])))) {
          if (rest[n] != '_') digits.push_back(rest[n]);
          ++n;
        }
      };
      take_digits();
      bool is_float = false;
      if (n + 1 < rest.size() && rest[n] == '.' && is_digit(rest[n + 1])) {
        is_float = true;
        digits.push_back('.');
        ++n;
        take_digits();
      }
      if (n < rest.size() && (rest[n] == 'e' || rest[n] == 'E')) {
        size_t m = n + 1;
        if (m < rest.size() && (rest[m] == '+' || rest[m] == '-')) ++m;
        if (m < rest.size() && is_digit(rest[m])) {
          is_float = true;
          digits.append(rest.substr(n, m - n));
          n = m;
          take_digits();
        }
      }
      Emit(is_float ? Token::Kind::kFloat : Token::Kind::kInteger, digits);
      Advance(pos_ + n);
      return absl::OkStatus();
    }
    if (c == '\'' || c == '"') {
      size_t n = 1;
      while (n < rest.size() && rest[n] != c) n += rest[n] == '\\' ? 2 : 1;
      if (n >= rest.size()) {
        return absl::InvalidArgumentError(absl::StrCat("line ", line_, ": unclosed string"));
      }
      auto decoded = DecodeStringLiteral(rest.substr(1, n - 1), line_);
      if (!decoded.ok()) return decoded.status();
      Emit(Token::Kind::kString, *decoded);
      Advance(pos_ + n + 1);
      return absl::OkStatus();
    }
    static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoChar) {
      if (rest.substr(0, 2) == op) {
        Emit(Token::Kind::kOperator, std::string(op));
        Advance(pos_ + 2);
        return absl::OkStatus();
      }
    }
    static constexpr std::string_view kOneChar = "+-*/%~[](){}<>=.:|,;";
    if (kOneChar.find(c) == std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line_, ": unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') balance->push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance->empty() || balance->back() != c) {
        return absl::InvalidArgumentError(
            absl::StrCat("line ", line_, ": unexpected '", std::string(1, c), "'"));
      }
      balance->pop_back();
    }
    Emit(Token::Kind::kOperator, std::string(1, c));
    Advance(pos_ + 1);
    return absl::OkStatus();
  }

  std::string src_;
  LexerOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  bool raw_unclosed_ = false;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(NormalizeNewlines(source), options).Run();
}

}  // namespace tandem::jinja

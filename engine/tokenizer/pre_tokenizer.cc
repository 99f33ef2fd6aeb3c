#include "engine/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/tokenizer/byte_level.h"

namespace tandem::engine {
namespace {

using json_fields::Json;

// Oniguruma's Unicode \s (the White_Space property), which PCRE2's \s under UCP does not match
// exactly (PCRE2 leaves out U+0085).
constexpr std::string_view kWhiteSpaceMembers =
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

// GPT-2's split regex, used by ByteLevel when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

// Rewrites \s and \S as explicit White_Space sets, outside and inside character classes.
std::string RewriteWhitespaceClasses(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's' || e == 'S') {
        if (in_class && e == 's') {
          out.append(kWhiteSpaceMembers);
        } else if (in_class) {
          out.append("\\S");  // A negated set inside a class: keep PCRE2's own.
        } else {
          out.append(e == 's' ? "[" : "[^").append(kWhiteSpaceMembers).append("]");
        }
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<Behavior> ParseBehavior(const std::string& name, const std::string& path) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return json_fields::FieldError(path, absl::StrCat("unknown split behavior \"", name, "\""));
}

// Per-thread PCRE2 scratch: match data sized for the whole-match pair and a JIT stack large
// enough for long runs of letters or spaces.
struct MatchScratch {
  MatchScratch()
      : data(pcre2_match_data_create(1, nullptr)),
        context(pcre2_match_context_create(nullptr)),
        jit_stack(pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr)) {
    if (context != nullptr && jit_stack != nullptr) {
      pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
  }
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;

  pcre2_match_data* data;
  pcre2_match_context* context;
  pcre2_jit_stack* jit_stack;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  const std::string rewritten = RewriteWhitespaceClasses(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("regex \"", std::string(pattern), "\" does not compile: ",
                     reinterpret_cast<const char*>(message), " (at offset ", offset, ")"));
  }
  // JIT is an optimisation only: without it pcre2_match interprets the pattern.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::FindAll(std::string_view text, std::vector<std::pair<size_t, size_t>>* matches) const {
  thread_local MatchScratch scratch;
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, scratch.data,
                               scratch.context);
    if (rc < 0) break;  // No match (a resource limit also ends the splitting here).
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      start = end;
    } else {
      // Empty match: step over one whole character.
      if (begin >= text.size()) break;
      start = begin + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
}

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel } kind;
  // kSplit
  std::unique_ptr<Regex> regex;  // null for a literal pattern
  std::string literal;
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
  // kByteLevel
  bool add_prefix_space = false;
  bool use_regex = true;

  void FindMatches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
    if (regex != nullptr) {
      regex->FindAll(text, out);
      return;
    }
    if (literal.empty()) return;
    size_t pos = 0;
    while ((pos = text.find(literal, pos)) != std::string_view::npos) {
      out->emplace_back(pos, pos + literal.size());
      pos += literal.size();
    }
  }

  void SplitPiece(std::string_view piece, std::vector<std::string>* out) const {
    std::vector<std::pair<size_t, size_t>> matches;
    FindMatches(piece, &matches);
    // Segments of the piece, each flagged as delimiter (a match, or a non-match if inverted).
    struct Segment {
      size_t begin, end;
      bool delimiter;
    };
    std::vector<Segment> segments;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      if (prev < b) segments.push_back({prev, b, invert});
      segments.push_back({b, e, !invert});
      prev = e;
    }
    if (prev < piece.size()) segments.push_back({prev, piece.size(), invert});

    // Mirrors SplitDelimiterBehavior in Hugging Face tokenizers, including how runs of
    // consecutive delimiters are treated.
    std::vector<std::pair<size_t, size_t>> result;
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& s = segments[i];
      const bool prev_delimiter = i > 0 && segments[i - 1].delimiter;
      switch (behavior) {
        case Behavior::kRemoved:
          if (!s.delimiter) result.emplace_back(s.begin, s.end);
          break;
        case Behavior::kIsolated:
          result.emplace_back(s.begin, s.end);
          break;
        case Behavior::kMergedWithPrevious:
          if (s.delimiter && !prev_delimiter && !result.empty()) {
            result.back().second = s.end;
          } else {
            result.emplace_back(s.begin, s.end);
          }
          break;
        case Behavior::kMergedWithNext: {
          // A delimiter joins the segment after it unless that one is a delimiter too.
          const bool joins_next =
              s.delimiter && i + 1 < segments.size() && !segments[i + 1].delimiter;
          if (joins_next) {
            result.emplace_back(s.begin, segments[i + 1].end);
            ++i;
          } else {
            result.emplace_back(s.begin, s.end);
          }
          break;
        }
        case Behavior::kContiguous:
          if (s.delimiter && prev_delimiter) {
            result.back().second = s.end;
          } else {
            result.emplace_back(s.begin, s.end);
          }
          break;
      }
    }
    for (const auto& [b, e] : result) {
      if (e > b) out->emplace_back(piece.substr(b, e - b));
    }
  }

  void ByteLevelPiece(std::string_view piece, const Regex& gpt2,
                      std::vector<std::string>* out) const {
    std::string text;
    if (add_prefix_space && (piece.empty() || piece[0] != ' ')) text.push_back(' ');
    text.append(piece);
    std::vector<std::pair<size_t, size_t>> ranges;
    if (use_regex) {
      gpt2.FindAll(text, &ranges);
    } else {
      ranges.emplace_back(0, text.size());
    }
    for (const auto& [b, e] : ranges) {
      if (e <= b) continue;
      std::string mapped;
      BytesToByteLevel(std::string_view(text).substr(b, e - b), &mapped);
      out->push_back(std::move(mapped));
    }
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

namespace {

const Regex& Gpt2Regex() {
  static const Regex* regex = Regex::Compile(kGpt2Pattern).value().release();
  return *regex;
}

}  // namespace

absl::Status PreTokenizer::Parse(const Json& value, const std::string& path,
                                 std::vector<std::unique_ptr<Step>>* steps) {
  if (value.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, json_fields::GetString(value, path, "type"));
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    const std::string list_path = json_fields::Join(path, "pretokenizers");
    ASSIGN_OR_RETURN(const Json* list, json_fields::Member(value, path, "pretokenizers"));
    RETURN_IF_ERROR(json_fields::ExpectArray(*list, list_path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(Parse((*list)[i], json_fields::Index(list_path, i), steps));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    step->kind = Step::Kind::kSplit;
    const std::string pattern_path = json_fields::Join(path, "pattern");
    ASSIGN_OR_RETURN(const Json* pattern, json_fields::Member(value, path, "pattern"));
    RETURN_IF_ERROR(json_fields::ExpectObject(*pattern, pattern_path));
    if (pattern->contains("Regex")) {
      ASSIGN_OR_RETURN(const std::string re,
                       json_fields::GetString(*pattern, pattern_path, "Regex"));
      ASSIGN_OR_RETURN(step->regex, Regex::Compile(re),
                       absl::StrCat("field `", pattern_path, ".Regex`: "));
    } else if (pattern->contains("String")) {
      ASSIGN_OR_RETURN(step->literal, json_fields::GetString(*pattern, pattern_path, "String"));
    } else {
      return json_fields::FieldError(pattern_path, "expected a \"Regex\" or \"String\" member");
    }
    ASSIGN_OR_RETURN(const std::string behavior, json_fields::GetString(value, path, "behavior"));
    ASSIGN_OR_RETURN(step->behavior, ParseBehavior(behavior, json_fields::Join(path, "behavior")));
    ASSIGN_OR_RETURN(step->invert, json_fields::GetBool(value, path, "invert", false));
  } else if (type == "ByteLevel") {
    step->kind = Step::Kind::kByteLevel;
    ASSIGN_OR_RETURN(step->add_prefix_space,
                     json_fields::GetBool(value, path, "add_prefix_space", true));
    ASSIGN_OR_RETURN(step->use_regex, json_fields::GetBool(value, path, "use_regex", true));
  } else {
    return json_fields::FieldError(json_fields::Join(path, "type"),
                                   absl::StrCat("unsupported pre-tokenizer type \"", type, "\""));
  }
  steps->push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& value,
                                                                     const std::string& path) {
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  RETURN_IF_ERROR(Parse(value, path, &pre->steps_));
  return pre;
}

bool PreTokenizer::byte_level() const {
  for (const auto& step : steps_) {
    if (step->kind == Step::Kind::kByteLevel) return true;
  }
  return false;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string>* pieces) const {
  std::vector<std::string> current;
  current.emplace_back(text);
  std::vector<std::string> next;
  for (const auto& step : steps_) {
    next.clear();
    for (const std::string& piece : current) {
      if (step->kind == Step::Kind::kSplit) {
        step->SplitPiece(piece, &next);
      } else {
        step->ByteLevelPiece(piece, Gpt2Regex(), &next);
      }
    }
    current.swap(next);
  }
  for (std::string& piece : current) {
    if (!piece.empty()) pieces->push_back(std::move(piece));
  }
}

}  // namespace tandem::engine

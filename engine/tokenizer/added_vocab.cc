#include "engine/tokenizer/added_vocab.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/tokenizer/unicode_class.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

using json_fields::Json;

// Code point of the last character of well-formed `text` (non-empty).
char32_t LastChar(std::string_view text) {
  size_t i = text.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  size_t len = 0;
  return DecodeUtf8(text.substr(i), &len);
}

char32_t FirstChar(std::string_view text) {
  size_t len = 0;
  return DecodeUtf8(text, &len);
}

}  // namespace

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json* value,
                                                          const std::string& path) {
  AddedVocabulary vocab;
  if (value == nullptr) return vocab;
  RETURN_IF_ERROR(json_fields::ExpectArray(*value, path));
  for (size_t i = 0; i < value->size(); ++i) {
    const std::string entry_path = json_fields::Index(path, i);
    const Json& entry = (*value)[i];
    AddedToken token;
    ASSIGN_OR_RETURN(token.content, json_fields::GetString(entry, entry_path, "content"));
    ASSIGN_OR_RETURN(const Json* id, json_fields::Member(entry, entry_path, "id"));
    if (!id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() > 16 * 1024 * 1024) {
      return json_fields::FieldError(json_fields::Join(entry_path, "id"),
                                     "expected a non-negative integer id");
    }
    token.id = static_cast<int32_t>(id->get<int64_t>());
    if (token.content.empty()) {
      return json_fields::FieldError(json_fields::Join(entry_path, "content"), "is empty");
    }
    if (!IsValidUtf8(token.content)) {
      return json_fields::FieldError(json_fields::Join(entry_path, "content"),
                                     "is not valid UTF-8");
    }
    ASSIGN_OR_RETURN(token.special, json_fields::GetBool(entry, entry_path, "special", false));
    ASSIGN_OR_RETURN(token.lstrip, json_fields::GetBool(entry, entry_path, "lstrip", false));
    ASSIGN_OR_RETURN(token.rstrip, json_fields::GetBool(entry, entry_path, "rstrip", false));
    ASSIGN_OR_RETURN(token.single_word,
                     json_fields::GetBool(entry, entry_path, "single_word", false));
    // Hugging Face defaults `normalized` to the opposite of `special`.
    ASSIGN_OR_RETURN(token.normalized,
                     json_fields::GetBool(entry, entry_path, "normalized", !token.special));
    vocab.has_normalized_ |= token.normalized;
    vocab.max_id_ = std::max(vocab.max_id_, token.id);
    const size_t index = vocab.tokens_.size();
    vocab.by_id_[token.id] = index;
    vocab.by_content_[token.content] = index;
    vocab.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocab.tokens_.size(); ++i) {
    vocab.by_first_byte_[static_cast<unsigned char>(vocab.tokens_[i].content[0])].push_back(i);
  }
  for (auto& list : vocab.by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&vocab](size_t a, size_t b) {
      return vocab.tokens_[a].content.size() > vocab.tokens_[b].content.size();
    });
  }
  return vocab;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::FindContent(std::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

std::optional<AddedVocabulary::Match> AddedVocabulary::FindNext(std::string_view text, size_t from,
                                                                bool normalized) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (size_t index : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
      const AddedToken& token = tokens_[index];
      if (token.normalized != normalized) continue;
      if (text.compare(pos, token.content.size(), token.content) != 0) continue;
      const size_t end = pos + token.content.size();
      if (token.single_word) {
        const bool word_before = pos > 0 && IsWordChar(LastChar(text.substr(0, pos)));
        const bool word_after = end < text.size() && IsWordChar(FirstChar(text.substr(end)));
        if (word_before || word_after) continue;
      }
      return Match{pos, end, &token};  // Longest first, so the first hit is the longest.
    }
  }
  return std::nullopt;
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::Split(std::string_view text,
                                                             bool normalized) const {
  std::vector<Segment> segments;
  size_t start = 0;  // Start of the text not yet assigned to a segment.
  size_t search = 0;
  while (search < text.size()) {
    std::optional<Match> match = FindNext(text, search, normalized);
    if (!match) break;
    size_t begin = match->begin;
    size_t end = match->end;
    if (match->token->lstrip) {
      while (begin > start) {
        const std::string_view before = text.substr(start, begin - start);
        const char32_t c = LastChar(before);
        if (!IsWhiteSpace(c)) break;
        size_t len = 0;
        std::string tmp;
        AppendUtf8(c, &tmp);
        len = tmp.size();
        begin -= len;
      }
    }
    if (match->token->rstrip) {
      while (end < text.size()) {
        size_t len = 0;
        const char32_t c = DecodeUtf8(text.substr(end), &len);
        if (!IsWhiteSpace(c)) break;
        end += len;
      }
    }
    if (begin > start) segments.push_back({text.substr(start, begin - start), std::nullopt});
    segments.push_back({text.substr(match->begin, match->end - match->begin), match->token->id});
    start = end;
    search = end;
  }
  if (start < text.size()) segments.push_back({text.substr(start), std::nullopt});
  return segments;
}

}  // namespace tandem::engine

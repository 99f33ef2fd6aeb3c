#include "engine/tokenizer/bpe_model.h"

#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

using json_fields::Json;

// Length of the character starting at piece[i] (pieces are well-formed UTF-8, but stay safe).
size_t CharLength(std::string_view piece, size_t i) {
  const size_t n = ValidSequenceLength(piece.substr(i));
  return n == 0 ? 1 : n;
}

// Legacy form "left right": exactly one space separates the two halves.
absl::Status SplitLegacyMerge(const std::string& line, const std::string& path, std::string* left,
                              std::string* right) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
    return json_fields::FieldError(
        path, absl::StrCat("merge \"", line, "\" is not two tokens separated by one space"));
  }
  *left = line.substr(0, space);
  *right = line.substr(space + 1);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const Json& model,
                                                             const std::string& path,
                                                             const BpeTables* tables) {
  RETURN_IF_ERROR(json_fields::ExpectObject(model, path));
  // Older files omit `type` for BPE; a vocab plus merges identifies it.
  std::string type = "BPE";
  if (json_fields::OptionalMember(model, "type") != nullptr) {
    ASSIGN_OR_RETURN(type, json_fields::GetString(model, path, "type"));
  }
  if (type != "BPE") {
    return json_fields::FieldError(json_fields::Join(path, "type"),
                                   absl::StrCat("unsupported model type \"", type,
                                                "\" (only byte-pair encoding, \"BPE\", is "
                                                "supported)"));
  }
  std::unique_ptr<BpeModel> bpe(new BpeModel());

  // Gather the vocabulary and merges, streamed by the reader or from the DOM.
  const std::string vocab_path = json_fields::Join(path, "vocab");
  std::vector<std::pair<std::string, int64_t>> dom_vocab;
  const std::vector<std::pair<std::string, int64_t>>* vocab = &tables->vocab;
  if (!tables->has_vocab) {
    ASSIGN_OR_RETURN(const Json* v, json_fields::Member(model, path, "vocab"));
    RETURN_IF_ERROR(json_fields::ExpectObject(*v, vocab_path));
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() > INT32_MAX - 1) {
        return json_fields::FieldError(absl::StrCat(vocab_path, "[\"", it.key(), "\"]"),
                                       "expected a non-negative integer id");
      }
      dom_vocab.emplace_back(it.key(), it.value().get<int64_t>());
    }
    vocab = &dom_vocab;
  }
  const std::string merges_path = json_fields::Join(path, "merges");
  std::vector<BpeTables::MergeEntry> dom_merges;
  const std::vector<BpeTables::MergeEntry>* merges = &tables->merges;
  if (!tables->has_merges) {
    if (const Json* m = json_fields::OptionalMember(model, "merges")) {
      RETURN_IF_ERROR(json_fields::ExpectArray(*m, merges_path));
      for (size_t i = 0; i < m->size(); ++i) {
        const Json& entry = (*m)[i];
        if (entry.is_string()) {
          dom_merges.push_back({entry.get<std::string>(), std::string(), true});
        } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                   entry[1].is_string()) {
          dom_merges.push_back({entry[0].get<std::string>(), entry[1].get<std::string>(), false});
        } else {
          return json_fields::FieldError(json_fields::Index(merges_path, i),
                                         "expected \"a b\" or [\"a\", \"b\"]");
        }
      }
    }
    merges = &dom_merges;
  }

  bpe->vocab_.reserve(vocab->size());
  int64_t max_id = -1;
  for (const auto& [token, id] : *vocab) {
    bpe->vocab_[token] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  if (max_id > 16 * 1024 * 1024) {
    return json_fields::FieldError(vocab_path,
                                   absl::StrCat("id ", max_id, " is implausibly large"));
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [token, id] : bpe->vocab_) bpe->id_to_token_[id] = token;

  bpe->merges_.reserve(merges->size());
  std::string left, right, joined;
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string entry_path = json_fields::Index(merges_path, i);
    const BpeTables::MergeEntry& entry = (*merges)[i];
    if (entry.legacy) {
      RETURN_IF_ERROR(SplitLegacyMerge(entry.left, entry_path, &left, &right));
    } else {
      left = entry.left;
      right = entry.right;
    }
    joined = left + right;
    auto l = bpe->vocab_.find(left);
    auto r = bpe->vocab_.find(right);
    auto m = bpe->vocab_.find(joined);
    for (const auto& [it, name] :
         {std::pair{l, &left}, std::pair{r, &right}, std::pair{m, &joined}}) {
      if (it == bpe->vocab_.end()) {
        return json_fields::FieldError(
            entry_path, absl::StrCat("token \"", *name, "\" is not in the vocabulary"));
      }
    }
    // The first occurrence of a pair sets its rank, as in the reference implementation.
    bpe->merges_.try_emplace(PairKey(l->second, r->second),
                             MergeTarget{static_cast<int32_t>(i), m->second});
  }

  if (const Json* unk = json_fields::OptionalMember(model, "unk_token")) {
    if (!unk->is_string()) {
      return json_fields::FieldError(json_fields::Join(path, "unk_token"), "expected a string");
    }
    auto it = bpe->vocab_.find(unk->get<std::string>());
    if (it == bpe->vocab_.end()) {
      return json_fields::FieldError(json_fields::Join(path, "unk_token"),
                                     "token is not in the vocabulary");
    }
    bpe->unk_id_ = it->second;
  }
  ASSIGN_OR_RETURN(bpe->fuse_unk_, json_fields::GetBool(model, path, "fuse_unk", false));
  ASSIGN_OR_RETURN(bpe->byte_fallback_, json_fields::GetBool(model, path, "byte_fallback", false));
  ASSIGN_OR_RETURN(bpe->ignore_merges_, json_fields::GetBool(model, path, "ignore_merges", false));
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = json_fields::OptionalMember(model, affix);
    if (v != nullptr && !(v->is_string() && v->get_ref<const std::string&>().empty())) {
      return json_fields::FieldError(json_fields::Join(path, affix),
                                     "only an empty or null affix is supported");
    }
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(absl::string_view(token.data(), token.size()));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  const std::string& token = id_to_token_[id];
  if (token.empty()) return nullptr;
  return &token;
}

void BpeModel::AppendUnknown(std::string_view ch, std::vector<int32_t>* ids) const {
  if (byte_fallback_) {
    std::vector<int32_t> bytes;
    bool all_found = true;
    for (char c : ch) {
      auto id = TokenToId(absl::StrFormat("<0x%02X>", static_cast<unsigned char>(c)));
      if (!id) {
        all_found = false;
        break;
      }
      bytes.push_back(*id);
    }
    if (all_found) {
      ids->insert(ids->end(), bytes.begin(), bytes.end());
      return;
    }
  }
  // No unknown token: the character is dropped, as the reference implementation does.
  if (unk_id_) ids->push_back(*unk_id_);
}

void BpeModel::Merge(std::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  std::vector<int32_t> unknown_ids;
  auto push = [&symbols](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  for (size_t i = 0; i < piece.size();) {
    const size_t n = CharLength(piece, i);
    const std::string_view ch = piece.substr(i, n);
    i += n;
    if (auto id = TokenToId(ch)) {
      push(*id);
      continue;
    }
    // Not in the vocabulary: byte-fallback tokens, the unknown token, or nothing.
    unknown_ids.clear();
    if (fuse_unk_ && unk_id_ && !symbols.empty() && symbols.back().id == *unk_id_) {
      unknown_ids.push_back(*unk_id_);
    }
    const size_t fused = unknown_ids.size();
    AppendUnknown(ch, &unknown_ids);
    for (size_t k = fused; k < unknown_ids.size(); ++k) {
      if (fused == 1 && unknown_ids[k] == *unk_id_) continue;  // fused into the previous unk
      push(unknown_ids[k]);
    }
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int32_t right_pos = left.next;
    auto it = merges_.find(PairKey(left.id, symbols[right_pos].id));
    if (it == merges_.end() || it->second.id != top.new_id) continue;  // stale entry
    left.id = top.new_id;
    symbols[right_pos].alive = false;
    left.next = symbols[right_pos].next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

void BpeModel::EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = TokenToId(piece)) {
      ids->push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  const absl::string_view key(piece.data(), piece.size());
  if (cacheable) {
    absl::ReaderMutexLock lock(&cache_mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = ids->size();
  Merge(piece, ids);
  if (cacheable) {
    absl::MutexLock lock(&cache_mu_);
    // Bounded: once full, further pieces are simply not memoised.
    if (cache_.size() < kCacheCapacity) {
      cache_.try_emplace(key, ids->begin() + static_cast<std::ptrdiff_t>(first), ids->end());
    }
  }
}

}  // namespace tandem::engine

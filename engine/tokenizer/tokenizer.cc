#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/tokenizer_json_reader.h"
#include "engine/tokenizer/tokenizer_state.h"
#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

using json_fields::Json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return std::move(buffer).str();
}

absl::StatusOr<Json> ParseJson(std::string_view contents) {
  try {
    return Json::parse(contents.begin(), contents.end());
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
}

// Ids a post-processor adds around a single sequence.
absl::Status ParsePostProcessor(const Json& value, const std::string& path,
                                const AddedVocabulary& added, const BpeModel& model,
                                std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
  if (value.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, json_fields::GetString(value, path, "type"));
  if (type == "ByteLevel") return absl::OkStatus();  // Offsets only; ids are unchanged.
  if (type == "Sequence") {
    const std::string list_path = json_fields::Join(path, "processors");
    ASSIGN_OR_RETURN(const Json* list, json_fields::Member(value, path, "processors"));
    RETURN_IF_ERROR(json_fields::ExpectArray(*list, list_path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(ParsePostProcessor((*list)[i], json_fields::Index(list_path, i), added, model,
                                         prefix, suffix));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return json_fields::FieldError(json_fields::Join(path, "type"),
                                   absl::StrCat("unsupported post-processor type \"", type, "\""));
  }
  const std::string single_path = json_fields::Join(path, "single");
  ASSIGN_OR_RETURN(const Json* single, json_fields::Member(value, path, "single"));
  RETURN_IF_ERROR(json_fields::ExpectArray(*single, single_path));
  const Json* specials = json_fields::OptionalMember(value, "special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const std::string item_path = json_fields::Index(single_path, i);
    const Json& item = (*single)[i];
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string special_path = json_fields::Join(item_path, "SpecialToken");
    ASSIGN_OR_RETURN(const Json* special, json_fields::Member(item, item_path, "SpecialToken"));
    ASSIGN_OR_RETURN(const std::string name, json_fields::GetString(*special, special_path, "id"));
    std::vector<int32_t> ids;
    const Json* entry = specials != nullptr && specials->is_object() && specials->contains(name)
                            ? &(*specials)[name]
                            : nullptr;
    if (entry != nullptr && entry->is_object() && entry->contains("ids") &&
        (*entry)["ids"].is_array()) {
      for (const Json& id : (*entry)["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          return json_fields::FieldError(json_fields::Join(path, "special_tokens"),
                                         absl::StrCat("bad id for \"", name, "\""));
        }
        ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
    } else if (auto id = added.FindContent(name)) {
      ids.push_back(*id);
    } else if (auto model_id = model.TokenToId(name)) {
      ids.push_back(*model_id);
    } else {
      return json_fields::FieldError(special_path,
                                     absl::StrCat("unknown special token \"", name, "\""));
    }
    auto* target = seen_sequence ? suffix : prefix;
    target->insert(target->end(), ids.begin(), ids.end());
  }
  return absl::OkStatus();
}

absl::Status ParseDecoder(const Json& value, const std::string& path, bool* byte_level) {
  if (value.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, json_fields::GetString(value, path, "type"));
  if (type == "ByteLevel") {
    *byte_level = true;
    return absl::OkStatus();
  }
  if (type == "Sequence") {
    const std::string list_path = json_fields::Join(path, "decoders");
    ASSIGN_OR_RETURN(const Json* list, json_fields::Member(value, path, "decoders"));
    RETURN_IF_ERROR(json_fields::ExpectArray(*list, list_path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(ParseDecoder((*list)[i], json_fields::Index(list_path, i), byte_level));
    }
    return absl::OkStatus();
  }
  return json_fields::FieldError(json_fields::Join(path, "type"),
                                 absl::StrCat("unsupported decoder type \"", type, "\""));
}

absl::Status ParseTokenizerJson(const Json& root, const BpeTables& tables,
                                Tokenizer::State* state) {
  RETURN_IF_ERROR(json_fields::ExpectObject(root, "(root)"));
  ASSIGN_OR_RETURN(const Json* model, json_fields::Member(root, "", "model"));
  ASSIGN_OR_RETURN(state->model, BpeModel::FromJson(*model, "model", &tables));
  ASSIGN_OR_RETURN(
      state->added,
      AddedVocabulary::FromJson(json_fields::OptionalMember(root, "added_tokens"), "added_tokens"));
  static const Json kNull;
  auto member_or_null = [&root](const char* key) -> const Json& {
    const Json* v = json_fields::OptionalMember(root, key);
    return v != nullptr ? *v : kNull;
  };
  ASSIGN_OR_RETURN(state->normalizer,
                   Normalizer::FromJson(member_or_null("normalizer"), "normalizer"));
  ASSIGN_OR_RETURN(state->pre_tokenizer,
                   PreTokenizer::FromJson(member_or_null("pre_tokenizer"), "pre_tokenizer"));
  RETURN_IF_ERROR(ParsePostProcessor(member_or_null("post_processor"), "post_processor",
                                     state->added, *state->model, &state->prefix_ids,
                                     &state->suffix_ids));
  RETURN_IF_ERROR(ParseDecoder(member_or_null("decoder"), "decoder", &state->byte_level_decoder));
  if (state->pre_tokenizer->byte_level() != state->byte_level_decoder) {
    return json_fields::FieldError("decoder",
                                   "a ByteLevel pre-tokenizer needs a ByteLevel decoder and "
                                   "vice versa");
  }
  return absl::OkStatus();
}

// A special token of tokenizer_config.json: a string, {"content": ...} or null.
absl::StatusOr<std::string> ConfigToken(const Json& config, const char* key) {
  const Json* v = json_fields::OptionalMember(config, key);
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return json_fields::GetString(*v, key, "content");
  return json_fields::FieldError(key, "expected a string, an object with \"content\" or null");
}

absl::Status ParseConfig(const Json& config, const Tokenizer& tokenizer, Tokenizer::State* state) {
  RETURN_IF_ERROR(json_fields::ExpectObject(config, "(root)"));
  ASSIGN_OR_RETURN(state->clean_up_tokenization_spaces,
                   json_fields::GetBool(config, "", "clean_up_tokenization_spaces", true));
  ASSIGN_OR_RETURN(std::string bos, ConfigToken(config, "bos_token"));
  if (!bos.empty()) {
    state->bos_id = tokenizer.TokenId(bos);
    if (!state->bos_id) {
      return json_fields::FieldError("bos_token", absl::StrCat("\"", bos, "\" is not a token"));
    }
    state->bos_token = bos;
  }
  ASSIGN_OR_RETURN(std::string eos, ConfigToken(config, "eos_token"));
  if (!eos.empty()) {
    auto id = tokenizer.TokenId(eos);
    if (!id)
      return json_fields::FieldError("eos_token", absl::StrCat("\"", eos, "\" is not a token"));
    state->eos_ids.push_back(*id);
  }
  ASSIGN_OR_RETURN(const bool add_bos, json_fields::GetBool(config, "", "add_bos_token", false));
  if (add_bos && state->bos_id &&
      (state->prefix_ids.empty() || state->prefix_ids.front() != *state->bos_id)) {
    state->prefix_ids.insert(state->prefix_ids.begin(), *state->bos_id);
  }
  if (const Json* tpl = json_fields::OptionalMember(config, "chat_template")) {
    if (tpl->is_string()) {
      state->chat_template = tpl->get<std::string>();
    } else if (tpl->is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, ...].
      for (const Json& entry : *tpl) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          state->chat_template = entry["template"].get<std::string>();
        }
      }
    } else {
      return json_fields::FieldError("chat_template", "expected a string or a list of templates");
    }
  }
  if (!state->chat_template.empty()) {
    // A template Tandem cannot parse leaves the tokenizer usable for raw prompts; chat
    // requests then fail with this status rather than use a different template.
    auto parsed = jinja::Template::Parse(state->chat_template);
    if (parsed.ok()) {
      state->jinja_template = std::move(*parsed);
    } else {
      state->jinja_status = absl::FailedPreconditionError(absl::StrCat(
          "tokenizer_config.json: chat_template is not supported: ", parsed.status().message()));
    }
  }
  // The special tokens Hugging Face passes to the template (special_tokens_map).
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    auto token = ConfigToken(config, key);
    if (token.ok() && !token->empty())
      state->special_tokens.emplace_back(key, jinja::Value(*token));
  }
  if (const Json* extra = json_fields::OptionalMember(config, "additional_special_tokens");
      extra != nullptr && extra->is_array()) {
    jinja::List tokens;
    for (const Json& t : *extra) {
      if (t.is_string()) tokens.emplace_back(t.get<std::string>());
      if (t.is_object() && t.contains("content") && t["content"].is_string()) {
        tokens.emplace_back(t["content"].get<std::string>());
      }
    }
    state->special_tokens.emplace_back("additional_special_tokens",
                                       jinja::Value(std::move(tokens)));
  }
  return absl::OkStatus();
}

void CleanUpTokenizationSpaces(std::string* text) {
  // The same replacements, in the same order, as transformers' clean_up_tokenization.
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    if (text->find(from) == std::string::npos) continue;
    *text = absl::StrReplaceAll(*text, {{absl::string_view(from.data(), from.size()),
                                         absl::string_view(to.data(), to.size())}});
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromStrings(
    std::string_view tokenizer_contents, std::string_view config_contents,
    const std::string& source) {
  auto state = std::make_unique<State>();
  const std::string prefix = absl::StrCat(source, ": ");
  BpeTables tables;
  ASSIGN_OR_RETURN(const Json root, ReadTokenizerJson(tokenizer_contents, &tables), prefix);
  RETURN_IF_ERROR(ParseTokenizerJson(root, tables, state.get()), prefix);
  State* raw = state.get();
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer(std::move(state)));
  // The config is resolved against the loaded vocabulary, so it is parsed second.
  if (!config_contents.empty()) {
    const std::string config_prefix = "tokenizer_config.json: ";
    ASSIGN_OR_RETURN(const Json config, ParseJson(config_contents), config_prefix);
    RETURN_IF_ERROR(ParseConfig(config, *tokenizer, raw), config_prefix);
  }
  raw->family = DetectChatFamily(raw->chat_template, raw->added);
  // End-of-turn tokens of the family end generation too.
  std::vector<std::string> family_eos;
  if (raw->family == ChatFamily::kChatMl || raw->family == ChatFamily::kQwen3) {
    family_eos = {"<|im_end|>", "<|endoftext|>"};
  } else if (raw->family == ChatFamily::kLlama3) {
    family_eos = {"<|eot_id|>", "<|end_of_text|>", "<|eom_id|>"};
  }
  for (const std::string& token : family_eos) {
    auto id = tokenizer->TokenId(token);
    if (id && std::find(raw->eos_ids.begin(), raw->eos_ids.end(), *id) == raw->eos_ids.end()) {
      raw->eos_ids.push_back(*id);
    }
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFiles(
    const std::string& tokenizer_json, const std::string& tokenizer_config_json) {
  ASSIGN_OR_RETURN(const std::string contents, ReadFile(tokenizer_json));
  std::string config;
  if (!tokenizer_config_json.empty()) {
    ASSIGN_OR_RETURN(config, ReadFile(tokenizer_config_json));
  }
  auto tokenizer = FromStrings(contents, config, tokenizer_json);
  if (!tokenizer.ok() && !config.empty() &&
      absl::StartsWith(tokenizer.status().message(), "tokenizer_config.json: ")) {
    // Name the config file by its full path.
    return absl::Status(
        tokenizer.status().code(),
        absl::StrCat(tokenizer_config_json, tokenizer.status().message().substr(
                                                std::string_view("tokenizer_config.json").size())));
  }
  return tokenizer;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromModelDir(const std::string& dir) {
  const std::string config = dir + "/tokenizer_config.json";
  std::ifstream probe(config);
  return FromFiles(dir + "/tokenizer.json", probe.good() ? config : std::string());
}

std::vector<int32_t> Tokenizer::Encode(std::string_view raw, bool add_special_tokens) const {
  const State& s = *state_;
  const std::string text = SanitizeUtf8(raw);
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = s.prefix_ids;
  std::vector<std::string> pieces;
  auto encode_plain = [&](std::string_view plain) {
    pieces.clear();
    s.pre_tokenizer->Split(plain, &pieces);
    for (const std::string& piece : pieces) s.model->EncodePiece(piece, &ids);
  };
  for (const AddedVocabulary::Segment& segment : s.added.Split(text, /*normalized=*/false)) {
    if (segment.id) {
      ids.push_back(*segment.id);
      continue;
    }
    const std::string normalized =
        s.normalizer.empty() ? std::string(segment.text) : s.normalizer.Normalize(segment.text);
    if (!s.added.has_normalized()) {
      encode_plain(normalized);
      continue;
    }
    for (const AddedVocabulary::Segment& sub : s.added.Split(normalized, /*normalized=*/true)) {
      if (sub.id) {
        ids.push_back(*sub.id);
      } else {
        encode_plain(sub.text);
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), s.suffix_ids.begin(), s.suffix_ids.end());
  return ids;
}

std::string Tokenizer::TokenBytes(int32_t id, bool skip_special_tokens) const {
  const State& s = *state_;
  if (const AddedToken* added = s.added.Find(id)) {
    if (skip_special_tokens && added->special) return std::string();
    return added->content;
  }
  const std::string* token = s.model->IdToToken(id);
  if (token == nullptr) return std::string();
  if (!s.byte_level_decoder) return *token;
  std::string bytes;
  ByteLevelToBytes(*token, &bytes);
  return bytes;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const State& s = *state_;
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    const std::string piece = TokenBytes(id, skip_special_tokens);
    if (piece.empty()) continue;
    // Without a decoder, Hugging Face joins tokens with spaces.
    if (!s.byte_level_decoder && !first) bytes.push_back(' ');
    bytes.append(piece);
    first = false;
  }
  std::string text = SanitizeUtf8(bytes);
  if (s.clean_up_tokenization_spaces) CleanUpTokenizationSpaces(&text);
  return text;
}

int32_t Tokenizer::vocab_size() const {
  return std::max(state_->model->size(), state_->added.max_id() + 1);
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  if (auto id = state_->added.FindContent(token)) return id;
  return state_->model->TokenToId(token);
}

std::vector<int32_t> Tokenizer::eos_token_ids() const { return state_->eos_ids; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return state_->bos_id; }
ChatFamily Tokenizer::chat_family() const { return state_->family; }

absl::Status Tokenizer::chat_template_status() const { return state_->jinja_status; }

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                         const ChatTemplateOptions& options) const {
  if (state_->jinja_template != nullptr) {
    return RenderChatJinja(*state_, messages, options);
  }
  RETURN_IF_ERROR(state_->jinja_status);
  // The native renderings know plain-text turns only.
  const bool plain = std::all_of(messages.begin(), messages.end(),
                                 [](const ChatMessage& m) { return m.extra.empty(); });
  if (!plain || !options.tools.is_null()) {
    return absl::FailedPreconditionError(
        "tokenizer_config.json has no chat_template: tools, tool calls and other message fields "
        "need the checkpoint's own template");
  }
  return RenderChat(*state_, messages, options.add_generation_prompt);
}

}  // namespace tandem::engine

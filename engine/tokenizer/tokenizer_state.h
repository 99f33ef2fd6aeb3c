// Internal: the loaded pieces of a Tokenizer, shared by its .cc files. Not a public header.
#ifndef TANDEM_ENGINE_TOKENIZER_TOKENIZER_STATE_H_
#define TANDEM_ENGINE_TOKENIZER_TOKENIZER_STATE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/jinja/template.h"
#include "engine/tokenizer/added_vocab.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace tandem::engine {

struct Tokenizer::State {
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  Normalizer normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  bool byte_level_decoder = false;
  // Ids the post-processor puts around a single sequence.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;

  // From tokenizer_config.json.
  bool clean_up_tokenization_spaces = true;
  std::optional<int32_t> bos_id;
  std::string bos_token;  // "" when the model has none
  std::vector<int32_t> eos_ids;
  ChatFamily family = ChatFamily::kNone;
  std::string chat_template;  // the Jinja source, used to detect template variants
  // chat_template parsed (null: none, or `jinja_status` says why it could not be parsed).
  std::unique_ptr<const jinja::Template> jinja_template;
  absl::Status jinja_status;
  // bos_token, eos_token, ... and additional_special_tokens as set in tokenizer_config.json,
  // the template variables Hugging Face passes (unset ones are left out).
  jinja::Dict special_tokens;
};

// Renders `messages` with state.jinja_template (chat_jinja.cc).
absl::StatusOr<std::string> RenderChatJinja(const Tokenizer::State& state,
                                            const std::vector<ChatMessage>& messages,
                                            const ChatTemplateOptions& options);

// Renders `messages` for `state`'s chat family (chat_template.cc).
absl::StatusOr<std::string> RenderChat(const Tokenizer::State& state,
                                       const std::vector<ChatMessage>& messages,
                                       bool add_generation_prompt);

// Detects the chat family from the template source and the added tokens.
ChatFamily DetectChatFamily(const std::string& chat_template, const AddedVocabulary& added);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_TOKENIZER_STATE_H_

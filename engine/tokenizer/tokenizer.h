// Tokenizer: Hugging Face `tokenizer.json` byte-level BPE (as used by Llama-3 and Qwen2/2.5/3)
// plus the parts of `tokenizer_config.json` that serving needs (BOS/EOS, clean-up of
// tokenization spaces, the chat template family).
//
// Pipeline of Encode, as in Hugging Face tokenizers: invalid UTF-8 is replaced by U+FFFD →
// added/special tokens are cut out of the raw text → the rest is normalized (NFC …) →
// normalized added tokens are cut out → pre-tokenizer (Split regex, ByteLevel) → BPE → the
// post-processor's template (e.g. a BOS token).
//
// Thread-safety: a Tokenizer is immutable after loading; Encode, Decode and every accessor may
// be called concurrently from any number of threads. IncrementalDetokenizer is a per-stream
// object used by one thread at a time; it borrows the Tokenizer, which must outlive it.
//
// Supported: model type BPE (merges as "a b" strings or ["a", "b"] pairs, ignore_merges,
// byte_fallback, unk_token/fuse_unk); normalizers NFC/NFD/NFKC/NFKD and Sequence; pre-tokenizers
// Split (regex or string, all behaviours, invert), ByteLevel and Sequence; post-processors
// ByteLevel, TemplateProcessing and Sequence; decoder ByteLevel. Anything else is a load error
// naming the file and field (e.g. SentencePiece-style Metaspace tokenizers).
#ifndef TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_
#define TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::engine {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", "tool", ...
  std::string content;
  // The message's other keys, as the chat template sees them (OpenAI's tool_calls,
  // tool_call_id, name; reasoning_content). A "content" key here replaces `content`, e.g. null
  // on an assistant turn that only calls tools, or a list of parts.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

// How ApplyChatTemplate renders, beyond the messages.
struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // OpenAI-style tool definitions ([{"type": "function", "function": {...}}]); null: none
  // (the template sees tools = None, as with Hugging Face).
  nlohmann::ordered_json tools;
  // Further template variables (Hugging Face's chat_template_kwargs), e.g.
  // {"enable_thinking": false}; they override the special tokens of the same name.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // The local wall-clock time strftime_now() formats; null: the system clock.
  std::function<std::tm()> clock;
};

// The chat template families Tandem renders natively.
enum class ChatFamily {
  kNone,    // no recognised template: ApplyChatTemplate fails
  kChatMl,  // Qwen2/2.5 ChatML (<|im_start|>role\n…<|im_end|>)
  kQwen3,   // ChatML with Qwen3's <think> handling of assistant turns
  kLlama3,  // <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|>
};

class Tokenizer {
 public:
  // Reads <dir>/tokenizer.json and, if present, <dir>/tokenizer_config.json.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromModelDir(const std::string& dir);
  // Reads both files; `tokenizer_config_json` may be empty (no config file). Errors name the
  // file and the offending field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFiles(
      const std::string& tokenizer_json, const std::string& tokenizer_config_json);
  // The same from the files' contents (`config_contents` empty: no config). `source` names the
  // origin in error messages.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromStrings(
      std::string_view tokenizer_contents, std::string_view config_contents,
      const std::string& source = "tokenizer.json");

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text → ids. Added/special tokens that appear literally in `text` become their ids, and the
  // post-processor's special tokens are added (as Hugging Face's encode with
  // add_special_tokens=True). Any bytes are accepted: ill-formed UTF-8 is first replaced by
  // U+FFFD (one per maximal ill-formed subpart).
  std::vector<int32_t> Encode(std::string_view text) const { return Encode(text, true); }
  // The same; with `add_special_tokens` false the post-processor's tokens (e.g. BOS) are left
  // out. Use that for text rendered by ApplyChatTemplate, which already carries them.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;

  // Ids → text. Added tokens contribute their content (special ones are dropped with
  // `skip_special_tokens`), other tokens their bytes; ill-formed UTF-8 in the result becomes
  // U+FFFD. Ids outside the vocabulary are ignored. Applies tokenizer_config.json's
  // clean_up_tokenization_spaces (default true), as Hugging Face's decode does.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // Largest id + 1, added tokens included.
  int32_t vocab_size() const;
  // Id of a vocabulary entry or added token written exactly as `token` (byte-level form for
  // ordinary tokens, e.g. "Ġthe").
  std::optional<int32_t> TokenId(std::string_view token) const;
  // Tokens that end generation: tokenizer_config's eos_token plus the family's end-of-turn
  // tokens (<|im_end|>/<|endoftext|> for Qwen, <|eot_id|>/<|end_of_text|>/<|eom_id|> for
  // Llama-3), those present in the vocabulary, without duplicates.
  std::vector<int32_t> eos_token_ids() const;
  std::optional<int32_t> bos_token_id() const;
  ChatFamily chat_family() const;

  // Renders the conversation with tokenizer_config.json's chat_template, as Hugging Face's
  // apply_chat_template does (same variables: messages, tools, documents = None,
  // add_generation_prompt, the special tokens that are set, raise_exception, strftime_now, and
  // `options.kwargs`), through engine/jinja. Errors: the template raised or failed on these
  // messages (InvalidArgument, with the template's line), or a render limit (ResourceExhausted).
  // A chat_template Tandem cannot parse fails every call with FailedPrecondition naming the
  // construct and line (see chat_template_status()); it never falls back to another template.
  // Checkpoints without a chat_template use the native rendering of their family (detected from
  // the special tokens; plain-text messages only); no family → FailedPrecondition.
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                const ChatTemplateOptions& options) const;
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt) const {
    ChatTemplateOptions options;
    options.add_generation_prompt = add_generation_prompt;
    return ApplyChatTemplate(messages, options);
  }
  // OK when the checkpoint has no chat_template or Tandem parsed it; otherwise why not (the
  // construct and line), for the server to log at startup.
  absl::Status chat_template_status() const;

  // The raw bytes id `id` stands for (an added token's content, a byte-level token's bytes),
  // or empty for unknown ids and, with `skip_special_tokens`, special tokens.
  std::string TokenBytes(int32_t id, bool skip_special_tokens) const;

  // The loaded pipeline; defined in tokenizer_state.h and opaque to users.
  struct State;

 private:
  explicit Tokenizer(std::unique_ptr<State> state);
  std::unique_ptr<const State> state_;
};

// Turns a stream of ids into text pieces, never emitting a broken UTF-8 sequence mid-stream:
// bytes that may still complete a character are held back until they do. Finish() flushes
// (an incomplete leftover becomes U+FFFD). The concatenated output equals
// Tokenizer::Decode(ids) without clean-up of tokenization spaces (streamed text is not
// rewritten after the fact). Not thread-safe; borrows `tokenizer`, which must outlive it.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Text that became complete with `id` (possibly empty).
  std::string Push(int32_t id);
  // The held-back rest; the detokenizer is then empty and may be reused for a new stream.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence, at most 3
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_TOKENIZER_H_

// Reading tool calls and reasoning back out of a chat answer's text (internal to router/api):
// the syntax a model family writes calls in, split from the text around them, incrementally so a
// stream shows content as soon as it cannot be part of a call.
//
// Syntaxes (ToolCallSyntax, request.h):
// - kQwen (Qwen2.5/Qwen3 and other Hermes-style ChatML templates): any number of
//   "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>" blocks among text.
// - kLlama3: the whole answer is one JSON object {"name": ..., "parameters": {...}} (or
//   "arguments"), optionally after <|python_tag|>, or several separated by ";".
// A block that is not valid JSON, lacks a name or an object of arguments, or names a function not
// in the request's tools stays in the content, as written; so does a call left unfinished, and
// one nesting arrays/objects deeper than kMaxJsonDepth.
// Whitespace right before a call, and after the last one at the end, is dropped from the content.
//
// Thread-safety: a splitter is used by one request at a time (not thread-safe).
#ifndef TANDEM_ROUTER_API_TOOL_CALLS_H_
#define TANDEM_ROUTER_API_TOOL_CALLS_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "router/api/request.h"

namespace tandem::router::api_internal {

struct ParsedToolCall {
  std::string id;         // "call_" + 24 random hex digits
  std::string name;       // a function of the request's tools
  std::string arguments;  // the arguments object as compact JSON text
};

// What a stretch of text turned into: content to show and the calls completed in it.
struct SplitText {
  std::string content;
  std::vector<ParsedToolCall> calls;
};

// Splits an answer's text into content and tool calls as it streams.
class ToolCallSplitter {
 public:
  // `tool_names`: the functions calls may name.
  ToolCallSplitter(ToolCallSyntax syntax, std::vector<std::string> tool_names);

  // Adds the answer's next text; returns what can be shown now (text that may still become part
  // of a call is held back).
  SplitText Feed(std::string_view text);
  // The end of the answer: what was held back.
  SplitText Finish();

  // The whole answer at once (Feed then Finish).
  static SplitText SplitAll(ToolCallSyntax syntax, std::vector<std::string> tool_names,
                            std::string_view text);

 private:
  void FeedQwen(SplitText* out);
  void EmitContent(std::string_view text, SplitText* out);
  void AddCall(ParsedToolCall call, SplitText* out);
  bool ParseCall(std::string_view json, ParsedToolCall* call) const;

  const ToolCallSyntax syntax_;
  const std::vector<std::string> tool_names_;
  std::string buffer_;          // text not yet classified
  std::string held_space_;      // trailing whitespace of the content, shown once text follows
  bool inside_call_ = false;    // kQwen: after "<tool_call>"
  bool llama_json_ = false;     // kLlama3: the answer began like a call; held to the end
  bool llama_decided_ = false;  // kLlama3: the first non-space text was seen
  bool any_call_ = false;
};

// Splits "<think>...</think>" reasoning (Qwen3's, DeepSeek-R1's) from the content that follows,
// as it streams. An answer that does not begin with "<think>" (after whitespace) is all content,
// unless the prompt opened the block (`open`: the chat template ended it with "<think>", as
// Qwen3-Thinking-2507's and DeepSeek-R1's do, or the parser always thinks): the answer then
// starts as reasoning, a "<think>" it repeats first is dropped, and "</think>" ends it. The
// reasoning and the content after "</think>" have their surrounding whitespace trimmed.
class ReasoningSplitter {
 public:
  struct Split {
    std::string reasoning;
    std::string content;
  };
  explicit ReasoningSplitter(bool open = false) : open_(open) {}
  Split Feed(std::string_view text);
  Split Finish();
  static Split SplitAll(std::string_view text, bool open = false);
  // How many bytes of a whole answer are reasoning: through "</think>", or all of it when the
  // reasoning was cut off; 0 when the answer does not begin with "<think>" and `open` is false.
  static size_t ReasoningBytes(std::string_view text, bool open = false);

 private:
  enum class State { kStart, kReasoning, kContent };
  const bool open_;
  State state_ = State::kStart;
  std::string buffer_;
  std::string held_space_;          // trailing whitespace of the reasoning
  bool reasoning_started_ = false;  // reasoning text shown (leading whitespace dropped)
  bool content_started_ = false;    // content after </think> shown (leading whitespace dropped)
};

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_TOOL_CALLS_H_

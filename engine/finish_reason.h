// FinishReason: why a request's generation ended, in the shapes SGLang and OpenAI clients read.
//
// A plain value type (copyable, thread-compatible). The engine sets it on the last event of a
// request's output stream; the router turns it into the response body.
#ifndef TANDEM_ENGINE_FINISH_REASON_H_
#define TANDEM_ENGINE_FINISH_REASON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "nlohmann/json.hpp"

namespace tandem::engine {

struct FinishReason {
  enum class Kind { kLength, kStop, kAbort };

  Kind kind = Kind::kLength;
  int64_t length = 0;                                          // kLength: tokens generated
  std::variant<std::monostate, int32_t, std::string> matched;  // kStop: token id or stop string
  std::string message;                                         // kAbort: why, for the client

  static FinishReason Length(int64_t n);
  static FinishReason StopToken(int32_t id);
  static FinishReason StopString(std::string s);
  // Ill-formed UTF-8 in `message` is replaced by U+FFFD.
  static FinishReason Abort(std::string message);

  // SGLang's meta_info.finish_reason: {"type":"length","length":N} |
  // {"type":"stop","matched":151645} | {"type":"stop","matched":"\n\n"} |
  // {"type":"abort","message":"..."}.
  nlohmann::json ToJson() const;
  // OpenAI's finish_reason string: "length" | "stop" | "abort".
  std::string_view OpenAiName() const;

  friend bool operator==(const FinishReason&, const FinishReason&) = default;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_FINISH_REASON_H_

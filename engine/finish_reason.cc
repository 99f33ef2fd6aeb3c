#include "engine/finish_reason.h"

#include <utility>

#include "engine/tokenizer/utf8.h"

namespace tandem::engine {

FinishReason FinishReason::Length(int64_t n) {
  FinishReason r;
  r.kind = Kind::kLength;
  r.length = n;
  return r;
}

FinishReason FinishReason::StopToken(int32_t id) {
  FinishReason r;
  r.kind = Kind::kStop;
  r.matched = id;
  return r;
}

FinishReason FinishReason::StopString(std::string s) {
  FinishReason r;
  r.kind = Kind::kStop;
  r.matched = std::move(s);
  return r;
}

FinishReason FinishReason::Abort(std::string message) {
  FinishReason r;
  r.kind = Kind::kAbort;
  r.message = SanitizeUtf8(message);  // so that ToJson().dump() cannot throw
  return r;
}

nlohmann::json FinishReason::ToJson() const {
  nlohmann::json j = nlohmann::json::object();
  switch (kind) {
    case Kind::kLength:
      j["type"] = "length";
      j["length"] = length;
      break;
    case Kind::kStop:
      j["type"] = "stop";
      if (const int32_t* id = std::get_if<int32_t>(&matched)) {
        j["matched"] = *id;
      } else if (const std::string* s = std::get_if<std::string>(&matched)) {
        // Stop strings are validated UTF-8, so dumping this never throws.
        j["matched"] = *s;
      } else {
        j["matched"] = nullptr;
      }
      break;
    case Kind::kAbort:
      j["type"] = "abort";
      j["message"] = message;
      break;
  }
  return j;
}

std::string_view FinishReason::OpenAiName() const {
  switch (kind) {
    case Kind::kLength:
      return "length";
    case Kind::kStop:
      return "stop";
    case Kind::kAbort:
      return "abort";
  }
  return "abort";
}

}  // namespace tandem::engine

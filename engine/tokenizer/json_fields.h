// Typed access to fields of a parsed tokenizer.json / tokenizer_config.json, turning a missing
// field or a wrong type into an InvalidArgument status that names the field's path
// ("model.merges[3]"). The caller prepends the file name.
#ifndef TANDEM_ENGINE_TOKENIZER_JSON_FIELDS_H_
#define TANDEM_ENGINE_TOKENIZER_JSON_FIELDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::engine::json_fields {

using Json = nlohmann::json;

// "field `path`: message".
absl::Status FieldError(const std::string& path, const std::string& message);

// The member `key` of object `obj` (whose own path is `path`). Missing → error.
absl::StatusOr<const Json*> Member(const Json& obj, const std::string& path, const char* key);

// The member `key` or nullptr when it is absent or JSON null.
const Json* OptionalMember(const Json& obj, const char* key);

absl::StatusOr<std::string> GetString(const Json& obj, const std::string& path, const char* key);
// A boolean member, `fallback` when absent or null.
absl::StatusOr<bool> GetBool(const Json& obj, const std::string& path, const char* key,
                             bool fallback);

// Requires `value` (at `path`) to be of the given kind.
absl::Status ExpectObject(const Json& value, const std::string& path);
absl::Status ExpectArray(const Json& value, const std::string& path);

// "path.key" / "path[i]".
std::string Join(const std::string& path, const char* key);
std::string Index(const std::string& path, size_t i);

}  // namespace tandem::engine::json_fields

#endif  // TANDEM_ENGINE_TOKENIZER_JSON_FIELDS_H_

#include "engine/tokenizer/json_fields.h"

#include "absl/strings/str_cat.h"

namespace tandem::engine::json_fields {
namespace {

std::string TypeName(const Json& v) { return v.type_name(); }

}  // namespace

absl::Status FieldError(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("field `", path, "`: ", message));
}

std::string Join(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Index(const std::string& path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

absl::Status ExpectObject(const Json& value, const std::string& path) {
  if (value.is_object()) return absl::OkStatus();
  return FieldError(path, absl::StrCat("expected an object, got ", TypeName(value)));
}

absl::Status ExpectArray(const Json& value, const std::string& path) {
  if (value.is_array()) return absl::OkStatus();
  return FieldError(path, absl::StrCat("expected an array, got ", TypeName(value)));
}

absl::StatusOr<const Json*> Member(const Json& obj, const std::string& path, const char* key) {
  if (!obj.is_object()) {
    return FieldError(path.empty() ? "(root)" : path,
                      absl::StrCat("expected an object, got ", TypeName(obj)));
  }
  auto it = obj.find(key);
  if (it == obj.end()) return FieldError(Join(path, key), "missing");
  return &*it;
}

const Json* OptionalMember(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> GetString(const Json& obj, const std::string& path, const char* key) {
  auto member = Member(obj, path, key);
  if (!member.ok()) return member.status();
  if (!(*member)->is_string()) {
    return FieldError(Join(path, key), absl::StrCat("expected a string, got ", TypeName(**member)));
  }
  return (*member)->get<std::string>();
}

absl::StatusOr<bool> GetBool(const Json& obj, const std::string& path, const char* key,
                             bool fallback) {
  const Json* v = OptionalMember(obj, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) {
    return FieldError(Join(path, key), absl::StrCat("expected a boolean, got ", TypeName(*v)));
  }
  return v->get<bool>();
}

}  // namespace tandem::engine::json_fields

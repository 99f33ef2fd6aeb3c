#include "engine/tokenizer/normalizer.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "utf8proc.h"

namespace tandem::engine {
namespace {

using json_fields::Json;

bool IsAscii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

std::string ApplyForm(std::string_view text, Normalizer::Form form) {
  // Every normalization form maps ASCII to itself.
  if (IsAscii(text)) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Normalizer::Form::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case Normalizer::Form::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case Normalizer::Form::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case Normalizer::Form::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only reachable on ill-formed input or allocation failure; callers pass well-formed UTF-8,
    // so leave the text as it is rather than lose it.
    std::free(out);
    return std::string(text);
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

absl::Status Normalizer::Parse(const Json& value, const std::string& path,
                               std::vector<Form>* steps) {
  if (value.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, json_fields::GetString(value, path, "type"));
  if (type == "NFC") {
    steps->push_back(Form::kNfc);
  } else if (type == "NFD") {
    steps->push_back(Form::kNfd);
  } else if (type == "NFKC") {
    steps->push_back(Form::kNfkc);
  } else if (type == "NFKD") {
    steps->push_back(Form::kNfkd);
  } else if (type == "Sequence") {
    const std::string list_path = json_fields::Join(path, "normalizers");
    ASSIGN_OR_RETURN(const Json* list, json_fields::Member(value, path, "normalizers"));
    RETURN_IF_ERROR(json_fields::ExpectArray(*list, list_path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(Parse((*list)[i], json_fields::Index(list_path, i), steps));
    }
  } else {
    return json_fields::FieldError(json_fields::Join(path, "type"),
                                   absl::StrCat("unsupported normalizer type \"", type, "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<Normalizer> Normalizer::FromJson(const Json& value, const std::string& path) {
  Normalizer normalizer;
  RETURN_IF_ERROR(Parse(value, path, &normalizer.steps_));
  return normalizer;
}

std::string Normalizer::Normalize(std::string_view text) const {
  std::string current(text);
  for (Form form : steps_) current = ApplyForm(current, form);
  return current;
}

}  // namespace tandem::engine

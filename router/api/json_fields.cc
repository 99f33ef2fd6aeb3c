#include "router/api/json_fields.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json_depth.h"
#include "common/ordered_json.h"
#include "common/status.h"

namespace tandem::router::api_internal {
namespace {

// The JSON Schema and structural tag objects of a request body, as pointers (see ParseJsonObject's
// header comment).
std::vector<Json::json_pointer> SchemaObjects(const Json& body) {
  std::vector<Json::json_pointer> found;
  auto check = [&](const Json::json_pointer& pointer) {
    if (body.contains(pointer) && body.at(pointer).is_object()) found.push_back(pointer);
  };
  check(Json::json_pointer("/response_format/json_schema/schema"));
  if (const auto text = body.find("text"); text != body.end() && text->is_object()) {
    check(Json::json_pointer("/text/format/schema"));  // /v1/responses
  }
  for (const char* key : {"json_schema", "structural_tag"}) {
    check(Json::json_pointer(absl::StrCat("/", key)));
    check(Json::json_pointer(absl::StrCat("/sampling_params/", key)));
    if (const auto it = body.find("sampling_params"); it != body.end() && it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        check(Json::json_pointer(absl::StrCat("/sampling_params/", i, "/", key)));
      }
    }
  }
  return found;
}

}  // namespace

absl::Status CheckJsonBeforeParsing(std::string_view body, size_t max_parsed_bytes,
                                    const char* what, size_t* parsed_bytes) {
  if (JsonNestingDepth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " nests JSON deeper than ", kMaxJsonDepth, " levels"));
  }
  const size_t parsed = JsonParsedBytes(body);
  if (parsed_bytes != nullptr) *parsed_bytes = parsed;
  if (parsed > max_parsed_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has too many JSON values: parsed, they would take about ",
                     (parsed + (1 << 20) - 1) >> 20, " MiB, more than the ", max_parsed_bytes >> 20,
                     " MiB allowed; send fewer values per request"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseJsonObject(std::string_view body, size_t max_parsed_bytes) {
  // A raw NUL is never valid JSON (inside a string it must be escaped as \u0000); nlohmann's
  // lexer takes it for the end of the input and would silently drop the bytes after it.
  if (const size_t nul = body.find('\0'); nul != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: a NUL byte at offset ", nul,
                     "; only whitespace may follow the JSON object"));
  }
  size_t once = 0;  // the parsed form's estimated size
  RETURN_IF_ERROR(CheckJsonBeforeParsing(body, max_parsed_bytes, "the request body", &once));
  try {
    Json parsed = Json::parse(body.begin(), body.end());
    if (!parsed.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the request body must be a JSON object, got ", JsonTypeName(parsed)));
    }
    const std::vector<Json::json_pointer> schemas = SchemaObjects(parsed);
    std::vector<Json::json_pointer> arrays;  // kept in order as {kOrderedJsonKey: text}
    for (const char* pointer : {"/tools", "/response_format/structures"}) {
      const Json::json_pointer p(pointer);
      if (parsed.contains(p) && parsed.at(p).is_array()) arrays.push_back(p);
    }
    if (!schemas.empty() || !arrays.empty()) {
      // A second parse while the first is held: together they keep to the bound.
      if (2 * once > max_parsed_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the request body has too many JSON values for one with tools or JSON schemas, "
            "which is parsed twice: parsed, they would take about ",
            (2 * once + (1 << 20) - 1) >> 20, " MiB, more than the ", max_parsed_bytes >> 20,
            " MiB allowed; send fewer values per request"));
      }
      const nlohmann::ordered_json ordered = ParseOrderedJson(body);
      auto original = [&](const Json::json_pointer& pointer) {
        return ordered.at(nlohmann::ordered_json::json_pointer(pointer.to_string())).dump();
      };
      for (const Json::json_pointer& pointer : schemas) parsed[pointer] = original(pointer);
      for (const Json::json_pointer& pointer : arrays) {
        parsed[pointer] = Json{{kOrderedJsonKey, original(pointer)}};
      }
    }
    return parsed;
  } catch (const Json::exception& e) {
    // nlohmann's messages name the byte offset and the problem (including ill-formed UTF-8).
    return absl::InvalidArgumentError(
        absl::StrCat("the request body is not valid JSON: ", JsonErrorText(e.what())));
  }
}

nlohmann::ordered_json OrderedValue(const Json& value) {
  if (value.is_object() && value.size() == 1) {
    const auto it = value.find(kOrderedJsonKey);
    if (it != value.end() && it->is_string()) {
      return ParseOrderedJson(it->get<std::string>());
    }
  }
  return ParseOrderedJson(value.dump());
}

const Json* Find(const Json& object, std::string_view key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string JsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "unsupported value";
  }
}

absl::StatusOr<bool> ToBool(const Json& value, const std::string& path) {
  if (!value.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be a boolean, got ", JsonTypeName(value)));
  }
  return value.get<bool>();
}

absl::StatusOr<int64_t> ToInt(const Json& value, const std::string& path, int64_t lo, int64_t hi) {
  const auto out_of_range = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be an integer in [", lo, ", ", hi, "], got ", value.dump()));
  };
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(hi) || (lo > 0 && v < static_cast<uint64_t>(lo))) {
      return out_of_range();
    }
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < lo || v > hi) return out_of_range();
    return v;
  }
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (!std::isfinite(v) || std::floor(v) != v) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, " must be an integer, got ", value.dump()));
    }
    // 2^63 and above do not fit int64_t; converting them would be undefined.
    if (v < static_cast<double>(lo) || v >= 9223372036854775808.0) return out_of_range();
    const auto integral = static_cast<int64_t>(v);
    if (integral < lo || integral > hi) return out_of_range();
    return integral;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path, " must be an integer, got ", JsonTypeName(value)));
}

absl::StatusOr<double> ToNumber(const Json& value, const std::string& path, double lo, double hi) {
  if (!value.is_number()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be a number, got ", JsonTypeName(value)));
  }
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be a number in [", lo, ", ", hi, "], got ", value.dump()));
  }
  return v;
}

absl::StatusOr<std::string> ToString(const Json& value, const std::string& path) {
  if (!value.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be a string, got ", JsonTypeName(value)));
  }
  return value.get<std::string>();
}

absl::StatusOr<std::vector<int32_t>> ToIntList(const Json& value, const std::string& path,
                                               int64_t lo, int64_t hi) {
  if (!value.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be an array of integers, got ", JsonTypeName(value)));
  }
  std::vector<int32_t> out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    auto v = ToInt(value[i], absl::StrCat(path, "[", i, "]"), lo, hi);
    if (!v.ok()) return v.status();
    out.push_back(static_cast<int32_t>(*v));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ToStringOrList(const Json& value, const std::string& path,
                                                        size_t max_items) {
  std::vector<std::string> out;
  if (value.is_string()) {
    out.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    if (value.size() > max_items) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, " has ", value.size(), " entries; at most ", max_items, " are allowed"));
    }
    for (size_t i = 0; i < value.size(); ++i) {
      auto s = ToString(value[i], absl::StrCat(path, "[", i, "]"));
      if (!s.ok()) return s.status();
      out.push_back(*std::move(s));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " must be a string or an array of strings, got ", JsonTypeName(value)));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, " must not contain an empty string"));
    }
  }
  return out;
}

bool IsSet(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;
    case Json::value_t::string:  // nlohmann's empty() is false for every string
      return !value.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object:
      return !value.empty();
    default:
      return true;
  }
}

absl::Status CheckEchoedId(std::string_view value, const std::string& what, size_t max_bytes) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be at most ", max_bytes,
                                                   " bytes of printable ASCII, got ", value.size(),
                                                   " bytes"));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be at most ", max_bytes,
          " bytes of printable ASCII (no control characters, line breaks or non-ASCII); byte ", i,
          " is 0x", absl::Hex(c, absl::kZeroPad2)));
    }
  }
  return absl::OkStatus();
}

std::string Excerpt(std::string_view value) {
  std::string out;
  size_t end = value.size();
  if (end > kMaxExcerptBytes) {
    end = kMaxExcerptBytes;
    // Back off to the start of a UTF-8 sequence so the cut leaves no partial character.
    while (end > 0 && (static_cast<unsigned char>(value[end]) & 0xc0) == 0x80) --end;
  }
  out.reserve(end + 3);
  for (size_t i = 0; i < end; ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    out.push_back(c < 0x20 || c == 0x7f ? '?' : value[i]);
  }
  if (end < value.size()) out += "...";
  return out;
}

std::string JoinPath(const std::string& prefix, const std::string& key) {
  if (prefix.empty()) return std::string(key);
  return absl::StrCat(prefix, ".", key);
}

}  // namespace tandem::router::api_internal

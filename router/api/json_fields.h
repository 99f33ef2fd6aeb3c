// Typed, range-checked reads of JSON request fields for router/api's parsers. Every error is an
// absl::InvalidArgumentError that names the field by its path ("sampling_params.top_p") and the
// expected type or range. JSON null counts as absent, as the OpenAI and SGLang servers treat it.
//
// Thread-safety: pure functions. Internal to router/api.
#ifndef TANDEM_ROUTER_API_JSON_FIELDS_H_
#define TANDEM_ROUTER_API_JSON_FIELDS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tandem::router::api_internal {

using Json = nlohmann::json;

// Nesting deeper than this is rejected before parsing (no valid request comes close).
inline constexpr int kMaxJsonDepth = 64;

// The checks run on a JSON body before any parser sees it: nesting deeper than kMaxJsonDepth, and
// a parsed form estimated (JsonParsedBytes, common/json_depth.h) above `max_parsed_bytes`. The
// errors name the body as `what` ("the body nests JSON deeper than 64 levels"). The estimate goes
// to `*parsed_bytes` when given.
absl::Status CheckJsonBeforeParsing(std::string_view body, size_t max_parsed_bytes,
                                    const char* what, size_t* parsed_bytes = nullptr);
// The bound for the small control bodies (/abort_request, the admin API's worker specs).
inline constexpr size_t kMaxControlParsedBytes = 1 << 20;

// Parses `body` as one JSON object. Errors: invalid JSON (with the byte offset; the token the
// parser quotes is cut to kMaxExcerptBytes), ill-formed UTF-8 in a string, nesting deeper than
// kMaxJsonDepth, a parsed form estimated (JsonParsedBytes) above `max_parsed_bytes` (twice the
// estimate for a body with schemas or tools, which is parsed a second time below), a top level
// that is not an object, and anything but whitespace after the object, a NUL byte included (the
// JSON parser would stop at a NUL and ignore what follows it).
absl::StatusOr<Json> ParseJsonObject(std::string_view body, size_t max_parsed_bytes);
// JSON Schemas given as objects (response_format.json_schema.schema, json_schema and
// structural_tag at the top level or in sampling_params) list properties in the order the output
// must follow, which Json's sorted objects lose: ParseJsonObject replaces each with its text, in
// the body's key order. Chat's "tools" (printed by chat templates and compiled into tool-call
// constraints) and response_format.structures (a structural tag's schemas) keep their order too:
// such an array becomes the object {kOrderedJsonKey: its text}, which OrderedValue() turns back
// into the array.
inline constexpr char kOrderedJsonKey[] = "\x01ordered_json";
// `value` as ordered_json: the text of a {kOrderedJsonKey: text} object parsed, else `value`
// converted (its keys then in sorted order).
nlohmann::ordered_json OrderedValue(const Json& value);

// The value of `key` in `object`, or nullptr when absent or null.
const Json* Find(const Json& object, std::string_view key);

// "integer", "string", ... for error messages.
std::string JsonTypeName(const Json& value);

// `value` as a bool. Errors name `path`.
absl::StatusOr<bool> ToBool(const Json& value, const std::string& path);
// `value` as an integer in [lo, hi]; an integral float (3.0) is accepted, as Python clients
// may send one.
absl::StatusOr<int64_t> ToInt(const Json& value, const std::string& path, int64_t lo, int64_t hi);
// `value` as a finite number in [lo, hi].
absl::StatusOr<double> ToNumber(const Json& value, const std::string& path, double lo, double hi);
absl::StatusOr<std::string> ToString(const Json& value, const std::string& path);
// An array of integers, each in [lo, hi].
absl::StatusOr<std::vector<int32_t>> ToIntList(const Json& value, const std::string& path,
                                               int64_t lo, int64_t hi);
// A string or an array of strings (stop lists); at most `max_items`, none empty.
absl::StatusOr<std::vector<std::string>> ToStringOrList(const Json& value, const std::string& path,
                                                        size_t max_items);

// Checks a client-chosen identifier that the router echoes (response headers, logs, metrics,
// map keys): at most `max_bytes` bytes of printable ASCII (0x20-0x7e; no control characters, no
// CR/LF, no bytes >= 0x80). The error names `what` and the limit.
absl::Status CheckEchoedId(std::string_view value, const std::string& what, size_t max_bytes);

// `value` shortened for an error message: at most kMaxExcerptBytes bytes (cut at a UTF-8 boundary,
// then "..."), control characters as '?'. Client strings quoted in errors go through this.
inline constexpr size_t kMaxExcerptBytes = 64;
std::string Excerpt(std::string_view value);

// True when `value` asks for something: not false, 0, "", [] or {}. Used for fields we do not
// serve, which are rejected only when set to something other than their default.
bool IsSet(const Json& value);

// "a.b" from a prefix ("" allowed) and a key.
std::string JoinPath(const std::string& prefix, const std::string& key);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_JSON_FIELDS_H_

// Parsing JSON into nlohmann::ordered_json (members kept in the text's order) in time linear in
// the text. nlohmann's own ordered_json::parse inserts each member through ordered_map's linear
// search for its key, so an object of n members takes n^2/2 key comparisons: a 2 MB JSON schema
// of 60,000 properties held a request thread for seconds. Every parse of client- or
// model-controlled text into ordered_json goes through ParseOrderedJson.
#ifndef TANDEM_COMMON_ORDERED_JSON_H_
#define TANDEM_COMMON_ORDERED_JSON_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace tandem {

// The same value as nlohmann::ordered_json::parse(text) (a repeated key keeps its first place
// and its last value), and the same exceptions (nlohmann::ordered_json::parse_error) for text
// that is not JSON. The nesting depth is the caller's to bound first (common/json_depth.h).
nlohmann::ordered_json ParseOrderedJson(std::string_view text);

// The text of a nlohmann exception's what() for a client: without nlohmann's own tag
// ("[json.exception.parse_error.101] "), and with what follows its first quote (the token it read
// last, "last read: '...'", which can be a client's whole megabyte string) cut to 64 bytes, control
// characters as '?'.
std::string JsonErrorText(std::string_view what);

}  // namespace tandem

#endif  // TANDEM_COMMON_ORDERED_JSON_H_

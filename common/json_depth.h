// How deeply a JSON text nests, and how much memory its parsed form takes, found by scanning its
// bytes before any parser recurses into it or allocates for it: the guards every parse of client-
// or model-controlled JSON runs first (nlohmann's parser and copies recurse once per level, and
// its nodes cost 16-150 bytes each, so a body of `{},{},...` takes ~50x its size).
#ifndef TANDEM_COMMON_JSON_DEPTH_H_
#define TANDEM_COMMON_JSON_DEPTH_H_

#include <cstddef>
#include <string_view>

namespace tandem {

// The deepest nesting of arrays/objects in `text`, counting only brackets outside strings; stops
// scanning once past `stop_after` (so the result is then stop_after + 1). Malformed text is left
// for the parser to report.
int JsonNestingDepth(std::string_view text, int stop_after);

// The bytes that parsing `text` into a nlohmann::json is expected to hold at its peak (the
// growing arrays' spare capacity included), estimated from the tokens outside strings (values,
// members, containers) and from the strings and their lengths. For the shapes that cost most per
// byte of text (`[{},{},...]`, `[[],[],...]`, `[1,1,...]`, `["","",...]`, `{"k1":0,...}`) it is
// at or above what the parse was measured to take (strings within a few percent; the others
// 1.1-2x over). Malformed text is left for the parser to report.
size_t JsonParsedBytes(std::string_view text);

}  // namespace tandem

#endif  // TANDEM_COMMON_JSON_DEPTH_H_

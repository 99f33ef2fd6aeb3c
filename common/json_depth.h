// How deeply a JSON text nests, found by scanning its bytes before any parser recurses into it:
// the guard every parse of client- or model-controlled JSON runs first (nlohmann's parser and
// copies recurse once per level).
#ifndef TANDEM_COMMON_JSON_DEPTH_H_
#define TANDEM_COMMON_JSON_DEPTH_H_

#include <string_view>

namespace tandem {

// The deepest nesting of arrays/objects in `text`, counting only brackets outside strings; stops
// scanning once past `stop_after` (so the result is then stop_after + 1). Malformed text is left
// for the parser to report.
int JsonNestingDepth(std::string_view text, int stop_after);

}  // namespace tandem

#endif  // TANDEM_COMMON_JSON_DEPTH_H_

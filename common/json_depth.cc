#include "common/json_depth.h"

namespace tandem {

int JsonNestingDepth(std::string_view text, int stop_after) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > stop_after) break;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

size_t JsonParsedBytes(std::string_view text) {
  // Per token, what nlohmann::json (std::map objects, std::vector arrays, heap strings) takes
  // with glibc's malloc: an array element is a 16-byte value in a vector that grows by doubling
  // (up to 3x, 48 bytes, at a reallocation's peak), an object member a map node (key, value, links:
  // 96 bytes allocated), a container its map or vector (64), a string its std::string (48) and its
  // text. A comma is counted as an array element even inside an object (an overestimate).
  constexpr size_t kElement = 48;
  constexpr size_t kMember = 128;
  constexpr size_t kContainer = 64;
  constexpr size_t kString = 48;
  size_t bytes = kElement;  // the top-level value
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      ++bytes;
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        bytes += kString;
        break;
      case '[':
      case '{':
        bytes += kContainer + kElement;  // the container, and its first element if any
        break;
      case ',':
        bytes += kElement;
        break;
      case ':':
        bytes += kMember;
        break;
      default:
        break;
    }
  }
  return bytes;
}

}  // namespace tandem

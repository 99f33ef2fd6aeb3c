#include "common/json_depth.h"

namespace tandem {
namespace {

// Whether each byte of a JSON text, fed in order, belongs to a string (its quotes included).
class StringTracker {
 public:
  bool in_string() const { return in_string_; }
  bool Feed(char c) {
    if (in_string_) {
      if (escaped_) {
        escaped_ = false;
      } else if (c == '\\') {
        escaped_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      return true;
    }
    in_string_ = c == '"';
    return in_string_;
  }

 private:
  bool in_string_ = false;
  bool escaped_ = false;
};

}  // namespace

int JsonNestingDepth(std::string_view text, int stop_after) {
  int depth = 0;
  int deepest = 0;
  StringTracker strings;
  for (const char c : text) {
    if (strings.Feed(c)) continue;
    if (c == '[' || c == '{') {
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
  StringTracker strings;
  for (const char c : text) {
    const bool opens = !strings.in_string();
    if (strings.Feed(c)) {
      bytes += opens ? kString : 1;
      continue;
    }
    switch (c) {
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

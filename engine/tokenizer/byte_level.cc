#include "engine/tokenizer/byte_level.h"

#include <array>

#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

struct Tables {
  std::array<std::string, 256> byte_to_char;
  // Indexed by code point; the alphabet lies below U+0144. -1 marks "not in the alphabet".
  std::array<int16_t, 0x144> char_to_byte;
};

const Tables& GetTables() {
  static const Tables* tables = [] {
    auto* t = new Tables();
    t->char_to_byte.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      AppendUtf8(cp, &t->byte_to_char[b]);
      t->char_to_byte[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return *tables;
}

}  // namespace

void BytesToByteLevel(std::string_view bytes, std::string* out) {
  const Tables& t = GetTables();
  for (char c : bytes) out->append(t.byte_to_char[static_cast<uint8_t>(c)]);
}

void ByteLevelToBytes(std::string_view token, std::string* out) {
  const Tables& t = GetTables();
  const size_t start = out->size();
  size_t i = 0;
  while (i < token.size()) {
    const size_t n = ValidSequenceLength(token.substr(i));
    if (n == 0) break;
    size_t len = 0;
    const char32_t cp = DecodeUtf8(token.substr(i), &len);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) break;
    out->push_back(static_cast<char>(t.char_to_byte[cp]));
    i += len;
  }
  if (i < token.size()) {
    out->resize(start);
    out->append(token);
  }
}

}  // namespace tandem::engine

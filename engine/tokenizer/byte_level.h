// GPT-2's reversible byte <-> printable-character mapping used by byte-level BPE: every byte
// value is shown as one visible Unicode character so that BPE never sees spaces or control
// bytes. Immutable tables, thread-safe.
#ifndef TANDEM_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define TANDEM_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::engine {

// Appends the byte-level form of `bytes` (each byte becomes one character) to `*out`.
void BytesToByteLevel(std::string_view bytes, std::string* out);

// Appends the bytes that the byte-level string `token` stands for to `*out`. If a character of
// `token` is not in the byte-level alphabet (e.g. an added token such as "<|im_end|>" written
// with other characters), the token's own UTF-8 bytes are appended instead, as Hugging Face's
// ByteLevel decoder does.
void ByteLevelToBytes(std::string_view token, std::string* out);

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include "engine/tokenizer/utf8.h"

namespace tandem::engine {
namespace {

// Bounds of the second byte of a sequence led by `lead` (Unicode Table 3-7), or {0, 0} if
// `lead` is not a valid lead byte of a multi-byte sequence.
struct SecondByteRange {
  uint8_t lo;
  uint8_t hi;
};

SecondByteRange SecondRange(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {0x80, 0xBF};
  if (lead == 0xE0) return {0xA0, 0xBF};
  if ((lead >= 0xE1 && lead <= 0xEC) || lead == 0xEE || lead == 0xEF) return {0x80, 0xBF};
  if (lead == 0xED) return {0x80, 0x9F};
  if (lead == 0xF0) return {0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {0x80, 0xBF};
  if (lead == 0xF4) return {0x80, 0x8F};
  return {0, 0};
}

size_t SequenceLengthForLead(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Number of leading bytes of `text` that form a well-formed (possibly incomplete) prefix of a
// sequence, and the full length that sequence needs.
size_t WellFormedPrefix(std::string_view text, size_t* needed) {
  const auto lead = static_cast<uint8_t>(text[0]);
  *needed = SequenceLengthForLead(lead);
  if (*needed == 0) return 0;
  if (*needed == 1) return 1;
  size_t i = 1;
  if (i < text.size()) {
    const SecondByteRange r = SecondRange(lead);
    const auto b = static_cast<uint8_t>(text[i]);
    if (b < r.lo || b > r.hi) return 1;
    ++i;
  } else {
    return 1;
  }
  while (i < *needed && i < text.size() && IsContinuation(static_cast<uint8_t>(text[i]))) ++i;
  return i;
}

}  // namespace

size_t ValidSequenceLength(std::string_view text) {
  size_t needed = 0;
  const size_t got = WellFormedPrefix(text, &needed);
  return (needed != 0 && got == needed) ? needed : 0;
}

size_t MaximalSubpartLength(std::string_view text) {
  size_t needed = 0;
  const size_t got = WellFormedPrefix(text, &needed);
  return got == 0 ? 1 : got;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = ValidSequenceLength(text.substr(i));
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      out.push_back(text[i++]);
      continue;
    }
    const std::string_view rest = text.substr(i);
    const size_t n = ValidSequenceLength(rest);
    if (n != 0) {
      out.append(rest.substr(0, n));
      i += n;
    } else {
      out.append(kReplacementChar);
      i += MaximalSubpartLength(rest);
    }
  }
  return out;
}

size_t CompletePrefixLength(std::string_view bytes) {
  // An incomplete sequence is at most 3 bytes long, so only the tail needs a look.
  const size_t start = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (size_t i = start; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (IsContinuation(b)) continue;
    size_t needed = 0;
    const size_t got = WellFormedPrefix(bytes.substr(i), &needed);
    if (needed > 1 && got == bytes.size() - i && got < needed) return i;
  }
  return bytes.size();
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

char32_t DecodeUtf8(std::string_view text, size_t* len) {
  const auto b0 = static_cast<uint8_t>(text[0]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  const size_t n = SequenceLengthForLead(b0);
  *len = n;
  char32_t cp = b0 & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
  for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<uint8_t>(text[i]) & 0x3F);
  return cp;
}

}  // namespace tandem::engine

#include "engine/jinja/text.h"

#include <utf8proc.h>

namespace tandem::jinja {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s`, or 0.
size_t SequenceLength(std::string_view s) {
  const auto b = [&s](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  if (s.empty()) return 0;
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;
    if (c == 0xED && b(1) >= 0xA0) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;
    if (c == 0xF4 && b(1) >= 0x90) return 0;
    return 4;
  }
  return 0;
}

bool IsStripped(char32_t c, const std::vector<char32_t>* set) {
  if (set == nullptr) return IsPythonSpace(c);
  for (char32_t s : *set) {
    if (s == c) return true;
  }
  return false;
}

std::string MapCase(std::string_view text, bool upper) {
  std::string out;
  const std::vector<size_t> offsets = CodePointOffsets(text);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const char32_t c = DecodeAt(text, offsets[i]);
    if (c == 0xFFFD) {
      out.append(text.substr(offsets[i], offsets[i + 1] - offsets[i]));
      continue;
    }
    const auto mapped = upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c))
                              : utf8proc_tolower(static_cast<utf8proc_int32_t>(c));
    AppendUtf8(static_cast<char32_t>(mapped), &out);
  }
  return out;
}

}  // namespace

std::vector<size_t> CodePointOffsets(std::string_view text) {
  std::vector<size_t> offsets;
  offsets.reserve(text.size() + 1);
  size_t i = 0;
  while (i < text.size()) {
    offsets.push_back(i);
    const size_t len = SequenceLength(text.substr(i));
    i += len == 0 ? 1 : len;
  }
  offsets.push_back(text.size());
  return offsets;
}

size_t CodePointCount(std::string_view text) { return CodePointOffsets(text).size() - 1; }

char32_t DecodeAt(std::string_view text, size_t offset) {
  const std::string_view s = text.substr(offset);
  const size_t len = SequenceLength(s);
  const auto b = [&s](size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(s[i])); };
  switch (len) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default:
      return 0xFFFD;
  }
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool IsPythonSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string PyStrip(std::string_view text, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) {
    const std::vector<size_t> o = CodePointOffsets(*chars);
    for (size_t i = 0; i + 1 < o.size(); ++i) set.push_back(DecodeAt(*chars, o[i]));
  }
  const std::vector<char32_t>* strip_set = chars == nullptr ? nullptr : &set;
  const std::vector<size_t> offsets = CodePointOffsets(text);
  size_t begin = 0;
  size_t end = offsets.size() - 1;
  while (left && begin < end && IsStripped(DecodeAt(text, offsets[begin]), strip_set)) ++begin;
  while (right && end > begin && IsStripped(DecodeAt(text, offsets[end - 1]), strip_set)) --end;
  return std::string(text.substr(offsets[begin], offsets[end] - offsets[begin]));
}

std::vector<std::string> PySplit(std::string_view text, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep != nullptr) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t at = text.find(*sep, start);
      if (at == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, at - start));
      start = at + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::vector<size_t> offsets = CodePointOffsets(text);
  const size_t n = offsets.size() - 1;
  size_t i = 0;
  while (true) {
    while (i < n && IsPythonSpace(DecodeAt(text, offsets[i]))) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      // The rest, right-stripped of whitespace, is the last part.
      size_t end = n;
      while (end > i && IsPythonSpace(DecodeAt(text, offsets[end - 1]))) --end;
      parts.emplace_back(text.substr(offsets[i], offsets[end] - offsets[i]));
      break;
    }
    size_t j = i;
    while (j < n && !IsPythonSpace(DecodeAt(text, offsets[j]))) ++j;
    parts.emplace_back(text.substr(offsets[i], offsets[j] - offsets[i]));
    i = j;
  }
  return parts;
}

std::vector<std::string> PySplitLines(std::string_view text) {
  std::vector<std::string> lines;
  const std::vector<size_t> offsets = CodePointOffsets(text);
  size_t start = 0;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const char32_t c = DecodeAt(text, offsets[i]);
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    lines.emplace_back(text.substr(start, offsets[i] - start));
    start = offsets[i + 1];
    if (c == '\r' && i + 2 < offsets.size() && text[offsets[i + 1]] == '\n') {
      ++i;
      start = offsets[i + 1];
    }
  }
  if (start < text.size()) lines.emplace_back(text.substr(start));
  return lines;
}

std::string PyUpper(std::string_view text) { return MapCase(text, true); }
std::string PyLower(std::string_view text) { return MapCase(text, false); }

std::string PyCapitalize(std::string_view text) {
  const std::vector<size_t> offsets = CodePointOffsets(text);
  if (offsets.size() < 2) return std::string();
  return PyUpper(text.substr(0, offsets[1])) + PyLower(text.substr(offsets[1]));
}

std::string PyTitle(std::string_view text) {
  std::string out;
  const std::vector<size_t> offsets = CodePointOffsets(text);
  bool previous_cased = false;
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const std::string_view piece = text.substr(offsets[i], offsets[i + 1] - offsets[i]);
    const char32_t c = DecodeAt(text, offsets[i]);
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool cased =
        cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    out += previous_cased ? PyLower(piece) : PyUpper(piece);
    previous_cased = cased;
  }
  return out;
}

std::string PyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count) {
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between code points (and at both ends).
    const std::vector<size_t> offsets = CodePointOffsets(text);
    int64_t done = 0;
    for (size_t i = 0; i + 1 < offsets.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      out.append(text.substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = text.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(text.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(text.substr(start));
  return out;
}

}  // namespace tandem::jinja

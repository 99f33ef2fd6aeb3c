// Python str semantics over UTF-8 text, as Jinja2's filters and str methods see it: code-point
// indexing, str.isspace(), strip, split, splitlines and case mapping.
//
// Ill-formed UTF-8 bytes count as one code point each (U+FFFD stands for them when decoded), so
// no input makes these functions fail.
#ifndef TANDEM_ENGINE_JINJA_TEXT_H_
#define TANDEM_ENGINE_JINJA_TEXT_H_

#include <string>
#include <string_view>
#include <vector>

namespace tandem::jinja {

// The code points of `text`, as byte ranges: piece i is text.substr(offsets[i], offsets[i+1] -
// offsets[i]); offsets has one more entry than there are code points.
std::vector<size_t> CodePointOffsets(std::string_view text);
size_t CodePointCount(std::string_view text);
char32_t DecodeAt(std::string_view text, size_t offset);
void AppendUtf8(char32_t c, std::string* out);

// Python's str.isspace() for one code point.
bool IsPythonSpace(char32_t c);

// str.strip/lstrip/rstrip: Python whitespace when `chars` is null, else any code point of
// `*chars`.
std::string PyStrip(std::string_view text, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit): whitespace runs when `sep` is null; maxsplit < 0 means no limit.
std::vector<std::string> PySplit(std::string_view text, const std::string* sep, int64_t maxsplit);
// str.splitlines() (without keepends).
std::vector<std::string> PySplitLines(std::string_view text);
// str.upper(), str.lower() (simple case mapping), str.capitalize(), str.title().
std::string PyUpper(std::string_view text);
std::string PyLower(std::string_view text);
std::string PyCapitalize(std::string_view text);
std::string PyTitle(std::string_view text);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(std::string_view text, std::string_view from, std::string_view to,
                      int64_t count);

}  // namespace tandem::jinja

#endif  // TANDEM_ENGINE_JINJA_TEXT_H_

#include "router/client_errors.h"

#include <google/protobuf/io/coded_stream.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace tandem::router {
namespace {

constexpr char kRedacted[] = "<address>";

bool IsHostChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ||
         c == ':' || c == '[' || c == ']' || c == '%';
}

// Where an optional ":port" that starts at `at` in `text` ends (`at` when there is none).
size_t SkipPort(absl::string_view text, size_t at) {
  if (at + 1 >= text.size() || text[at] != ':' || !absl::ascii_isdigit(text[at + 1])) return at;
  ++at;
  while (at < text.size() && absl::ascii_isdigit(text[at])) ++at;
  return at;
}

// The length of a dotted-quad IPv4 address (with an optional ":port") at the start of `text`,
// or 0.
size_t Ipv4Length(absl::string_view text) {
  size_t i = 0;
  for (int part = 0; part < 4; ++part) {
    if (part > 0) {
      if (i >= text.size() || text[i] != '.') return 0;
      ++i;
    }
    const size_t start = i;
    while (i < text.size() && i - start < 3 && absl::ascii_isdigit(text[i])) ++i;
    if (i == start) return 0;
  }
  if (i < text.size() && absl::ascii_isdigit(text[i])) return 0;  // a 4-digit group: no address
  return SkipPort(text, i);
}

}  // namespace

std::string RedactAddresses(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const absl::string_view rest = text.substr(i);
    // A URL: scheme "://" then the authority and path up to whitespace or a quote.
    if (absl::StartsWith(rest, "://")) {
      // Drop the scheme already copied ("http", "grpc", "unix"...).
      while (!out.empty() && absl::ascii_isalpha(static_cast<unsigned char>(out.back()))) {
        out.pop_back();
      }
      size_t j = 3;
      while (j < rest.size() && !absl::ascii_isspace(static_cast<unsigned char>(rest[j])) &&
             rest[j] != '"' && rest[j] != '\'' && rest[j] != ',' && rest[j] != ')') {
        ++j;
      }
      // A URL at the end of a clause ("http://h:1: refused") keeps its punctuation outside.
      while (j > 3 && (rest[j - 1] == ':' || rest[j - 1] == '.' || rest[j - 1] == ';')) --j;
      if (!out.empty() && out.back() == ':') out.pop_back();  // a trailing "ipv4:" style prefix
      out.append(kRedacted);
      i += j;
      continue;
    }
    const bool at_word_start =
        i == 0 || !absl::ascii_isalnum(static_cast<unsigned char>(text[i - 1]));
    if (at_word_start && absl::ascii_isdigit(text[i])) {
      if (const size_t n = Ipv4Length(rest); n > 0) {
        out.append(kRedacted);
        i += n;
        continue;
      }
    }
    if (rest[0] == '[') {  // [IPv6] or [IPv6]:port
      const size_t close = rest.find(']');
      if (close != absl::string_view::npos && close > 1 && close < 48 &&
          rest.substr(1, close - 1).find(':') != absl::string_view::npos) {
        const size_t j = SkipPort(rest, close + 1);
        out.append(kRedacted);
        i += j;
        continue;
      }
    }
    if (at_word_start && absl::StartsWithIgnoreCase(rest, "localhost")) {
      constexpr size_t kLocalhost = 9;
      if (kLocalhost < rest.size() && IsHostChar(rest[kLocalhost]) && rest[kLocalhost] != ':') {
        out.push_back(text[i++]);  // part of a longer word
        continue;
      }
      const size_t j = SkipPort(rest, kLocalhost);
      out.append(kRedacted);
      i += j;
      continue;
    }
    out.push_back(text[i++]);
  }
  return out;
}

absl::Status ClientLegError(absl::StatusCode code, absl::string_view leg,
                            absl::string_view message) {
  return absl::Status(code,
                      absl::StrCat("the ", leg, " worker failed: ", RedactAddresses(message)));
}

size_t LegBytesUpperBound(const RoutedRequest& request) {
  // rid (bounded at parse time), room, bootstrap host/port, flags and the field tags.
  constexpr size_t kFixedAllowance = 4 << 10;
  size_t bytes = kFixedAllowance + request.sampling.ByteSizeLong();
  for (const int32_t id : request.input_ids) {
    bytes += google::protobuf::io::CodedOutputStream::VarintSize32SignExtended(id);
  }
  return bytes;
}

}  // namespace tandem::router

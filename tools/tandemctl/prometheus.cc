#include "tools/tandemctl/prometheus.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace tandem::ctl {
namespace {

bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }

absl::StatusOr<double> ParseValue(std::string_view text) {
  if (text == "+Inf" || text == "Inf") return std::numeric_limits<double>::infinity();
  if (text == "-Inf") return -std::numeric_limits<double>::infinity();
  if (text == "NaN") return std::numeric_limits<double>::quiet_NaN();
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the value \"", s, "\" is not a number"));
  }
  return v;
}

// Parses one sample line (no comment, not blank).
absl::StatusOr<Sample> ParseLine(std::string_view line) {
  Sample sample;
  size_t i = 0;
  if (!IsNameStart(line[0])) {
    return absl::InvalidArgumentError("a sample must start with a metric name");
  }
  while (i < line.size() && IsNameChar(line[i])) ++i;
  sample.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i >= line.size()) return absl::InvalidArgumentError("the label set is not closed");
      if (line[i] == '}') {
        ++i;
        break;
      }
      const size_t name_start = i;
      if (!IsNameStart(line[i])) return absl::InvalidArgumentError("bad label name");
      while (i < line.size() && IsNameChar(line[i])) ++i;
      std::string label(line.substr(name_start, i - name_start));
      if (i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return absl::InvalidArgumentError(
            absl::StrCat("label ", label, " must be followed by =\"value\""));
      }
      i += 2;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        const char c = line[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value += c;
          continue;
        }
        if (i >= line.size()) break;
        const char e = line[i++];
        if (e == 'n') {
          value += '\n';
        } else if (e == '\\' || e == '"') {
          value += e;
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("bad escape \\", std::string(1, e), " in label ", label));
        }
      }
      if (!closed) {
        return absl::InvalidArgumentError(
            absl::StrCat("the value of label ", label, " is not terminated"));
      }
      sample.labels[label] = std::move(value);
      while (i < line.size() && line[i] == ' ') ++i;
      if (i < line.size() && line[i] != ',' && line[i] != '}') {
        return absl::InvalidArgumentError(absl::StrCat("expected ',' or '}' after label ", label));
      }
    }
  }
  std::vector<std::string_view> rest;
  for (std::string_view tail = line.substr(i); !tail.empty();) {
    const size_t start = tail.find_first_not_of(" \t");
    if (start == std::string_view::npos) break;
    tail.remove_prefix(start);
    const size_t end = std::min(tail.find_first_of(" \t"), tail.size());
    rest.push_back(tail.substr(0, end));
    tail.remove_prefix(end);
  }
  if (rest.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", sample.name, " has no value"));
  }
  if (rest.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample.name, " has text after its value and timestamp"));
  }
  auto value = ParseValue(rest[0]);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", sample.name, ": ", value.status().message()));
  }
  sample.value = *value;
  return sample;
}

}  // namespace

std::string Sample::Label(const std::string& label) const {
  auto it = labels.find(label);
  return it == labels.end() ? std::string() : it->second;
}

absl::StatusOr<std::vector<Sample>> ParsePrometheusText(std::string_view text) {
  std::vector<Sample> samples;
  int number = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    auto sample = ParseLine(line);
    if (!sample.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("metrics line ", number, ": ", sample.status().message()));
    }
    samples.push_back(std::move(*sample));
  }
  return samples;
}

}  // namespace tandem::ctl

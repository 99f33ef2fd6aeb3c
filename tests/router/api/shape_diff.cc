#include "tests/router/api/shape_diff.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tandem::router::conformance {
namespace {

using Json = nlohmann::json;

// The type names a client sees; nlohmann's unsigned and signed integers are one JSON type.
std::string Kind(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::string:
      return "string";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "float";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    default:
      return "other";
  }
}

bool Has(const std::vector<Allowance>& list, const std::string& path) {
  return std::any_of(list.begin(), list.end(), [&](const Allowance& a) { return a.path == path; });
}

std::string Child(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

std::string Shown(const std::string& path) { return path.empty() ? "<root>" : path; }

class Walker {
 public:
  Walker(const ShapeRules& rules, std::set<std::string>* used) : rules_(rules), used_(used) {}

  void Walk(const Json& doc, const Json& ours, const std::string& path) {
    for (const Pinned& pin : rules_.pinned) {
      if (pin.path == path &&
          std::find(pin.values.begin(), pin.values.end(), ours) == pin.values.end()) {
        Report(absl::StrCat(Shown(path), ": ", ours.dump(), " is not a documented value"));
      }
    }
    const std::string dk = Kind(doc), ok = Kind(ours);
    if (dk == "null" || ok == "null") {
      if (dk != ok && !Has(rules_.nullable, path)) {
        Report(absl::StrCat(Shown(path), ": documented ", dk, ", ours ", ok));
      }
      return;
    }
    if (dk != ok) {
      const bool numbers = (dk == "integer" || dk == "float") && (ok == "integer" || ok == "float");
      if (!numbers || !Has(rules_.any_number, path)) {
        Report(absl::StrCat(Shown(path), ": documented ", dk, ", ours ", ok));
      }
      return;
    }
    if (dk == "object") {
      WalkObject(doc, ours, path);
    } else if (dk == "array") {
      WalkArray(doc, ours, path);
    }
  }

  std::vector<std::string> problems() && { return std::move(problems_); }

 private:
  void WalkObject(const Json& doc, const Json& ours, const std::string& path) {
    if (Has(rules_.maps, path)) {
      if (doc.empty()) return;
      for (const auto& [key, value] : ours.items()) Walk(doc.begin().value(), value, path + "{}");
      return;
    }
    for (const auto& [key, value] : doc.items()) {
      const std::string child = Child(path, key);
      if (ours.contains(key)) {
        Walk(value, ours.at(key), child);
      } else if (Has(rules_.omitted, child)) {
        Use(child);
      } else {
        Report(absl::StrCat(child, ": documented, missing from ours"));
      }
    }
    for (const auto& [key, value] : ours.items()) {
      if (doc.contains(key)) continue;
      const std::string child = Child(path, key);
      if (Has(rules_.extra, child)) {
        Use(child);
      } else {
        Report(absl::StrCat(child, ": ours, not in the documented example"));
      }
    }
  }

  void WalkArray(const Json& doc, const Json& ours, const std::string& path) {
    if (Has(rules_.tuples, path)) {
      if (doc.size() != ours.size()) {
        Report(absl::StrCat(Shown(path), ": a tuple of ", doc.size(), " documented, ", ours.size(),
                            " ours"));
      }
      for (size_t i = 0; i < std::min(doc.size(), ours.size()); ++i) {
        Walk(doc[i], ours[i], absl::StrCat(path, "[", i, "]"));
      }
      return;
    }
    // The reference is the first documented element that is not null (SGLang's
    // input_top_logprobs starts with a null position).
    const auto reference =
        std::find_if(doc.begin(), doc.end(), [](const Json& e) { return !e.is_null(); });
    const Json& documented = reference != doc.end() ? *reference : Json();
    if (doc.empty()) return;
    for (const Json& element : ours) Walk(documented, element, path + "[]");
  }

  void Use(const std::string& path) {
    if (used_ != nullptr) used_->insert(path);
  }
  void Report(std::string problem) { problems_.push_back(std::move(problem)); }

  const ShapeRules& rules_;
  std::set<std::string>* used_;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> ShapeDiff(const Json& documented, const Json& ours,
                                   const ShapeRules& rules, std::set<std::string>* used) {
  Walker walker(rules, used);
  walker.Walk(documented, ours, "");
  return std::move(walker).problems();
}

std::vector<Json> SsePayloads(const std::string& sse, std::vector<std::string>* errors) {
  std::vector<Json> payloads;
  size_t pos = 0;
  bool done = false;
  while (pos < sse.size()) {
    if (done) {
      errors->push_back(absl::StrCat("bytes after data: [DONE]: ", sse.substr(pos)));
      break;
    }
    if (sse.compare(pos, 6, "data: ") != 0) {
      errors->push_back(absl::StrCat("an event not starting with \"data: \": ", sse.substr(pos)));
      break;
    }
    const size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) {
      errors->push_back(absl::StrCat("an event not ended by \"\\n\\n\": ", sse.substr(pos)));
      break;
    }
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    if (payload.find('\n') != std::string::npos || payload.find('\r') != std::string::npos) {
      errors->push_back(absl::StrCat("a payload of several lines: ", payload));
    }
    if (payload == "[DONE]") {
      done = true;
    } else {
      Json parsed = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) errors->push_back(absl::StrCat("not JSON: ", payload));
      payloads.push_back(std::move(parsed));
    }
    pos = end + 2;
  }
  if (!done) errors->push_back("the stream does not end with data: [DONE]");
  return payloads;
}

}  // namespace tandem::router::conformance

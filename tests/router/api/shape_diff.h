// ShapeDiff: compares the shape of a JSON value we send with a provider's documented example
// (OpenAI's API reference, SGLang's docs and code), for tests/router/api/conformance_test.cc.
//
// Shapes, not values: ids, timestamps and text differ between any two answers. A difference is
// reported when
//   - the documented example has a key ours lacks (a field a client may read),
//   - ours has a key the example lacks (a field we invented),
//   - the types differ (string, boolean, integer, float, null, array, object),
//   - a value the example pins (`object: "chat.completion"`, a finish_reason vocabulary) is not
//     one of the pinned values.
// Arrays compare each of our elements with the documented first non-null element, except tuples
// (SGLang's [logprob, token_id, text] triples), compared position by position.
//
// Every tolerated difference is named in ShapeRules with the reason it is tolerated, so the
// allow-lists read as the record of where our shapes differ from the providers' and why.
//
// Paths name fields from the root: "choices[].message.content", "meta_info.finish_reason",
// "meta_info.output_token_logprobs[][0]" (a tuple's first position), "" for the root.
#ifndef TANDEM_TESTS_ROUTER_API_SHAPE_DIFF_H_
#define TANDEM_TESTS_ROUTER_API_SHAPE_DIFF_H_

#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace tandem::router::conformance {

// A field where our shape may differ from the documented example, and why.
struct Allowance {
  std::string path;
  std::string reason;
};

// The values a documented field may take (a constant or a vocabulary).
struct Pinned {
  std::string path;
  std::vector<nlohmann::json> values;
};

struct ShapeRules {
  // Documented fields we do not send (a client reading them gets nothing: say why that is fine).
  std::vector<Allowance> omitted;
  // Our fields the example lacks that the provider documents (optional, or an extension the
  // provider's own server sends).
  std::vector<Allowance> extra;
  // Fields the provider's schema makes nullable: null on one side and a value on the other.
  std::vector<Allowance> nullable;
  // Fields the schema types as "number" (an integer or a float).
  std::vector<Allowance> any_number;
  // Objects whose keys are data (OpenAI completions top_logprobs: token -> logprob); their
  // values compare with the documented first value.
  std::vector<Allowance> maps;
  // Arrays that are tuples, compared position by position ("<path>[0]", "<path>[1]", ...).
  std::vector<Allowance> tuples;
  std::vector<Pinned> pinned;
};

// The differences between `ours` and `documented` under `rules`, one line each ("" when none).
// `used` (optional) collects the paths of `omitted` and `extra` allowances that were needed, so
// a caller can check that no allowance is stale.
std::vector<std::string> ShapeDiff(const nlohmann::json& documented, const nlohmann::json& ours,
                                   const ShapeRules& rules, std::set<std::string>* used = nullptr);

// The JSON payloads of an SSE stream, checked byte-exactly for the framing each event must have:
// "data: " + one line of JSON + "\n\n", the last event exactly "data: [DONE]\n\n". Framing errors
// go to `errors`.
std::vector<nlohmann::json> SsePayloads(const std::string& sse, std::vector<std::string>* errors);

}  // namespace tandem::router::conformance

#endif  // TANDEM_TESTS_ROUTER_API_SHAPE_DIFF_H_

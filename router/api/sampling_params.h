// The mapping of SGLang's sampling parameter names (and the OpenAI names that mean the same) to
// proto::SamplingParams, with SGLang's validation ranges, so bad values fail at the router with a
// 400 naming the field instead of after a round trip to a worker.
//
// Ranges (SGLang's SamplingParams.verify): temperature finite and >= 0; top_p in (0, 1]; top_k
// -1 (disabled) or >= 1 (0 is a 400, as in SGLang); min_p in [0, 1]; frequency_penalty and
// presence_penalty in [-2, 2]; repetition_penalty in (0, 2]; max_new_tokens in [0, 2^31-1];
// min_new_tokens >= 0 (and <= max_new_tokens, checked by the worker once max_new_tokens is
// final); n >= 1; stream_interval >= 1. OpenAI's logit_bias: an object of up to 1024 entries
// mapping decimal token ids (>= 0; the worker checks the vocabulary) to biases in [-100, 100].
// Ours on top: stop a string or up to 64 non-empty strings; stop_token_ids up to 1024 ids >= 0;
// seed in [-2^63, 2^63-1] (OpenAI's int64; a negative seed is used as its two's-complement
// bits). n other than 1 is a 400 here: ParseBatch (router/api/request.h) takes n out of the body
// before a prompt reaches this mapping. Parameters we do not serve (custom_params) are a 400
// unless set to their default.
//
// Structured output: regex (a string), ebnf (a string), json_schema (a schema's JSON text, as
// SGLang takes it, or the schema object itself) and structural_tag (the tag's JSON text, as SGLang
// takes it, or the object: engine/grammar/structural_tag.h, free text with triggered structures)
// constrain the output (engine/grammar/); null or "" leaves them unset. They are compiled here,
// so an unsupported feature or a malformed tag is a 400 naming it before any worker is involved;
// at most one constraint per request (OpenAI's response_format and a required or named
// tool_choice count as one).
//
// Thread-safety: pure functions. Internal to router/api.
#ifndef TANDEM_ROUTER_API_SAMPLING_PARAMS_H_
#define TANDEM_ROUTER_API_SAMPLING_PARAMS_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/sampler.h"
#include "proto/worker.pb.h"
#include "router/api/json_fields.h"

namespace tandem::router::api_internal {

// Applies the sampling parameter `key` = `value` (not null) to `out`. Returns false when `key`
// is not a sampling parameter name (nothing changed), true when applied; an error names `path`.
// Accepts SGLang's names plus "seed"/"sampling_seed" for the seed and "min_tokens" (OpenAI
// extension) for min_new_tokens.
absl::StatusOr<bool> ApplySamplingParam(const std::string& key, const Json& value,
                                        const std::string& path, proto::SamplingParams* out);

// Sets `constraint` on `out` after compiling it; InvalidArgument prefixed with `path` when it does
// not compile or `out` already carries a constraint.
absl::Status SetGrammarConstraint(const engine::GrammarConstraint& constraint,
                                  const std::string& path, proto::SamplingParams* out);

// SetGrammarConstraint for a constraint the caller has compiled itself (so that its errors are
// reported in the caller's terms): InvalidArgument prefixed with `path` when `out` already
// carries a constraint.
absl::Status SetCompiledGrammarConstraint(const engine::GrammarConstraint& constraint,
                                          const std::string& path, proto::SamplingParams* out);

// Applies a /generate `sampling_params` object (path "sampling_params"). Unknown names are a 400,
// as SGLang's SamplingParams(**kwargs) rejects them.
absl::Status ApplySamplingObject(const Json& object, proto::SamplingParams* out);

}  // namespace tandem::router::api_internal

#endif  // TANDEM_ROUTER_API_SAMPLING_PARAMS_H_

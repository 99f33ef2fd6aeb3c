// Grammar-constrained requests through the Scheduler on the shipped model: sampled outputs
// (temperature 1, several seeds) belong to the grammar's language and end at EOS once complete;
// small max_new_tokens still end complete (length-aware closing); a PD pair (prefill-only first
// token, decode-only rest) produces the colocated tokens bit for bit, tight budgets included; a
// constraint that does not compile is refused at Submit.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/grammar/matcher.h"
#include "engine/scheduler.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/serving/test_env.h"

namespace tandem::engine::testing {
namespace {

using Kind = GrammarConstraint::Kind;

std::unique_ptr<Scheduler> NewScheduler() {
  auto s = Scheduler::Create(SmallConfig(256), &SharedModel(), &SharedTokenizer());
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

Request ConstrainedRequest(const std::string& rid, const GrammarConstraint& constraint,
                           uint64_t seed, std::map<std::string, Collected>* sink,
                           int32_t max_new_tokens = 96) {
  Request r = MakeRequest(rid, SharedTokenizer().Encode("Here is the answer:"), max_new_tokens,
                          sink, 1.0f, seed);
  r.sampling.ignore_eos = false;
  r.sampling.constraint = constraint;
  return r;
}

// The bytes of the generated tokens (EOS has none).
std::string OutputBytes(const std::vector<int32_t>& tokens) {
  std::string bytes;
  for (int32_t id : tokens) bytes += SharedTokenizer().TokenBytes(id, /*skip_special_tokens=*/true);
  return bytes;
}

const std::vector<GrammarConstraint>& Constraints() {
  static const std::vector<GrammarConstraint> constraints = {
      {Kind::kJsonSchema,
       R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
           "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]},
           "maxItems": 3}}, "required": ["name", "age", "tags"], "additionalProperties": false})"},
      {Kind::kJsonObject, ""},
      {Kind::kRegex, "(yes|no), [a-z]{1,8}\\."},
      {Kind::kEbnf, "root ::= \"(\" num (\" + \" num)* \")\"\nnum ::= [1-9] [0-9]?"},
      // Free text in which every "e" is followed by a digit.
      {Kind::kStructuralTag,
       R"({"structures": [{"begin": "e", "schema": {"type": "integer", "minimum": 0,
           "maximum": 9}, "end": ""}], "triggers": ["e"]})",
       grammar::StructuralTagForm::kTriggered, false},
      // Calls only, after an optional thinking block, as tool_choice "required" builds them.
      {Kind::kStructuralTag,
       R"({"structures": [{"begin": "<f>", "schema": {"type": "object", "properties": {"n":
           {"type": "integer", "minimum": -5, "maximum": 5}}, "required": ["n"]},
           "end": "</f>"}], "triggers": ["<f>"]})",
       grammar::StructuralTagForm::kOneOrMore, true},
  };
  return constraints;
}

TEST(GrammarConstraintTest, SampledOutputsBelongToTheLanguage) {
  auto s = NewScheduler();
  std::map<std::string, Collected> out;
  const auto& constraints = Constraints();
  for (size_t c = 0; c < constraints.size(); ++c) {
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      ASSERT_TRUE(
          s->Submit(ConstrainedRequest(absl::StrCat(c, "/", seed), constraints[c], seed, &out))
              .ok());
    }
  }
  RunToIdle(s.get());
  int completed = 0;
  for (size_t c = 0; c < constraints.size(); ++c) {
    grammar::GrammarPtr grammar = CompileConstraint(constraints[c]).value();
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      const Collected& got = out[absl::StrCat(c, "/", seed)];
      ASSERT_TRUE(got.last && got.finish.has_value());
      const std::string bytes = OutputBytes(got.tokens);
      grammar::GrammarMatcher matcher = grammar::GrammarMatcher::Create(grammar).value();
      EXPECT_TRUE(matcher.AcceptString(bytes)) << bytes;  // every output stays in the language
      if (got.finish->kind == FinishReason::Kind::kStop) {
        // Ended by EOS: only allowed once the output is complete.
        EXPECT_TRUE(matcher.IsComplete()) << bytes;
        if (constraints[c].kind == Kind::kJsonSchema || constraints[c].kind == Kind::kJsonObject) {
          EXPECT_TRUE(nlohmann::json::accept(bytes)) << bytes;
        }
        ++completed;
      }
    }
  }
  EXPECT_GT(completed, 0);
}

// The fewest bytes of a string of the constraint's language.
int32_t ShortestOutput(const GrammarConstraint& constraint) {
  grammar::GrammarPtr grammar = CompileConstraint(constraint).value();
  return static_cast<int32_t>(grammar::GrammarMatcher::Create(grammar)->MinBytesToComplete());
}

// Length-aware closing: with a budget too small for what the model would write (from the
// shortest string's length in bytes, which the closing guarantees, up), every output still ends
// as a string of the language, by EOS (finish reason stop) or on its last token (length).
TEST(GrammarConstraintTest, SmallMaxNewTokensStillEndsInTheLanguage) {
  auto s = NewScheduler();
  std::map<std::string, Collected> out;
  const auto& constraints = Constraints();
  const std::vector<int32_t> extras = {0, 6, 16};
  for (size_t c = 0; c < constraints.size(); ++c) {
    for (int32_t extra : extras) {
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        const int32_t budget = std::max(1, ShortestOutput(constraints[c]) + extra);
        ASSERT_TRUE(s->Submit(ConstrainedRequest(absl::StrCat(c, "/", extra, "/", seed),
                                                 constraints[c], seed, &out, budget))
                        .ok());
      }
    }
  }
  RunToIdle(s.get());
  for (size_t c = 0; c < constraints.size(); ++c) {
    grammar::GrammarPtr grammar = CompileConstraint(constraints[c]).value();
    for (int32_t extra : extras) {
      for (uint64_t seed = 1; seed <= 4; ++seed) {
        const int32_t budget = std::max(1, ShortestOutput(constraints[c]) + extra);
        const Collected& got = out[absl::StrCat(c, "/", extra, "/", seed)];
        ASSERT_TRUE(got.last && got.finish.has_value());
        EXPECT_LE(got.tokens.size(), static_cast<size_t>(budget));
        const std::string bytes = OutputBytes(got.tokens);
        grammar::GrammarMatcher matcher = grammar::GrammarMatcher::Create(grammar).value();
        EXPECT_TRUE(matcher.AcceptString(bytes) && matcher.IsComplete())
            << c << "/" << budget << "/" << seed << ": " << bytes;
        if (constraints[c].kind == Kind::kJsonSchema || constraints[c].kind == Kind::kJsonObject) {
          EXPECT_TRUE(nlohmann::json::accept(bytes)) << bytes;
        }
        if (got.finish->kind == FinishReason::Kind::kLength) {
          EXPECT_EQ(got.tokens.size(), static_cast<size_t>(budget));
        } else {
          EXPECT_EQ(got.finish->kind, FinishReason::Kind::kStop) << got.finish->message;
        }
      }
    }
  }
}

TEST(GrammarConstraintTest, PrefillThenDecodeMatchesColocated) {
  for (const GrammarConstraint& constraint : Constraints()) {
    for (int32_t budget : {96, 16}) {  // 16: the length-aware closing decides every token
      const uint64_t seed = 11;
      auto colocated = NewScheduler();
      std::map<std::string, Collected> cout;
      ASSERT_TRUE(colocated->Submit(ConstrainedRequest("r", constraint, seed, &cout, budget)).ok());
      RunToIdle(colocated.get());

      auto prefill = NewScheduler();
      auto decode = NewScheduler();
      std::map<std::string, Collected> pout, dout;
      std::vector<int32_t> reserved;
      Request d = ConstrainedRequest("r", constraint, seed, &dout, budget);
      d.mode = RequestMode::kDecodeOnly;
      d.callbacks.on_reserved = [&reserved](const std::vector<int32_t>& blocks) {
        reserved = blocks;
      };
      ASSERT_TRUE(decode->Submit(std::move(d)).ok());
      ASSERT_TRUE(decode->Step().ok());
      Request p = ConstrainedRequest("r", constraint, seed, &pout, budget);
      p.mode = RequestMode::kPrefillOnly;
      p.callbacks.on_kv_layer = [&](const KvLayerEvent& e) {
        CopyLayer(*prefill->kv_storage(), e.block_ids, decode->kv_storage(), reserved, e.layer,
                  e.begin_pos, e.end_pos);
      };
      ASSERT_TRUE(prefill->Submit(std::move(p)).ok());
      RunToIdle(prefill.get());
      ASSERT_EQ(pout["r"].tokens.size(), 1u);
      ASSERT_TRUE(
          decode->CompleteTransfer("r", {pout["r"].tokens[0], pout["r"].logprobs[0], {}}).ok());
      ASSERT_TRUE(prefill->ReleaseHeld("r").ok());
      RunToIdle(decode.get());
      EXPECT_EQ(dout["r"].tokens, cout["r"].tokens) << OutputBytes(cout["r"].tokens);
      EXPECT_EQ(dout["r"].logprobs, cout["r"].logprobs);
    }
  }
}

TEST(GrammarConstraintTest, UncompilableConstraintIsRefusedAtSubmit) {
  auto s = NewScheduler();
  std::map<std::string, Collected> out;
  absl::Status st = s->Submit(ConstrainedRequest(
      "bad", {Kind::kJsonSchema, R"({"type": "string", "format": "email"})"}, 1, &out));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("format"), std::string::npos) << st;
  st = s->Submit(ConstrainedRequest("bad2", {Kind::kRegex, "a(?=b)"}, 1, &out));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

}  // namespace
}  // namespace tandem::engine::testing

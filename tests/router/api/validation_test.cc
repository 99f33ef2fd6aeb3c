// The checks that keep hostile values out of the router: SGLang's sampling-parameter rules
// (SamplingParams.verify), bounds on the client strings the router echoes, the end of the JSON
// body, and the prompt-length checks done before any leg (request.h).
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/api/request.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The error message of parsing `body` with `kind`; "" (and a failure) when it parsed.
std::string Error(ApiKind kind, const std::string& body,
                  const ApiContext& ctx = TinyEnglishContext()) {
  const absl::StatusOr<RoutedRequest> parsed = ParseRequest(kind, body, ctx);
  EXPECT_FALSE(parsed.ok()) << body.substr(0, 200);
  return parsed.ok() ? "" : std::string(parsed.status().message());
}

std::string GenerateError(const std::string& params) {
  return Error(ApiKind::kGenerate, R"({"text":"x","sampling_params":)" + params + "}");
}

bool GenerateOk(const std::string& params) {
  const auto parsed =
      ParseGenerate(R"({"text":"x","sampling_params":)" + params + "}", TinyEnglishContext());
  EXPECT_TRUE(parsed.ok()) << params << ": " << parsed.status();
  return parsed.ok();
}

TEST(SamplingVerifyTest, TopKIsMinusOneOrAtLeastOne) {
  EXPECT_EQ(GenerateError(R"({"top_k":0})"),
            "sampling_params.top_k must be -1 (disabled) or at least 1, got 0");
  EXPECT_THAT(GenerateError(R"({"top_k":-2})"), HasSubstr("sampling_params.top_k must be"));
  EXPECT_TRUE(GenerateOk(R"({"top_k":-1})"));
  EXPECT_TRUE(GenerateOk(R"({"top_k":1})"));
  EXPECT_EQ(Error(ApiKind::kCompletions, R"({"prompt":"x","top_k":0})"),
            "top_k must be -1 (disabled) or at least 1, got 0");
  EXPECT_EQ(Error(ApiKind::kChatCompletions,
                  R"({"messages":[{"role":"user","content":"x"}],"top_k":0.0})"),
            "top_k must be -1 (disabled) or at least 1, got 0");
}

TEST(SamplingVerifyTest, RangesOfSglang) {
  // temperature: finite and >= 0.
  EXPECT_THAT(GenerateError(R"({"temperature":-0.01})"),
              HasSubstr("sampling_params.temperature must be a number in [0"));
  EXPECT_TRUE(GenerateOk(R"({"temperature":0})"));
  // top_p in (0, 1].
  EXPECT_EQ(GenerateError(R"({"top_p":0})"), "sampling_params.top_p must be in (0, 1], got 0");
  EXPECT_THAT(GenerateError(R"({"top_p":1.01})"), HasSubstr("sampling_params.top_p must be"));
  EXPECT_TRUE(GenerateOk(R"({"top_p":1})"));
  // min_p in [0, 1].
  EXPECT_TRUE(GenerateOk(R"({"min_p":0})"));
  EXPECT_TRUE(GenerateOk(R"({"min_p":1})"));
  EXPECT_THAT(GenerateError(R"({"min_p":1.5})"), HasSubstr("sampling_params.min_p must be"));
  // Penalties in [-2, 2].
  EXPECT_TRUE(GenerateOk(R"({"frequency_penalty":-2,"presence_penalty":2})"));
  EXPECT_EQ(GenerateError(R"({"presence_penalty":2.5})"),
            "sampling_params.presence_penalty must be a number in [-2, 2], got 2.5");
  EXPECT_EQ(GenerateError(R"({"frequency_penalty":-2.5})"),
            "sampling_params.frequency_penalty must be a number in [-2, 2], got -2.5");
  // repetition_penalty in (0, 2].
  EXPECT_EQ(GenerateError(R"({"repetition_penalty":0})"),
            "sampling_params.repetition_penalty must be in (0, 2] (1.0 = no penalty), got 0");
  EXPECT_EQ(GenerateError(R"({"repetition_penalty":2.5})"),
            "sampling_params.repetition_penalty must be a number in [0, 2], got 2.5");
  EXPECT_TRUE(GenerateOk(R"({"repetition_penalty":1.5})"));
  EXPECT_TRUE(GenerateOk(R"({"repetition_penalty":1.0})"));
  // max_new_tokens >= 0; min_new_tokens >= 0.
  EXPECT_THAT(GenerateError(R"({"max_new_tokens":-1})"),
              HasSubstr("sampling_params.max_new_tokens must be an integer in [0"));
  EXPECT_TRUE(GenerateOk(R"({"max_new_tokens":0})"));
  EXPECT_THAT(GenerateError(R"({"min_new_tokens":-1})"),
              HasSubstr("sampling_params.min_new_tokens must be an integer in [0"));
  EXPECT_TRUE(GenerateOk(R"({"min_new_tokens":0})"));
  EXPECT_TRUE(GenerateOk(R"({"min_new_tokens":5,"max_new_tokens":8})"));
  // min_new_tokens <= max_new_tokens, after the latter is cut to the context left (512 here).
  EXPECT_THAT(GenerateError(R"({"min_new_tokens":9,"max_new_tokens":8})"),
              HasSubstr("min_new_tokens (min_tokens) is 9, more than the request's "
                        "max_new_tokens of 8"));
  EXPECT_THAT(GenerateError(R"({"min_new_tokens":600,"max_new_tokens":1000})"),
              HasSubstr("min_new_tokens (min_tokens) is 600, more than the request's "
                        "max_new_tokens of 511 ("));
  // A stop string is at most 256 bytes (engine/sampler.h), checked before any leg.
  EXPECT_TRUE(GenerateOk(R"({"stop":")" + std::string(256, 'a') + R"("})"));
  EXPECT_THAT(GenerateError(R"({"stop":")" + std::string(257, 'a') + R"("})"),
              HasSubstr("sampling_params.stop is 257 bytes; a stop string is at most 256"));
  EXPECT_THAT(GenerateError(R"({"stop":["a",")" + std::string(300, 'b') + R"("]})"),
              HasSubstr("sampling_params.stop[1] is 300 bytes"));
  // n >= 1, and one completion per request.
  EXPECT_THAT(GenerateError(R"({"n":0})"), HasSubstr("sampling_params.n must be an integer in [1"));
  EXPECT_THAT(GenerateError(R"({"n":3})"), HasSubstr("sampling_params.n must be 1"));
}

TEST(SamplingVerifyTest, LogitBiasMapsTokenIdsToBoundedBiases) {
  const auto parsed =
      ParseGenerate(R"({"text":"x","sampling_params":{"logit_bias":{"5":-100,"17":2.5,"0":100}}})",
                    TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const auto& bias = parsed->sampling.logit_bias();
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias.at(5), -100.0f);
  EXPECT_EQ(bias.at(17), 2.5f);
  EXPECT_EQ(bias.at(0), 100.0f);
  EXPECT_TRUE(GenerateOk(R"({"logit_bias":{}})"));
  EXPECT_TRUE(GenerateOk(R"({"logit_bias":null})"));
  EXPECT_EQ(GenerateError(R"({"logit_bias":[1,2]})"),
            "sampling_params.logit_bias must be an object mapping token ids to biases, got array");
  for (const char* key : {"-1", "a", "", "1.0", "01", "+3", "99999999999"}) {
    EXPECT_EQ(GenerateError(R"({"logit_bias":{")" + std::string(key) + R"(":1}})"),
              "sampling_params.logit_bias keys must be token ids (decimal integers >= 0), got \"" +
                  std::string(key) + "\"");
  }
  EXPECT_EQ(GenerateError(R"({"logit_bias":{"3":101}})"),
            "sampling_params.logit_bias[\"3\"] must be a number in [-100, 100], got 101");
  EXPECT_EQ(GenerateError(R"({"logit_bias":{"3":"1"}})"),
            "sampling_params.logit_bias[\"3\"] must be a number, got string");
  std::string many = R"({"logit_bias":{)";
  for (int i = 0; i <= 1024; ++i) absl::StrAppend(&many, i > 0 ? "," : "", "\"", i, "\":1");
  EXPECT_EQ(GenerateError(many + "}}"),
            "sampling_params.logit_bias has 1025 entries; at most 1024 are allowed");
  // Ids past the model's vocabulary (config.json's vocab_size, when the router has it).
  ApiContext small = TinyEnglishContext();
  small.vocab_size = 100;
  EXPECT_TRUE(
      ParseGenerate(R"({"text":"x","sampling_params":{"logit_bias":{"99":1}}})", small).ok());
  EXPECT_EQ(
      ErrorOf(ParseGenerate(R"({"text":"x","sampling_params":{"logit_bias":{"100":1}}})", small)),
      "logit_bias: token id 100 is outside the model's vocabulary (ids 0 to 99)");
  EXPECT_EQ(
      ErrorOf(ParseChatCompletions(
          R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"2000000":5}})", small)),
      "logit_bias: token id 2000000 is outside the model's vocabulary (ids 0 to 99)");
  // OpenAI's name at the top level of completions and chat.
  const auto completion = ParseCompletions(R"({"prompt":"x","logit_bias":{"5":10},"min_tokens":2})",
                                           TinyEnglishContext());
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->sampling.logit_bias().at(5), 10.0f);
  EXPECT_EQ(completion->sampling.min_new_tokens(), 2);
}

TEST(EchoedStringsTest, RidIsBoundedPrintableAscii) {
  const auto rid_body = [](const std::string& rid) {
    return R"({"text":"x","rid":")" + rid + R"("})";
  };
  const auto ok = ParseGenerate(rid_body(std::string(256, 'r')), TinyEnglishContext());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->rid, std::string(256, 'r'));
  EXPECT_EQ(Error(ApiKind::kGenerate, rid_body(std::string(257, 'r'))),
            "rid must be at most 256 bytes of printable ASCII, got 257 bytes");
  EXPECT_EQ(Error(ApiKind::kGenerate, rid_body(std::string(70000, 'r'))),
            "rid must be at most 256 bytes of printable ASCII, got 70000 bytes");
  EXPECT_EQ(Error(ApiKind::kGenerate, rid_body(R"(a\r\nb)")),
            "rid must be at most 256 bytes of printable ASCII (no control characters, line "
            "breaks or non-ASCII); byte 1 is 0x0d");
  EXPECT_THAT(Error(ApiKind::kGenerate, rid_body(R"(\u0000)")), HasSubstr("byte 0 is 0x00"));
  EXPECT_THAT(Error(ApiKind::kCompletions, R"({"prompt":"x","rid":"caf\u00e9"})"),
              HasSubstr("byte 3 is 0xc3"));
}

TEST(EchoedStringsTest, ModelAndUserAreBoundedAndQuotedShort) {
  EXPECT_EQ(
      Error(ApiKind::kCompletions, R"({"prompt":"x","model":")" + std::string(257, 'm') + R"("})"),
      "model must be at most 256 bytes, got 257 bytes");
  EXPECT_EQ(Error(ApiKind::kCompletions, R"({"prompt":"x","model":"a\nb"})"),
            "model must not contain control characters or line breaks");
  EXPECT_EQ(
      Error(ApiKind::kChatCompletions, R"({"messages":[{"role":"user","content":"x"}],"user":")" +
                                           std::string(300, 'u') + R"("})"),
      "user must be at most 256 bytes, got 300 bytes");
  // A path ending in the served name, 256 bytes in all.
  const std::string long_path = std::string(256 - 12, 'm') + "/tandem-tiny";
  const absl::StatusOr<RoutedRequest> long_name =
      ParseCompletions(R"({"prompt":"x","model":")" + long_path + R"("})", TinyEnglishContext());
  ASSERT_TRUE(long_name.ok()) << long_name.status();
  EXPECT_EQ(long_name->model, long_path);
  EXPECT_EQ(Error(ApiKind::kChatCompletions,
                  R"({"messages":[{"role":")" + std::string(1000, 'x') + R"(","content":"a"}]})"),
            "messages[0].role '" + std::string(64, 'x') +
                "...' is not supported; use system, user, assistant or tool");
}

TEST(BodyEndTest, OnlyWhitespaceMayFollowTheJson) {
  EXPECT_TRUE(ParseGenerate("{\"text\":\"x\"} \r\n\t", TinyEnglishContext()).ok());
  EXPECT_EQ(Error(ApiKind::kGenerate, std::string("{\"text\":\"x\"}\0{\"rid\":5}", 22)),
            "the request body is not valid JSON: a NUL byte at offset 12; only whitespace may "
            "follow the JSON object");
  EXPECT_THAT(Error(ApiKind::kGenerate, std::string("{\"text\":\"a\0b\"}", 14)),
              HasSubstr("a NUL byte at offset 10"));
  EXPECT_THAT(Error(ApiKind::kGenerate, R"({"text":"x"} {"text":"y"})"),
              HasSubstr("not valid JSON"));
}

// The token nlohmann quotes in a parse error ("last read: '...'") is a client string like any
// other: a megabyte literal comes back cut, not echoed whole.
TEST(EchoedStringsTest, ParseErrorsQuoteTheTokenShort) {
  for (ApiKind kind : {ApiKind::kGenerate, ApiKind::kCompletions, ApiKind::kChatCompletions}) {
    for (const std::string& body : {R"({"text":")" + std::string(1 << 20, 'x') + "\xff\"}",
                                    R"({"prompt":")" + std::string(1 << 20, 'y') + "\\q\"}",
                                    R"({"messages":12)" + std::string(1 << 20, '3') + "x}"}) {
      const std::string message = Error(kind, body);
      EXPECT_THAT(message, HasSubstr("the request body is not valid JSON: "));
      EXPECT_THAT(message, Not(HasSubstr("json.exception")));
      EXPECT_THAT(message, HasSubstr("..."));
      EXPECT_LT(message.size(), 300u) << message.substr(0, 400);
    }
  }
  EXPECT_THAT(Error(ApiKind::kGenerate, R"({"text":tru})"),
              HasSubstr("last read: '\"text\":tru}'"));
}

TEST(ContextCheckTest, ExactCountInSglangWords) {
  ApiContext ctx = TinyEnglishContext();
  ctx.context_length = 4;
  EXPECT_EQ(Error(ApiKind::kGenerate, R"({"input_ids":[1,2,3,4]})", ctx),
            "The input (4 tokens) is longer than the model's context length (4 tokens).");
  const auto fits =
      ParseGenerate(R"({"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":9}})", ctx);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->sampling.max_new_tokens(), 1);  // clamped to the context left, as SGLang
}

TEST(ContextCheckTest, ByteBoundRefusesWithoutTokenizing) {
  ApiContext ctx = TinyEnglishContext();
  ctx.context_length = 10;
  ctx.max_token_bytes = 2;  // so 100 bytes are at least 100 / (2 * 3) = 16 tokens
  EXPECT_EQ(Error(ApiKind::kGenerate, R"({"text":")" + std::string(100, 'a') + R"("})", ctx),
            "The input (at least 16 tokens) is longer than the model's context length (10 "
            "tokens).");
}

// The early bound must never refuse a prompt that fits: with the real longest token, the bound
// is at most the tokenizer's count, for assorted text.
TEST(ContextCheckTest, ByteBoundIsALowerBoundOfTheTokenCount) {
  const engine::Tokenizer& tokenizer = TinyEnglishTokenizer();
  size_t longest = 0;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.TokenBytes(id, false).size());
  }
  ASSERT_GT(longest, 0u);
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"the ",         "sea", " calm", "\n\n",    "    ",
                                           "<|im_start|>", "é",   "한",    "\xff",    "12345",
                                           "fortune",      ".",   "!!!",   "tonight", "\t"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    const size_t tokens = tokenizer.Encode(text, false).size();
    EXPECT_LE(text.size() / (longest * 3), tokens) << text;
  }
}

}  // namespace
}  // namespace tandem::router

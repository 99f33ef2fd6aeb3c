// ParseGenerate / ParseCompletions (chat: chat_request_test.cc): every accepted shape and every
// error message a client can cause.
#include "router/api/request.h"

#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/api/request_common.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseGenerateTest, TextPromptWithSamplingParams) {
  const auto parsed = ParseGenerate(R"({"text":"Hello world","rid":"r1","stream":true,
      "return_logprob":true,"sampling_params":{"temperature":0.5,"top_p":0.9,"top_k":20,
      "min_p":0.05,"max_new_tokens":32,"stop":["\n\n","END"],"stop_token_ids":[2],
      "ignore_eos":true,"frequency_penalty":0.5,"presence_penalty":-0.5,
      "skip_special_tokens":false,"no_stop_trim":true,"sampling_seed":7}})",
                                    TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const RoutedRequest& r = *parsed;
  EXPECT_EQ(r.kind, ApiKind::kGenerate);
  EXPECT_EQ(r.rid, "r1");
  EXPECT_EQ(r.prompt_text, "Hello world");
  EXPECT_EQ(r.input_ids, TinyEnglishTokenizer().Encode("Hello world"));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.return_logprob);
  EXPECT_FLOAT_EQ(r.sampling.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p(), 0.9f);
  EXPECT_EQ(r.sampling.top_k(), 20);
  EXPECT_FLOAT_EQ(r.sampling.min_p(), 0.05f);
  EXPECT_EQ(r.sampling.max_new_tokens(), 32);
  EXPECT_THAT(r.sampling.stop(), ElementsAre("\n\n", "END"));
  EXPECT_THAT(r.sampling.stop_token_ids(), ElementsAre(2));
  EXPECT_TRUE(r.sampling.ignore_eos());
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty(), 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty(), -0.5f);
  EXPECT_FALSE(r.sampling.skip_special_tokens());
  EXPECT_TRUE(r.sampling.no_stop_trim());
  EXPECT_EQ(r.sampling.seed(), 7u);
}

TEST(ParseGenerateTest, DefaultsFollowSglang) {
  const auto parsed =
      ParseGenerate(R"({"input_ids":[1,2,3],"unknown_field":{"x":1}})", TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->input_ids, ElementsAre(1, 2, 3));
  EXPECT_TRUE(parsed->prompt_text.empty());
  EXPECT_TRUE(parsed->sampling.skip_special_tokens());
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 128);
  EXPECT_FALSE(parsed->sampling.has_temperature());
  EXPECT_FALSE(parsed->stream);
  EXPECT_EQ(parsed->rid.size(), 32u);
  EXPECT_EQ(parsed->rid.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_GT(parsed->created, 0);
  const auto other = ParseGenerate(R"({"input_ids":[1]})", TinyEnglishContext());
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->rid, parsed->rid);
}

// Inverts y ^= (y >> shift) & mask (right) or y ^= (y << shift) & mask (left) on 64 bits.
uint64_t UnXorShift(uint64_t y, int shift, uint64_t mask, bool right) {
  uint64_t x = y;
  for (int i = 0; i < 64 / shift + 1; ++i) x = y ^ ((right ? x >> shift : x << shift) & mask);
  return x;
}

// A rid read as two outputs of a 64-bit generator, low nibbles first (as a generator-fed hex
// writer lays them out).
void RidWords(const std::string& rid, std::vector<uint64_t>* words) {
  for (size_t word = 0; word < 2; ++word) {
    uint64_t bits = 0;
    for (size_t i = 0; i < 16; ++i) {
      const char c = rid[word * 16 + i];
      const uint64_t nibble = c <= '9' ? c - '0' : c - 'a' + 10;
      bits |= nibble << (4 * i);
    }
    words->push_back(bits);
  }
}

// Rids are capabilities (a client's own request for /abort_request, a stored response's id), so
// observed ones must not predict the next. An mt19937_64 behind them does: 156 rids give 312
// outputs, untempered into its state words, and the recurrence gives the next rid. This replays
// that attack on NewRid.
TEST(NewRidTest, ObservedRidsDoNotPredictTheNext) {
  std::vector<uint64_t> outputs;
  for (int i = 0; i < 156; ++i) {
    const std::string rid = api_internal::NewRid();
    ASSERT_EQ(rid.size(), 32u);
    ASSERT_EQ(rid.find_first_not_of("0123456789abcdef"), std::string::npos) << rid;
    RidWords(rid, &outputs);
  }
  std::ostringstream state;
  for (uint64_t y : outputs) {  // mt19937_64's tempering, undone step by step
    y = UnXorShift(y, 43, ~uint64_t{0}, true);
    y = UnXorShift(y, 37, 0xFFF7EEE000000000ULL, false);
    y = UnXorShift(y, 17, 0x71D67FFFEDA60000ULL, false);
    y = UnXorShift(y, 29, 0x5555555555555555ULL, true);
    state << y << ' ';
  }
  state << 312;  // the next call twists: x[312] follows from x[0], x[1] and x[156]
  std::mt19937_64 replay;
  std::istringstream(state.str()) >> replay;
  const uint64_t first = replay();
  const std::vector<uint64_t> predicted = {first, replay()};
  std::vector<uint64_t> next;
  RidWords(api_internal::NewRid(), &next);
  EXPECT_NE(next, predicted) << "the next rid followed from the 156 before it";
}

TEST(ParseGenerateTest, NullMeansAbsentAndStopMayBeAString) {
  const auto parsed = ParseGenerate(
      R"({"text":"hi","rid":null,"sampling_params":{"stop":"x","temperature":null,"seed":3.0}})",
      TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->sampling.stop(), ElementsAre("x"));
  EXPECT_FALSE(parsed->sampling.has_temperature());
  EXPECT_EQ(parsed->sampling.seed(), 3u);
  EXPECT_FALSE(parsed->rid.empty());
}

TEST(ParseGenerateTest, PromptErrors) {
  const ApiContext ctx = TinyEnglishContext();
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"sampling_params":{}})", ctx)),
            "one of text or input_ids is required");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"a","input_ids":[1]})", ctx)),
            "give either text or input_ids, not both");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":["a","b"]})", ctx)),
            "text is a list: batched requests are not supported; send one prompt per request");
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"input_ids":[[1],[2]]})", ctx)),
              HasSubstr("batched requests are not supported"));
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":5})", ctx)), "text must be a string, got integer");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"input_ids":[1,"2"]})", ctx)),
            "input_ids[1] must be an integer, got string");
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"input_ids":[-1]})", ctx)),
              HasSubstr("input_ids[0] must be an integer in [0, 2147483647]"));
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"input_ids":[1e30]})", ctx)),
              HasSubstr("input_ids[0] must be an integer in"));
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"input_ids":[99999]})", ctx)),
              HasSubstr("input_ids[0] = 99999 is outside the vocabulary"));
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"input_ids":[]})", ctx)), "input_ids is empty");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":""})", ctx)), "text is empty");
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"input_ids":[1.5]})", ctx)),
              HasSubstr("input_ids[0] must be an integer, got 1.5"));
}

TEST(ParseGenerateTest, SamplingErrorsNameTheField) {
  const ApiContext ctx = TinyEnglishContext();
  const auto error = [&](const std::string& params) {
    return ErrorOf(ParseGenerate(R"({"text":"x","sampling_params":)" + params + "}", ctx));
  };
  EXPECT_THAT(error(R"({"temperature":-0.1})"), HasSubstr("sampling_params.temperature must be"));
  EXPECT_THAT(error(R"({"temperature":"hot"})"),
              HasSubstr("sampling_params.temperature must be a number, got string"));
  EXPECT_THAT(error(R"({"temperature":1e300})"), HasSubstr("sampling_params.temperature"));
  EXPECT_THAT(error(R"({"top_p":0})"), HasSubstr("sampling_params.top_p must be in (0, 1]"));
  EXPECT_THAT(error(R"({"top_p":1.5})"), HasSubstr("sampling_params.top_p"));
  EXPECT_THAT(error(R"({"top_k":-2})"), HasSubstr("sampling_params.top_k"));
  EXPECT_THAT(error(R"({"min_p":2})"), HasSubstr("sampling_params.min_p"));
  EXPECT_THAT(error(R"({"max_new_tokens":99999999999999999999})"),
              HasSubstr("sampling_params.max_new_tokens"));
  EXPECT_THAT(error(R"({"max_new_tokens":-1})"), HasSubstr("sampling_params.max_new_tokens"));
  EXPECT_THAT(error(R"({"frequency_penalty":3})"), HasSubstr("sampling_params.frequency_penalty"));
  EXPECT_THAT(error(R"({"stop":[""]})"), HasSubstr("sampling_params.stop must not contain"));
  EXPECT_THAT(error(R"({"stop":[1]})"), HasSubstr("sampling_params.stop[0] must be a string"));
  EXPECT_THAT(error(R"({"stop_token_ids":"1"})"),
              HasSubstr("sampling_params.stop_token_ids must be an array of integers"));
  EXPECT_THAT(error(R"({"ignore_eos":1})"),
              HasSubstr("sampling_params.ignore_eos must be a boolean, got integer"));
  EXPECT_THAT(error(R"({"seed":-1e19})"), HasSubstr("sampling_params.seed must be"));
  EXPECT_THAT(error(R"({"seed":9223372036854775808.0})"),
              HasSubstr("sampling_params.seed must be"));
  EXPECT_THAT(error(R"({"seed":18446744073709551615})"), HasSubstr("sampling_params.seed must be"));
  EXPECT_THAT(error(R"({"max_new_tokens":2147483648.0})"),
              HasSubstr("sampling_params.max_new_tokens must be"));
  EXPECT_THAT(error(R"({"repetition_penalty":3})"),
              HasSubstr("sampling_params.repetition_penalty must be a number in [0, 2]"));
  EXPECT_THAT(error(R"j({"regex":"a(?=b)"})j"),
              HasSubstr("sampling_params.regex: group flags, lookaround"));
  EXPECT_THAT(error(R"({"json_schema":"{\"type\": \"integer\", \"multipleOf\": 2}"})"),
              HasSubstr("sampling_params.json_schema: unsupported keyword 'multipleOf'"));
  EXPECT_THAT(error(R"({"ebnf":"root ::= missing"})"),
              HasSubstr("sampling_params.ebnf: undefined rule 'missing'"));
  EXPECT_THAT(error(R"({"regex":"a+","ebnf":"root ::= \"a\""})"), HasSubstr("only one of"));
  EXPECT_THAT(error(R"({"regex":5})"), HasSubstr("sampling_params.regex must be a string"));
  EXPECT_THAT(error(R"({"n":2})"), HasSubstr("sampling_params.n must be 1"));
  EXPECT_EQ(error(R"({"bogus":1})"), "sampling_params.bogus is not a known sampling parameter");
  EXPECT_EQ(error(R"([{}])"),
            "sampling_params is a list: batched requests are not supported; send one prompt per "
            "request");
  EXPECT_EQ(error("3"), "sampling_params must be an object, got integer");
  // Defaults of features we do not serve are accepted.
  EXPECT_EQ(ParseGenerate(R"({"text":"x","sampling_params":{"repetition_penalty":1.0,
      "regex":null,"json_schema":"","n":1,"min_new_tokens":0}})",
                          ctx)
                .status(),
            absl::OkStatus());
}

TEST(ParseGenerateTest, UnsupportedTopLevelFieldsAreNamed) {
  const ApiContext ctx = TinyEnglishContext();
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"x","image_data":"http://a/b.png"})", ctx)),
            "image_data is not supported by this server");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"x","lora_path":"adapter"})", ctx)),
            "lora_path is not supported by this server");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"x","top_logprobs_num":21})", ctx)),
            "top_logprobs_num must be an integer in [0, 20], got 21");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"x","stream":"yes"})", ctx)),
            "stream must be a boolean, got string");
  EXPECT_EQ(ErrorOf(ParseGenerate(R"({"text":"x","rid":["a","b"]})", ctx)),
            "rid is a list: batched requests are not supported; send one prompt per request");
  EXPECT_EQ(ParseGenerate(R"({"text":"x","image_data":null,"lora_path":"","logprob_start_len":-1,
      "return_text_in_logprobs":true})",
                          ctx)
                .status(),
            absl::OkStatus());
}

TEST(ParseGenerateTest, MalformedBodies) {
  const ApiContext ctx = TinyEnglishContext();
  EXPECT_THAT(ErrorOf(ParseGenerate("", ctx)), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"text":"x")", ctx)), HasSubstr("not valid JSON"));
  EXPECT_EQ(ErrorOf(ParseGenerate("[1]", ctx)),
            "the request body must be a JSON object, got array");
  EXPECT_THAT(ErrorOf(ParseGenerate("{\"text\":\"\xff\xfe\"}", ctx)), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf(ParseGenerate(std::string(100000, '['), ctx)),
              HasSubstr("nests JSON deeper than 64 levels"));
}

TEST(ParseGenerateTest, BodiesWhoseParsedFormIsTooLargeAreRefusedBeforeParsing) {
  ApiContext ctx = TinyEnglishContext();
  ctx.max_parsed_json_bytes = 1 << 20;
  std::string objects = R"({"text":"hi","extra":[{})";
  for (int i = 0; i < 10000; ++i) objects += ",{}";
  objects += "]}";
  EXPECT_EQ(ErrorOf(ParseGenerate(objects, ctx)),
            "the request body has too many JSON values: parsed, they would take about 2 MiB, more "
            "than the 1 MiB allowed; send fewer values per request");
  // The same bound for every kind and for batches, and a body within it is parsed.
  const absl::StatusOr<RoutedBatch> batch = ParseBatch(ApiKind::kChatCompletions, objects, ctx);
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr("too many JSON values"));
  ctx.max_parsed_json_bytes = 4 << 20;
  EXPECT_TRUE(ParseGenerate(objects, ctx).ok());
  // A body with a JSON schema is parsed twice: both parses count (about 1.6 MB each here).
  ctx.max_parsed_json_bytes = 3 << 20;
  EXPECT_TRUE(ParseGenerate(objects, ctx).ok());
  std::string with_schema = objects;
  with_schema.pop_back();
  with_schema += R"(,"sampling_params":{"json_schema":{"type":"object"}}})";
  EXPECT_THAT(ErrorOf(ParseGenerate(with_schema, ctx)),
              HasSubstr("too many JSON values for one with tools or JSON schemas"));
  ctx.max_parsed_json_bytes = 8 << 20;
  EXPECT_TRUE(ParseGenerate(with_schema, ctx).ok());
}

TEST(ParseGenerateTest, ContextLengthRejectsLongPromptsAndClampsMaxNewTokens) {
  ApiContext ctx = TinyEnglishContext();
  ctx.context_length = 10;
  const auto clamped =
      ParseGenerate(R"({"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":100}})", ctx);
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(clamped->sampling.max_new_tokens(), 6);
  const auto fits =
      ParseGenerate(R"({"input_ids":[1,2,3,4],"sampling_params":{"max_new_tokens":3}})", ctx);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(fits->sampling.max_new_tokens(), 3);
  EXPECT_EQ(
      ErrorOf(ParseGenerate(
          R"({"input_ids":[1,2,3,4,5,6,7,8,9,10],"sampling_params":{"max_new_tokens":5}})", ctx)),
      "The input (10 tokens) is longer than the model's context length (10 tokens).");
}

TEST(ParseGenerateTest, TextNeedsATokenizer) {
  ApiContext ctx = TinyEnglishContext();
  ctx.tokenizer = nullptr;
  EXPECT_THAT(ErrorOf(ParseGenerate(R"({"text":"x"})", ctx), absl::StatusCode::kFailedPrecondition),
              HasSubstr("no tokenizer"));
  const auto ids = ParseGenerate(R"({"input_ids":[5000]})", ctx);
  ASSERT_TRUE(ids.ok()) << ids.status();  // no vocabulary to check against
}

TEST(ParseGenerateTest, TopLogprobsNumCountsOnlyWithReturnLogprob) {
  const ApiContext ctx = TinyEnglishContext();
  auto with = ParseGenerate(R"({"text":"x","return_logprob":true,"top_logprobs_num":3})", ctx);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->top_logprobs, 3);
  EXPECT_EQ(with->sampling.top_logprobs_num(), 3);
  // Field order does not matter.
  auto reversed = ParseGenerate(R"({"text":"x","top_logprobs_num":4,"return_logprob":true})", ctx);
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  EXPECT_EQ(reversed->sampling.top_logprobs_num(), 4);
  // As SGLang: without return_logprob nothing is returned, so nothing is asked of the workers.
  auto without = ParseGenerate(R"({"text":"x","top_logprobs_num":3})", ctx);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->top_logprobs, 0);
  EXPECT_EQ(without->sampling.top_logprobs_num(), 0);
}

TEST(ParseCompletionsTest, LogprobsCountAsksForAlternatives) {
  auto parsed = ParseCompletions(R"({"prompt":"a","logprobs":3})", TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->return_logprob);
  EXPECT_EQ(parsed->top_logprobs, 3);
  EXPECT_EQ(parsed->sampling.top_logprobs_num(), 3);
}

TEST(ParseCompletionsTest, OpenAiFieldsMap) {
  const auto parsed = ParseCompletions(R"({"model":"tandem-tiny","prompt":"Once upon",
      "max_tokens":20,"temperature":0,"top_p":0.5,"n":1,"stop":"\n","stream":true,
      "stream_options":{"include_usage":true},"logprobs":1,"echo":false,"seed":42,
      "frequency_penalty":0.1,"presence_penalty":0.2,"user":"u1","top_k":5,"min_p":0.1,
      "ignore_eos":true,"skip_special_tokens":false,"stop_token_ids":[3],"no_stop_trim":true,
      "logit_bias":{}})",
                                       TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const RoutedRequest& r = *parsed;
  EXPECT_EQ(r.kind, ApiKind::kCompletions);
  EXPECT_EQ(r.model, "tandem-tiny");
  EXPECT_EQ(r.prompt_text, "Once upon");
  EXPECT_EQ(r.input_ids, TinyEnglishTokenizer().Encode("Once upon"));
  EXPECT_EQ(r.sampling.max_new_tokens(), 20);
  EXPECT_TRUE(r.sampling.has_temperature());
  EXPECT_FLOAT_EQ(r.sampling.temperature(), 0.0f);
  EXPECT_FLOAT_EQ(r.sampling.top_p(), 0.5f);
  EXPECT_THAT(r.sampling.stop(), ElementsAre("\n"));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.return_logprob);
  EXPECT_EQ(r.top_logprobs, 1);
  EXPECT_EQ(r.sampling.top_logprobs_num(), 1);
  EXPECT_EQ(r.sampling.seed(), 42u);
  EXPECT_EQ(r.sampling.top_k(), 5);
  EXPECT_TRUE(r.sampling.ignore_eos());
  EXPECT_FALSE(r.sampling.skip_special_tokens());
  EXPECT_THAT(r.sampling.stop_token_ids(), ElementsAre(3));
  EXPECT_TRUE(r.sampling.no_stop_trim());
}

TEST(ParseCompletionsTest, MaxCompletionTokensIsTakenAsChatTakesIt) {
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseCompletions(R"({"prompt":"a","max_completion_tokens":5})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 5);
  parsed = ParseCompletions(R"({"prompt":"a","max_tokens":9,"max_completion_tokens":3})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 3);
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","max_completion_tokens":-1})", ctx)),
              HasSubstr("max_completion_tokens must be an integer in [0, "));
}

TEST(ParseCompletionsTest, SeedTakesOpenAisSignedRange) {
  // OpenAI's seed is any int64; a negative one is kept as its two's-complement bits.
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseCompletions(R"({"prompt":"a","seed":-4})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.seed(), ~uint64_t{3});
  parsed = ParseCompletions(R"({"prompt":"a","seed":-9223372036854775808})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.seed(), uint64_t{1} << 63);
  parsed = ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}],"seed":-1})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.seed(), ~uint64_t{0});
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","seed":9223372036854775808})", ctx)),
              HasSubstr("seed must be an integer in [-9223372036854775808, 9223372036854775807]"));
}

TEST(ParseCompletionsTest, DefaultsAndPromptForms) {
  const ApiContext ctx = TinyEnglishContext();
  const auto plain = ParseCompletions(R"({"prompt":"a"})", ctx);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->sampling.max_new_tokens(), 16);  // OpenAI's default
  EXPECT_EQ(plain->model, "tandem-tiny");           // absent: the served model
  EXPECT_TRUE(plain->sampling.skip_special_tokens());
  EXPECT_FALSE(plain->return_logprob);
  const auto ids = ParseCompletions(R"({"prompt":[4,5,6]})", ctx);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(ids->input_ids, ElementsAre(4, 5, 6));
  const auto one_string = ParseCompletions(R"({"prompt":["a b"]})", ctx);
  ASSERT_TRUE(one_string.ok());
  EXPECT_EQ(one_string->prompt_text, "a b");
  const auto one_list = ParseCompletions(R"({"prompt":[[7,8]]})", ctx);
  ASSERT_TRUE(one_list.ok());
  EXPECT_THAT(one_list->input_ids, ElementsAre(7, 8));
}

TEST(ModelNameTest, ServedNamesPathsAndTheAnyNameSwitch) {
  ApiContext ctx = TinyEnglishContext();
  ctx.model_dir_name = "qwen3-8b-dir";
  for (const char* name : {"", "default", "tandem-tiny", "/srv/llm/tandem-tiny", "llm/tandem-tiny/",
                           "qwen3-8b-dir", "/srv/llm/qwen3-8b-dir/"}) {
    const auto parsed =
        ParseCompletions(R"({"prompt":"a","model":")" + std::string(name) + R"("})", ctx);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(parsed->model, *name == 0 ? "tandem-tiny" : name);
  }
  for (const char* name : {"gpt-4", "tandem-tiny-2", "tandem-tiny/x", "/", "Default"}) {
    EXPECT_EQ(
        ErrorOf(ParseCompletions(R"({"prompt":"a","model":")" + std::string(name) + R"("})", ctx),
                absl::StatusCode::kNotFound),
        absl::StrCat("the model '", name,
                     "' does not exist; this server serves 'tandem-tiny' (see /v1/models)"));
  }
  ctx.any_model_name = true;
  const auto any = ParseCompletions(R"({"prompt":"a","model":"gpt-4"})", ctx);
  ASSERT_TRUE(any.ok()) << any.status();
  EXPECT_EQ(any->model, "gpt-4");
  // The form is checked either way.
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","model":7})", ctx)),
            "model must be a string, got integer");
}

TEST(ParseCompletionsTest, Errors) {
  const ApiContext ctx = TinyEnglishContext();
  // The served model's names are accepted and echoed; an absent one is the served name.
  const auto named = ParseCompletions(R"({"model":"default","prompt":"a"})", ctx);
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->model, "default");
  const auto unnamed = ParseCompletions(R"({"prompt":"a"})", ctx);
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_EQ(unnamed->model, "tandem-tiny");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"model":"tandem-tiny"})", ctx)), "prompt is required");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({})", ctx)), "prompt is required");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":["a","b"]})", ctx)),
            "prompt holds 2 prompts: batched requests are not supported; send one prompt per "
            "request");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":[]})", ctx)), "prompt is an empty array");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":""})", ctx)), "prompt is empty");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":{}})", ctx)),
            "prompt must be a string or an array of token ids, got object");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","n":3})", ctx)),
            "n must be 1: one completion per request is supported, got 3");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","echo":"yes"})", ctx)),
            "echo must be a boolean, got string");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","logprobs":6})", ctx)),
            "logprobs must be an integer in [0, 5], got 6");
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","logprobs":true})", ctx)),
              HasSubstr("logprobs must be an integer, got boolean"));
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","max_tokens":-5})", ctx)),
              HasSubstr("max_tokens must be an integer in [0, 2147483647], got -5"));
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","max_tokens":1e999})", ctx)),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf(ParseCompletions(R"({"prompt":"a","temperature":-1})", ctx)),
              HasSubstr("temperature must be a number in"));
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","stream_options":true})", ctx)),
            "stream_options must be an object, got boolean");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","best_of":2})", ctx)), "best_of must be 1");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","suffix":"z"})", ctx)),
            "suffix is not supported by this server");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","logit_bias":{"x":10}})", ctx)),
            "logit_bias keys must be token ids (decimal integers >= 0), got \"x\"");
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","user":7})", ctx)),
            "user must be a string, got integer");
}

}  // namespace
}  // namespace tandem::router

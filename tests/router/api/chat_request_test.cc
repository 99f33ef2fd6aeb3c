// ParseChatCompletions (messages, roles, the chat template, input_ids, SGLang's extensions) and
// the structured-output fields of every route: accepted shapes and the errors a client can cause.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/api/request.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseChatCompletionsTest, AppliesTheChatTemplate) {
  const auto parsed = ParseChatCompletions(R"({"model":"tandem-tiny","messages":[
      {"role":"system","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"Tell me "},{"type":"text","text":"a fortune"}]},
      {"role":"assistant","content":"Sure."},
      {"role":"user","content":"Another"}],
      "max_completion_tokens":40,"logprobs":true,"top_logprobs":0,"stream":true,
      "tool_choice":"none","response_format":{"type":"text"}})",
                                           TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string expected =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nTell me a fortune<|im_end|>\n"
      "<|im_start|>assistant\nSure.<|im_end|>\n<|im_start|>user\nAnother<|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(parsed->prompt_text, expected);
  EXPECT_EQ(parsed->input_ids, TinyEnglishTokenizer().Encode(expected, false));
  EXPECT_EQ(parsed->input_ids.front(), *TinyEnglishTokenizer().TokenId("<|im_start|>"));
  EXPECT_EQ(parsed->kind, ApiKind::kChatCompletions);
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 40);
  EXPECT_TRUE(parsed->return_logprob);
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->sampling.skip_special_tokens());
}

TEST(ParseChatCompletionsTest, DeveloperIsSystemAndDefaultsApply) {
  const auto parsed = ParseChatCompletions(
      R"({"messages":[{"role":"developer","content":"x"},{"role":"user","content":"y"}]})",
      TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->prompt_text.rfind("<|im_start|>system\nx<|im_end|>", 0), 0u);
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 128);
}

TEST(ParseChatCompletionsTest, Errors) {
  const ApiContext ctx = TinyEnglishContext();
  const auto error = [&](const std::string& body) {
    return ErrorOf(ParseChatCompletions(body, ctx));
  };
  EXPECT_EQ(error(R"({})"), "messages is required");
  EXPECT_EQ(error(R"({"messages":[]})"), "messages must not be empty");
  EXPECT_EQ(error(R"({"messages":"hi"})"), "messages must be an array, got string");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},
      {"role":"user","content":5}]})"),
            "messages[2].content must be a string or an array of text parts, got integer");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":[{"type":"image_url",
      "image_url":{"url":"http://x"}}]}]})"),
            "messages[0].content[0].type 'image_url' is not supported; only text parts are");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})"),
            "messages[0].content[0].text is required");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":["a"]}]})"),
            "messages[0].content[0] must be an object, got string");
  EXPECT_EQ(error(R"({"messages":[{"role":"function","content":"a","name":"f"}]})"),
            "messages[0].role 'function' is not supported; use system, user, assistant or tool");
  EXPECT_EQ(error(R"({"messages":[{"role":"assistant","tool_calls":[{"id":"1"}]}]})"),
            "messages[0].tool_calls[0].function must be an object");
  EXPECT_EQ(error(R"({"messages":[{"content":"a"}]})"), "messages[0].role is required");
  EXPECT_EQ(error(R"({"messages":[{"role":"user"}]})"), "messages[0].content is required");
  EXPECT_EQ(error(R"({"messages":[1]})"), "messages[0] must be an object, got integer");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function"}]})"),
            "tools[0].function must be an object");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],"top_logprobs":3})"),
            "top_logprobs requires logprobs: true");
  EXPECT_EQ(
      error(R"({"messages":[{"role":"user","content":"a"}],"logprobs":false,"top_logprobs":3})"),
      "top_logprobs requires logprobs: true");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],"logprobs":1})"),
            "logprobs must be a boolean, got integer");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"xml"}})"),
            "response_format.type must be \"text\", \"json_object\", \"json_schema\" or "
            "\"structural_tag\"");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"x"}}})"),
            "response_format.json_schema.schema must be a JSON Schema object");
  EXPECT_THAT(error(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"x",
      "schema":{"type":"string","format":"email"}}}})"),
              HasSubstr("response_format.json_schema.schema: json_schema: unsupported keyword "
                        "'format'"));
  EXPECT_THAT(error(R"({"messages":[{"role":"user","content":"a"}],"regex":"a",
      "response_format":{"type":"json_object"}})"),
              HasSubstr("only one of"));
  EXPECT_THAT(error(R"({"messages":[{"role":"user","content":"a"}],"max_tokens":"9"})"),
              HasSubstr("max_tokens must be an integer, got string"));
  // Audio output is refused; text is what every answer is.
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],"modalities":["text","audio"],
      "audio":{"voice":"alloy","format":"wav"}})"),
            "audio is not supported: the answer is text only");
  EXPECT_EQ(error(R"({"messages":[{"role":"user","content":"a"}],"modalities":["text","audio"]})"),
            "modalities \"audio\" is not supported: only \"text\"");
  EXPECT_THAT(error(R"({"messages":[{"role":"user","content":"a"}],"modalities":[1]})"),
              HasSubstr("modalities"));
  EXPECT_TRUE(ParseChatCompletions(
                  R"({"messages":[{"role":"user","content":"a"}],"modalities":["text"]})", ctx)
                  .ok());
  EXPECT_EQ(ErrorOf(ParseChatCompletions(
                        R"({"model":"m","messages":[{"role":"user","content":"a"}]})", ctx),
                    absl::StatusCode::kNotFound),
            "the model 'm' does not exist; this server serves 'tandem-tiny' (see /v1/models)");
  ApiContext no_tokenizer = ctx;
  no_tokenizer.tokenizer = nullptr;
  EXPECT_EQ(
      ErrorOf(ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}]})", no_tokenizer),
              absl::StatusCode::kFailedPrecondition),
      "this server has no tokenizer loaded, so it cannot apply the chat template");
}

TEST(ParseChatCompletionsTest, LegacyFunctionsAreRefusedNotIgnored) {
  const ApiContext ctx = TinyEnglishContext();
  const std::string user = R"({"messages":[{"role":"user","content":"a"}],)";
  // Answering without the call asked for would read as a model that chose not to call.
  EXPECT_EQ(ErrorOf(ParseChatCompletions(
                user + R"("functions":[{"name":"f","parameters":{"type":"object"}}]})", ctx)),
            "functions is not supported by this server; send them as tools "
            "([{\"type\": \"function\", \"function\": {...}}])");
  EXPECT_EQ(ErrorOf(ParseChatCompletions(user + R"("function_call":{"name":"f"}})", ctx)),
            "function_call is not supported by this server; use tool_choice");
  EXPECT_EQ(ErrorOf(ParseChatCompletions(user + R"("function_call":"auto"})", ctx)),
            "function_call is not supported by this server; use tool_choice");
  // Their defaults ask for nothing.
  EXPECT_TRUE(ParseChatCompletions(user + R"("functions":[],"function_call":"none"})", ctx).ok());
  EXPECT_TRUE(ParseChatCompletions(user + R"("functions":null,"function_call":null})", ctx).ok());
}

TEST(ParseChatCompletionsTest, InputIdsAreThePromptAsSglangTakesThem) {
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"a"}],"input_ids":[5,6,7],"max_tokens":3})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->input_ids, ElementsAre(5, 6, 7));
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 3);
  // The messages are still checked; the ids are checked as /generate's are.
  EXPECT_EQ(ErrorOf(ParseChatCompletions(R"({"messages":[],"input_ids":[5]})", ctx)),
            "messages must not be empty");
  EXPECT_EQ(ErrorOf(ParseChatCompletions(
                R"({"messages":[{"role":"user","content":"a"}],"input_ids":[]})", ctx)),
            "input_ids is empty");
  EXPECT_THAT(ErrorOf(ParseChatCompletions(
                  R"({"messages":[{"role":"user","content":"a"}],"input_ids":[99999999]})", ctx)),
              HasSubstr("input_ids[0] = 99999999 is outside the vocabulary"));
}

TEST(ParseOpenAiTest, SglangExtensionsWeDoNotServeAreNamed) {
  const ApiContext ctx = TinyEnglishContext();
  for (const char* key : {"stop_regex", "custom_logit_processor", "session_id", "return_token_ids",
                          "return_prompt_token_ids", "return_meta_info"}) {
    const std::string value = absl::StrContains(key, "return_") ? "true" : R"("x")";
    const std::string field = absl::StrCat(R"(")", key, R"(":)", value, "}");
    EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a",)" + field, ctx)),
              absl::StrCat(key, " is not supported by this server"));
    EXPECT_EQ(ErrorOf(ParseChatCompletions(
                  R"({"messages":[{"role":"user","content":"a"}],)" + field, ctx)),
              absl::StrCat(key, " is not supported by this server"));
    // At their defaults they ask for nothing.
    const std::string off = absl::StrCat(R"(")", key, R"(":)",
                                         absl::StrContains(key, "return_") ? "false" : "null", "}");
    EXPECT_TRUE(ParseCompletions(R"({"prompt":"a",)" + off, ctx).ok()) << key;
  }
}

TEST(ParseChatCompletionsTest, AssistantRefusalPartsAreWhatItSaid) {
  const ApiContext ctx = TinyEnglishContext();
  const auto parsed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","refusal":null,
      "content":[{"type":"text","text":"Well. "},{"type":"refusal","refusal":"No."}]},
      {"role":"user","content":"b"}]})",
      ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_NE(parsed->prompt_text.find("<|im_start|>assistant\nWell. No.<|im_end|>"),
            std::string::npos)
      << parsed->prompt_text;
  EXPECT_EQ(
      ErrorOf(ParseChatCompletions(
          R"({"messages":[{"role":"user","content":[{"type":"refusal","refusal":"x"}]}]})", ctx)),
      "messages[0].content[0].type 'refusal' is not supported; only text parts are");
  EXPECT_EQ(ErrorOf(ParseChatCompletions(
                R"({"messages":[{"role":"assistant","content":[{"type":"refusal"}]}]})", ctx)),
            "messages[0].content[0].refusal is required");
}

TEST(ParseChatCompletionsTest, AssistantNullContentIsEmpty) {
  const auto parsed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"a"},{"role":"assistant","content":null}]})",
      TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_NE(parsed->prompt_text.find("<|im_start|>assistant\n<|im_end|>"), std::string::npos);
}

TEST(StructuredOutputTest, GenerateCarriesRegexEbnfAndJsonSchema) {
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseGenerate(R"({"text":"x","sampling_params":{"regex":"[a-z]+"}})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.regex(), "[a-z]+");
  parsed = ParseGenerate(R"({"text":"x","sampling_params":{"ebnf":"root ::= \"yes\""}})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.ebnf(), "root ::= \"yes\"");
  // SGLang takes the schema as a string; the object itself is accepted too.
  parsed = ParseGenerate(
      R"({"text":"x","sampling_params":{"json_schema":"{\"type\": \"integer\"}"}})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.json_schema(), R"({"type": "integer"})");
  parsed = ParseGenerate(R"({"text":"x","sampling_params":{"json_schema":{"type":"object",
      "properties":{"z":{"type":"integer"},"a":{"type":"string"}}}}})",
                         ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The schema's own key order: it is the order properties are generated in.
  EXPECT_EQ(parsed->sampling.json_schema(),
            R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})");
}

TEST(StructuredOutputTest, ChatResponseFormat) {
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"json_object"}})",
                                     ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->sampling.json_object());
  parsed = ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,
      "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],
      "additionalProperties":false}}}})",
                                ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.json_schema(),
            R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"],)"
            R"("additionalProperties":false})");
  parsed = ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}],
      "response_format":{"type":"text"}})",
                                ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.constraint_case(), proto::SamplingParams::CONSTRAINT_NOT_SET);
}

TEST(StructuredOutputTest, CompletionsResponseFormat) {
  // vLLM's and SGLang's completions take response_format too; it constrains, never is ignored.
  const ApiContext ctx = TinyEnglishContext();
  auto parsed = ParseCompletions(R"({"prompt":"a","response_format":{"type":"json_object"}})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->sampling.json_object());
  parsed = ParseCompletions(R"({"prompt":"a","response_format":{"type":"json_schema",
      "json_schema":{"name":"n","schema":{"type":"object","properties":{"b":{"type":"integer"},
      "a":{"type":"string"}}}}}})",
                            ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.json_schema(),
            R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"type":"string"}}})");
  parsed = ParseCompletions(R"({"prompt":"a","response_format":{"type":"text"}})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.constraint_case(), proto::SamplingParams::CONSTRAINT_NOT_SET);
  EXPECT_EQ(ErrorOf(ParseCompletions(R"({"prompt":"a","response_format":{"type":"xml"}})", ctx)),
            "response_format.type must be \"text\", \"json_object\", \"json_schema\" or "
            "\"structural_tag\"");
  EXPECT_THAT(ErrorOf(ParseCompletions(
                  R"({"prompt":"a","regex":"a+","response_format":{"type":"json_object"}})", ctx)),
              HasSubstr("only one of"));
  // A batch's every prompt carries it.
  const auto batch =
      ParseBatch(ApiKind::kCompletions,
                 R"({"prompt":["a","b"],"response_format":{"type":"json_object"}})", ctx);
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 2u);
  for (const RoutedRequest& item : batch->items) EXPECT_TRUE(item.sampling.json_object());
}

TEST(StructuredOutputTest, StructuralTagOnGenerateAndChat) {
  const ApiContext ctx = TinyEnglishContext();
  // SGLang's /generate takes the tag's JSON text; the object is accepted too, in its key order.
  const std::string tag =
      R"({"type":"structural_tag","structures":[{"begin":"<f=a>","schema":{"type":"object",)"
      R"("properties":{"z":{"type":"integer"},"b":{"type":"string"}}},"end":"</f>"}],)"
      R"("triggers":["<f="]})";
  auto parsed = ParseGenerate(
      R"({"text":"x","sampling_params":{"structural_tag":)" + nlohmann::json(tag).dump() + "}}",
      ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.structural_tag().tag(), tag);
  EXPECT_EQ(parsed->sampling.structural_tag().form(), proto::StructuralTag::TRIGGERED);
  parsed = ParseGenerate(R"({"text":"x","sampling_params":{"structural_tag":)" + tag + "}}", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->sampling.structural_tag().tag(), tag);
  // OpenAI's response_format, with the schemas' key order kept.
  parsed = ParseChatCompletions(
      R"({"messages":[{"role":"user","content":"a"}],"response_format":)" + tag + "}", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(nlohmann::ordered_json::parse(parsed->sampling.structural_tag().tag())["structures"],
            nlohmann::ordered_json::parse(tag)["structures"]);

  auto error = [&](const std::string& body) {
    return ErrorOf(ParseGenerate(body, ctx), absl::StatusCode::kInvalidArgument);
  };
  EXPECT_EQ(error(R"({"text":"x","sampling_params":{"structural_tag":"[]"}})"),
            "sampling_params.structural_tag: must be a JSON object");
  EXPECT_EQ(error(R"({"text":"x","sampling_params":{"structural_tag":{"structures":[{"begin":"<a",)"
                  R"("end":""}],"triggers":["<a","a"]}}})"),
            "sampling_params.structural_tag: triggers[0] contains triggers[1]: no "
            "trigger may occur within another");
  EXPECT_THAT(
      error(R"({"text":"x","sampling_params":{"structural_tag":{"structures":[{"begin":"<a",)"
            R"("end":"","schema":{"type":"object","patternProperties":{}}}],)"
            R"("triggers":["<"]}}})"),
      HasSubstr("sampling_params.structural_tag: structures[0].schema: "
                "json_schema: unsupported keyword 'patternProperties'"));
  EXPECT_THAT(error(R"({"text":"x","sampling_params":{"regex":"a","structural_tag":{"structures":)"
                    R"([{"begin":"<a","end":""}],"triggers":["<"]}}})"),
              HasSubstr("only one of"));
  EXPECT_THAT(ErrorOf(ParseChatCompletions(R"({"messages":[{"role":"user","content":"a"}],)"
                                           R"("response_format":{"type":"structural_tag",)"
                                           R"("structures":[{"begin":"<a","end":""}],)"
                                           R"("triggers":["<"],"extra":1}})",
                                           ctx),
                      absl::StatusCode::kInvalidArgument),
              HasSubstr("response_format: structural_tag: unknown key 'extra'"));
}

}  // namespace
}  // namespace tandem::router

// The Responses API's requests (router/api/responses.h): ParseResponses (input items to the chat
// conversation, settings, previous_response_id, the errors a client can cause), ResponseStore
// and the input items' pages. The answers: responses_shape_test.cc.
#include "router/api/responses.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/response.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

constexpr char kWeatherTool[] =
    R"({"type":"function","name":"get_weather","description":"The weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}},
        "required":["city"]}})";

TEST(ParseResponsesTest, InputItemsAreTheChatConversation) {
  const auto parsed = ParseResponses(
      absl::StrCat(R"({"model":"tandem-tiny","instructions":"Be brief.","input":[
      {"role":"developer","content":"Use metric units."},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"Weather "},
                                                 {"type":"input_text","text":"in Oslo?"}]},
      {"type":"reasoning","id":"rs_1","summary":[]},
      {"role":"assistant","content":[{"type":"output_text","text":"Checking."}]},
      {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Oslo\"}"},
      {"type":"function_call_output","call_id":"call_1","output":"Rain, 9 C"}],
      "tools":[)",
                   kWeatherTool, R"(],"max_output_tokens":40,"temperature":0.5,"stream":true})"),
      TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  // The same conversation sent to chat renders the same prompt.
  const auto chat = ParseChatCompletions(
      R"({"messages":[{"role":"system","content":"Be brief."},
      {"role":"system","content":"Use metric units."},
      {"role":"user","content":"Weather in Oslo?"},
      {"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"Rain, 9 C"}],
      "tools":[{"type":"function","function":{"name":"get_weather","description":"The weather",
        "parameters":{"type":"object","properties":{"city":{"type":"string"}},
        "required":["city"]}}}]})",
      TinyEnglishContext());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(parsed->prompt_text, chat->prompt_text);
  EXPECT_EQ(parsed->input_ids, chat->input_ids);
  EXPECT_EQ(parsed->kind, ApiKind::kResponses);
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 40);
  EXPECT_TRUE(parsed->stream);
  EXPECT_EQ(parsed->tool_call_syntax, ToolCallSyntax::kQwen);
  EXPECT_THAT(parsed->tool_names, ::testing::ElementsAre("get_weather"));

  const ResponsesRequest& responses = *parsed->responses;
  EXPECT_THAT(responses.id, ::testing::MatchesRegex("resp_[0-9a-f]{32}"));
  EXPECT_TRUE(responses.store);
  // The conversation kept for a next turn leaves the instructions out.
  ASSERT_EQ(responses.conversation.size(), 4u);
  EXPECT_EQ(responses.conversation[0]["role"], "system");
  EXPECT_EQ(responses.conversation[0]["content"], "Use metric units.");
  EXPECT_EQ(responses.conversation[2]["tool_calls"][0]["id"], "call_1");
  // The input items, reasoning left out; the roles as sent.
  std::vector<std::string> types;
  for (const Json& item : responses.input_items) types.push_back(item["type"]);
  EXPECT_THAT(types, ::testing::ElementsAre("message", "message", "message", "function_call",
                                            "function_call_output"));
  EXPECT_EQ(responses.input_items[0]["role"], "developer");
  EXPECT_EQ(responses.input_items[1]["content"][0]["text"], "Weather in Oslo?");
  EXPECT_EQ(responses.input_items[2]["content"][0]["type"], "output_text");
  // What the Response object repeats.
  EXPECT_EQ(responses.echo["instructions"], "Be brief.");
  EXPECT_EQ(responses.echo["max_output_tokens"], 40);
  EXPECT_EQ(responses.echo["temperature"], 0.5);
  EXPECT_EQ(responses.echo["top_p"], 1.0);
  EXPECT_EQ(responses.echo["tools"][0]["name"], "get_weather");
  EXPECT_EQ(responses.echo["tool_choice"], "auto");
}

TEST(ParseResponsesTest, StringInputAndSettings) {
  const auto parsed = ParseResponses(
      R"({"input":"Hello","store":false,"metadata":{"k":"v"},"text":{"format":{"type":"json_object"}},
          "reasoning":{"effort":"none"},"truncation":"auto","include":["reasoning.encrypted_content"],
          "top_logprobs":0,"parallel_tool_calls":false,"user":"u1","seed":4})",
      TinyEnglishContext());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->prompt_text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(parsed->sampling.max_new_tokens(), 128);
  EXPECT_EQ(parsed->sampling.seed(), 4);
  EXPECT_EQ(parsed->sampling.constraint_case(), proto::SamplingParams::kJsonObject);
  const ResponsesRequest& responses = *parsed->responses;
  EXPECT_FALSE(responses.store);
  EXPECT_EQ(responses.echo["store"], false);
  EXPECT_EQ(responses.echo["metadata"], Json({{"k", "v"}}));
  EXPECT_EQ(responses.echo["text"]["format"]["type"], "json_object");
  EXPECT_EQ(responses.echo["reasoning"]["effort"], "none");
  EXPECT_EQ(responses.echo["parallel_tool_calls"], false);
  EXPECT_EQ(responses.echo["user"], "u1");
  EXPECT_EQ(responses.echo["truncation"], "auto");
  ASSERT_EQ(responses.input_items.size(), 1u);
  EXPECT_EQ(responses.input_items[0]["role"], "user");
}

TEST(ParseResponsesTest, Errors) {
  const ApiContext ctx = TinyEnglishContext();
  const auto error = [&](const std::string& body) { return ErrorOf(ParseResponses(body, ctx)); };
  EXPECT_EQ(error(R"({})"), "input is required");
  EXPECT_EQ(error(R"({"input":[]})"), "input must not be empty");
  EXPECT_EQ(error(R"({"input":5})"),
            "input must be a string or an array of input items, got integer");
  EXPECT_EQ(error(R"({"input":[{"type":"reasoning","summary":[]}]})"),
            "input has no message, call or call output");
  EXPECT_EQ(
      error(R"({"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]})"),
      "input[0].content[0].type 'input_image' is not supported: this server takes text only "
      "(input_text parts)");
  EXPECT_EQ(error(R"({"input":[{"role":"tool","content":"x"}]})"),
            "input[0].role 'tool' is not supported; use user, system, developer or assistant");
  EXPECT_EQ(error(R"({"input":[{"role":"user"}]})"), "input[0].content is required");
  EXPECT_EQ(error(R"({"input":[{"type":"item_reference","id":"msg_1"}]})"),
            "input[0].type 'item_reference' is not supported; use message, function_call or "
            "function_call_output items");
  EXPECT_EQ(error(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})"),
            "input[0].call_id is required");
  EXPECT_EQ(
      error(R"({"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{x"}]})"),
      "input[0].arguments must be JSON text (the call's arguments object)");
  EXPECT_EQ(error(R"({"input":[{"type":"function_call_output","call_id":"c"}]})"),
            "input[0].output is required");
  EXPECT_EQ(error(R"({"input":"x","tools":[{"type":"web_search"}]})"),
            "tools[0].type 'web_search' is not supported: only function tools are (the server "
            "has no built-in tools)");
  EXPECT_EQ(error(R"({"input":"x","tool_choice":{"type":"file_search"}})"),
            "tool_choice must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
            "\"name\": ...}");
  EXPECT_EQ(error(R"({"input":"x","text":{"format":{"type":"xml"}}})"),
            "text.format.type must be \"text\", \"json_object\" or \"json_schema\"");
  EXPECT_EQ(error(R"({"input":"x","text":{"format":{"type":"json_schema","name":"n"}}})"),
            "text.format.schema is required for json_schema");
  EXPECT_EQ(error(R"({"input":"x","background":true})"),
            "background is not supported: a response is answered on the request's own "
            "connection");
  EXPECT_THAT(error(R"({"input":"x","conversation":"conv_1"})"),
              HasSubstr("with previous_response_id"));
  EXPECT_THAT(error(R"({"input":"x","prompt":{"id":"pmpt_1"}})"), HasSubstr("prompt"));
  EXPECT_THAT(error(R"({"input":"x","top_logprobs":21})"), HasSubstr("top_logprobs"));
  EXPECT_THAT(error(R"({"input":"x","include":[5]})"), HasSubstr("include"));
  EXPECT_THAT(error(R"({"input":"x","include":["message.output_text.logprob"]})"),
              HasSubstr("include: 'message.output_text.logprob' is not a supported value; "
                        "supported values: 'code_interpreter_call.outputs', "));
  EXPECT_EQ(error(R"({"input":"x","reasoning":{"effort":"maximal"}})"),
            "reasoning.effort must be one of \"none\", \"minimal\", \"low\", \"medium\", "
            "\"high\", \"xhigh\", got 'maximal'");
  EXPECT_THAT(error(R"({"input":"x","reasoning":{"effort":3}})"),
              HasSubstr("reasoning.effort must be one of"));
  for (const char* fine : {R"({"input":"x","include":["reasoning.encrypted_content"]})",
                           R"({"input":"x","reasoning":{"effort":"minimal","summary":"auto"}})"}) {
    EXPECT_TRUE(ParseResponses(fine, ctx).ok()) << fine;
  }
  EXPECT_EQ(error(R"({"input":"x","truncation":"middle"})"),
            "truncation must be \"disabled\" or \"auto\"");
  EXPECT_EQ(error(R"({"input":"x","metadata":{"k":5}})"),
            "metadata.k must be a string, got integer");
  EXPECT_EQ(
      error(absl::StrCat(R"({"input":"x","metadata":{"k":")", std::string(513, 'v'), R"("}})")),
      "metadata.k is longer than 512 bytes");
  std::string many = R"({"input":"x","metadata":{)";
  for (int i = 0; i < 17; ++i) absl::StrAppend(&many, i > 0 ? "," : "", "\"k", i, "\":\"v\"");
  EXPECT_EQ(error(many + "}}"), "metadata has 17 keys; at most 16 are allowed");
  EXPECT_THAT(error(R"({"input":"x","max_output_tokens":0})"), HasSubstr("max_output_tokens"));
  EXPECT_THAT(error(R"({"input":"x","store":"yes"})"), HasSubstr("store"));
  EXPECT_THAT(error(R"({"input":"x","temperature":"hot"})"), HasSubstr("temperature"));
  EXPECT_THAT(
      ErrorOf(ParseResponses(R"({"input":"x","model":"other"})", ctx), absl::StatusCode::kNotFound),
      HasSubstr("other"));
  EXPECT_THAT(ErrorOf(ParseResponses(R"({"input":"x","previous_response_id":"resp_1"})", ctx),
                      absl::StatusCode::kNotFound),
              HasSubstr("previous_response_id 'resp_1' names no stored response"));
}

StoredResponse Stored(const std::string& body, Json conversation = Json::array()) {
  StoredResponse entry;
  entry.body = body;
  entry.conversation = std::move(conversation);
  entry.input_items = Json::array();
  return entry;
}

TEST(ParseResponsesTest, PreviousResponseContinuesItsConversation) {
  ResponseStore store(1 << 20);
  store.Put("resp_a", Stored("{}", Json::parse(R"([{"role":"user","content":"Hi"},
                                                   {"role":"assistant","content":"Hello."}])")));
  ApiContext ctx = TinyEnglishContext();
  ctx.response_store = &store;
  const auto parsed = ParseResponses(
      R"({"input":"And now?","previous_response_id":"resp_a","instructions":"Be kind."})", ctx);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->prompt_text,
            "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(parsed->responses->conversation.size(), 3u);
  EXPECT_EQ(parsed->responses->echo["previous_response_id"], "resp_a");
  EXPECT_EQ(ErrorOf(ParseResponses(R"({"input":"x","previous_response_id":"resp_b"})", ctx),
                    absl::StatusCode::kNotFound),
            "previous_response_id 'resp_b' names no stored response: it was not stored (store: "
            "false, or its answer failed or was left unfinished), was deleted, or was dropped "
            "from this router's store (--response-store-mb)");
}

TEST(ResponseStoreTest, KeepsTheMostRecentlyUsedWithinItsBytes) {
  const std::string body(1000, 'x');
  ResponseStore store(4000);
  store.Put("a", Stored(body));
  store.Put("b", Stored(body));
  store.Put("c", Stored(body));
  EXPECT_EQ(store.size(), 3u);
  const size_t one = store.bytes() / 3;
  EXPECT_GT(one, body.size());
  ASSERT_NE(store.Get("a"), nullptr);  // a is now the most recently used
  store.Put("d", Stored(body));        // over 4000: the least recently used (b) goes
  EXPECT_EQ(store.Get("b"), nullptr);
  EXPECT_NE(store.Get("a"), nullptr);
  EXPECT_NE(store.Get("c"), nullptr);
  EXPECT_NE(store.Get("d"), nullptr);
  EXPECT_LE(store.bytes(), 4000u);
  // A replacement counts once; an entry larger than the store is not kept, and takes the old
  // entry of its id with it.
  store.Put("a", Stored("short"));
  EXPECT_EQ(store.Get("a")->body, "short");
  store.Put("a", Stored(std::string(5000, 'y')));
  EXPECT_EQ(store.Get("a"), nullptr);
  EXPECT_TRUE(store.Delete("c"));
  EXPECT_FALSE(store.Delete("c"));
  EXPECT_TRUE(store.Delete("d"));
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.bytes(), 0u);

  ResponseStore none(0);
  none.Put("a", Stored("{}"));
  EXPECT_EQ(none.Get("a"), nullptr);
}

TEST(ResponseStoreTest, ConcurrentUseStaysWithinItsBytes) {
  ResponseStore store(64 << 10);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 2000; ++i) {
        const std::string id = absl::StrCat("r", (t * 7 + i) % 300);
        if (i % 3 == 0) {
          store.Put(id, Stored(std::string(100 + i % 900, 'z')));
        } else if (i % 3 == 1) {
          std::shared_ptr<const StoredResponse> got = store.Get(id);
          if (got != nullptr) {
            EXPECT_GE(got->body.size(), 100u);
          }
        } else {
          store.Delete(id);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_LE(store.bytes(), 64u << 10);
}

TEST(InputItemsPageTest, PagesNewestFirstUnlessAsked) {
  Json items = Json::array();
  for (int i = 0; i < 5; ++i) items.push_back({{"id", absl::StrCat("msg_", i)}});
  auto ids = [](const std::string& page) {
    std::vector<std::string> out;
    const Json parsed = Json::parse(page);
    for (const Json& item : parsed["data"]) out.push_back(item["id"]);
    return out;
  };
  const auto all = InputItemsPage(items, "", "", "");
  ASSERT_TRUE(all.ok());
  EXPECT_THAT(ids(*all), ::testing::ElementsAre("msg_4", "msg_3", "msg_2", "msg_1", "msg_0"));
  EXPECT_EQ(Json::parse(*all)["object"], "list");
  EXPECT_EQ(Json::parse(*all)["has_more"], false);
  const auto first = InputItemsPage(items, "asc", "", "2");
  ASSERT_TRUE(first.ok());
  EXPECT_THAT(ids(*first), ::testing::ElementsAre("msg_0", "msg_1"));
  EXPECT_EQ(Json::parse(*first)["has_more"], true);
  EXPECT_EQ(Json::parse(*first)["last_id"], "msg_1");
  const auto next = InputItemsPage(items, "asc", "msg_1", "2");
  ASSERT_TRUE(next.ok());
  EXPECT_THAT(ids(*next), ::testing::ElementsAre("msg_2", "msg_3"));
  const auto end = InputItemsPage(items, "desc", "msg_0", "");
  ASSERT_TRUE(end.ok());
  EXPECT_TRUE(ids(*end).empty());
  EXPECT_TRUE(Json::parse(*end)["first_id"].is_null());
  EXPECT_FALSE(InputItemsPage(items, "", "", "0").ok());
  EXPECT_FALSE(InputItemsPage(items, "", "", "101").ok());
  EXPECT_FALSE(InputItemsPage(items, "", "", "ten").ok());
  EXPECT_FALSE(InputItemsPage(items, "up", "", "").ok());
  EXPECT_FALSE(InputItemsPage(items, "", "msg_9", "").ok());
}

}  // namespace
}  // namespace tandem::router

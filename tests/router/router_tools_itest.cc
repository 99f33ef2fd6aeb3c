// Tool calling end to end: tandem-router with the shipped model's chat template in front of a
// plain worker and of a prefill/decode pair. tool_choice "required" and a named function make
// the tiny model write calls (the grammar constrains the prefill worker's first token too) whose
// arguments validate against the tool's schema — checked with the engine's own JSON Schema
// compiler, independent of the router's call grammar — streamed and not; SGLang's structural_tag
// on /generate.
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/grammar/json_schema_compiler.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/structural_tag.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/process.h"
#include "tests/integration/router_process.h"
#include "tests/integration/worker_process.h"

namespace tandem::itest {
namespace {

using nlohmann::json;

const json kWeatherParameters = json::parse(R"({"type":"object","properties":{
    "city":{"type":"string","enum":["Paris","Oslo"]},"days":{"type":"integer"},
    "hourly":{"type":"boolean"}},"required":["city","days"],"additionalProperties":false})");

json ChatBody(const json& tool_choice, bool stream, int seed) {
  return {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
          {"tools",
           {{{"type", "function"},
             {"function", {{"name", "get_weather"}, {"parameters", kWeatherParameters}}}},
            {{"type", "function"}, {"function", {{"name", "tell_fortune"}}}}}},
          {"tool_choice", tool_choice},
          {"parallel_tool_calls", false},
          {"max_tokens", 120},
          {"temperature", 1},
          {"seed", seed},
          {"stream", stream}};
}

// Whether `arguments` (JSON text) is an instance of the weather schema.
bool ValidWeatherArguments(const std::string& arguments) {
  auto grammar = engine::grammar::CompileJsonSchema(kWeatherParameters.dump());
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  if (!grammar.ok()) return false;
  auto matcher = engine::grammar::GrammarMatcher::Create(*grammar);
  // The schema grammar takes compact JSON in the schema's property order, as the router writes.
  return matcher.ok() && matcher->AcceptString(arguments) && matcher->IsComplete();
}

// The one call of a chat answer (non-streamed body or SSE), checked for shape.
json OneCall(const testing::ClientResponse& response, bool stream) {
  EXPECT_EQ(response.status, 200) << response.body;
  json call;
  std::string finish;
  if (!stream) {
    const json body = json::parse(response.body);
    const json& choice = body["choices"][0];
    finish = choice["finish_reason"];
    EXPECT_TRUE(choice["message"]["content"].is_null()) << response.body;
    EXPECT_EQ(choice["message"]["tool_calls"].size(), 1u) << response.body;
    call = choice["message"]["tool_calls"][0];
  } else {
    bool done = false;
    for (const json& event : SseEvents(response.body, &done)) {
      if (event["choices"].empty()) continue;
      const json& choice = event["choices"][0];
      const json& delta = choice["delta"];
      if (delta.contains("content") && delta["content"].is_string()) {
        EXPECT_EQ(delta["content"], "") << response.body;
      }
      if (delta.contains("tool_calls")) {
        EXPECT_TRUE(call.is_null()) << "a second call: " << response.body;
        call = delta["tool_calls"][0];
        EXPECT_EQ(call["index"], 0);
      }
      if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    }
    EXPECT_TRUE(done);
  }
  EXPECT_EQ(finish, "tool_calls") << response.body;
  EXPECT_EQ(call["type"], "function") << response.body;
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << response.body;
  return call;
}

class RouterToolsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    colocated_ = StartWorker("colocated", {"--cluster-secret", kTestClusterSecret}).release();
    prefill_ = StartWorker("prefill").release();
    decode_ = StartWorker("decode").release();
  }
  static void TearDownTestSuite() {
    for (WorkerProcess* w : {colocated_, prefill_, decode_}) delete w;
  }
  static std::vector<std::unique_ptr<RouterProcess>> Routers() {
    std::vector<std::unique_ptr<RouterProcess>> routers;
    routers.push_back(
        StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls", colocated_->url()}));
    routers.push_back(StartRouter(
        {"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
         prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode", decode_->url()}));
    return routers;
  }

  static WorkerProcess* colocated_;
  static WorkerProcess* prefill_;
  static WorkerProcess* decode_;
};
WorkerProcess* RouterToolsTest::colocated_ = nullptr;
WorkerProcess* RouterToolsTest::prefill_ = nullptr;
WorkerProcess* RouterToolsTest::decode_ = nullptr;

TEST_F(RouterToolsTest, RequiredGivesAValidCallStreamedAndNotInPlainAndPdMode) {
  for (const auto& router : Routers()) {
    for (const bool stream : {false, true}) {
      for (int seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE(::testing::Message()
                     << "port " << router->port << " stream " << stream << " seed " << seed);
        const json call = OneCall(RouterRequest(router->port, "POST", "/v1/chat/completions",
                                                ChatBody("required", stream, seed).dump()),
                                  stream);
        const std::string name = call["function"]["name"];
        const std::string arguments = call["function"]["arguments"];
        if (name == "get_weather") {
          EXPECT_TRUE(ValidWeatherArguments(arguments)) << arguments;
        } else {
          EXPECT_EQ(name, "tell_fortune");
          EXPECT_TRUE(json::parse(arguments).is_object()) << arguments;
        }
      }
    }
  }
}

TEST_F(RouterToolsTest, NamedFunctionIsCalledWithValidArguments) {
  const json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  for (const auto& router : Routers()) {
    for (const bool stream : {false, true}) {
      const json call = OneCall(RouterRequest(router->port, "POST", "/v1/chat/completions",
                                              ChatBody(named, stream, 7).dump()),
                                stream);
      EXPECT_EQ(call["function"]["name"], "get_weather");
      EXPECT_TRUE(ValidWeatherArguments(call["function"]["arguments"])) << call.dump();
    }
  }
}

// tool_choice "auto" with a strict function and parallel_tool_calls false, plain and PD: both
// legs take the at-most-one grammar (a worker that did not know its form would refuse the leg),
// and a call, if the model makes one, is one call whose strict arguments validate. (The tiny
// model answers these prompts in text; the grammar itself is covered by router_api_test's
// ChatToolsGrammarTest.AutoWithoutParallelCallsEndsWithTheFirstCall.)
TEST_F(RouterToolsTest, AutoWithAStrictFunctionMakesAtMostOneValidCall) {
  for (const auto& router : Routers()) {
    for (int seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(::testing::Message() << "port " << router->port << " seed " << seed);
      json body = ChatBody("auto", /*stream=*/false, seed);
      body["tools"][0]["function"]["strict"] = true;
      const testing::ClientResponse response =
          RouterRequest(router->port, "POST", "/v1/chat/completions", body.dump());
      ASSERT_EQ(response.status, 200) << response.body;
      const json& message = json::parse(response.body)["choices"][0]["message"];
      if (!message.contains("tool_calls") || message["tool_calls"].is_null()) continue;
      ASSERT_EQ(message["tool_calls"].size(), 1u) << response.body;
      const json& function = message["tool_calls"][0]["function"];
      if (function["name"] == "get_weather") {
        EXPECT_TRUE(ValidWeatherArguments(function["arguments"])) << response.body;
      }
    }
  }
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// A tokenizer directory with the shipped vocabulary and Qwen3's chat template (it thinks first).
std::string Qwen3TokenizerDir() {
  const std::string dir = ::testing::TempDir() + "/router_tools_qwen3";
  std::filesystem::create_directories(dir);
  const std::string model = SourcePath("models/tandem-tiny-english");
  std::filesystem::copy_file(model + "/tokenizer.json", dir + "/tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  json config = json::parse(ReadWholeFile(model + "/tokenizer_config.json"));
  config["chat_template"] =
      ReadWholeFile(SourcePath("tests/engine/jinja_templates/Qwen-Qwen3.jinja"));
  std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  return dir;
}

// Qwen3 with thinking and the qwen3 reasoning parser: the grammar lets the model think before the
// call; whatever it does, the answer is one valid call (reasoning, if any, apart), plain and PD.
// (The tiny model, not trained on the template, goes straight to the call: the think block
// itself is covered by router_api_test's ChatToolsGrammarTest.Qwen3MayThinkBeforeARequiredCall.)
TEST_F(RouterToolsTest, Qwen3ThinkingThenRequiredCall) {
  const std::string tokenizer = Qwen3TokenizerDir();
  std::vector<std::unique_ptr<RouterProcess>> routers;
  routers.push_back(
      StartRouter({"--cluster-secret", kTestClusterSecret, "--worker-urls", colocated_->url(),
                   "--tokenizer-path", tokenizer, "--reasoning-parser", "qwen3"}));
  routers.push_back(
      StartRouter({"--cluster-secret", kTestClusterSecret, "--pd-disaggregation", "--prefill",
                   prefill_->url(), std::to_string(prefill_->bootstrap_port), "--decode",
                   decode_->url(), "--tokenizer-path", tokenizer, "--reasoning-parser", "qwen3"}));
  for (const auto& router : routers) {
    for (const bool stream : {false, true}) {
      for (int seed = 1; seed <= 3; ++seed) {
        SCOPED_TRACE(::testing::Message()
                     << "port " << router->port << " stream " << stream << " seed " << seed);
        json body = ChatBody("required", stream, seed);
        body["max_tokens"] = 400;
        const testing::ClientResponse response =
            RouterRequest(router->port, "POST", "/v1/chat/completions", body.dump());
        if (!stream) {  // reasoning, when the model thought, is apart from the (null) content
          const json& message = json::parse(response.body)["choices"][0]["message"];
          if (message.contains("reasoning_content") && !message["reasoning_content"].is_null()) {
            EXPECT_TRUE(message["reasoning_content"].is_string()) << response.body;
          }
        }
        const json call = OneCall(response, stream);
        const std::string name = call["function"]["name"];
        const std::string arguments = call["function"]["arguments"];
        if (name == "get_weather") {
          EXPECT_TRUE(ValidWeatherArguments(arguments)) << arguments;
        } else {
          EXPECT_EQ(name, "tell_fortune");
          EXPECT_TRUE(json::parse(arguments).is_object()) << arguments;
        }
      }
    }
  }
}

// Structured output with a small max_tokens through the router, plain and PD: the content always
// parses (length-aware closing, guaranteed from a budget of the shortest valid output in bytes:
// 24 for the weather schema, {"city":"Oslo","days":0}); finish_reason is "stop" when the model
// ended it, "length" when the budget did.
TEST_F(RouterToolsTest, SmallMaxTokensStructuredOutputParses) {
  const json formats[] = {{{"type", "json_object"}},
                          {{"type", "json_schema"},
                           {"json_schema", {{"name", "weather"}, {"schema", kWeatherParameters}}}}};
  for (const auto& router : Routers()) {
    for (const json& format : formats) {
      for (int max_tokens : {24, 32}) {
        for (int seed = 1; seed <= 3; ++seed) {
          SCOPED_TRACE(::testing::Message() << "port " << router->port << " " << format.dump()
                                            << " max_tokens " << max_tokens << " seed " << seed);
          const json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                             {"response_format", format},
                             {"max_tokens", max_tokens},
                             {"temperature", 1},
                             {"seed", seed}};
          const testing::ClientResponse response =
              RouterRequest(router->port, "POST", "/v1/chat/completions", body.dump());
          ASSERT_EQ(response.status, 200) << response.body;
          const json choice = json::parse(response.body)["choices"][0];
          const std::string content = choice["message"]["content"];
          EXPECT_TRUE(json::accept(content)) << content;
          const std::string finish = choice["finish_reason"];
          EXPECT_TRUE(finish == "stop" || finish == "length") << finish;
          if (format["type"] == "json_schema") {
            auto grammar = engine::grammar::CompileJsonSchema(kWeatherParameters.dump());
            ASSERT_TRUE(grammar.ok());
            auto matcher = engine::grammar::GrammarMatcher::Create(*grammar);
            EXPECT_TRUE(matcher->AcceptString(content) && matcher->IsComplete()) << content;
          }
        }
      }
    }
  }
}

// An integer without bounds in a response_format schema stays within 18 digits, so a client
// parsing it into int64 can: greedy, the shipped model otherwise answers a 21-digit number here.
TEST_F(RouterToolsTest, UnboundedIntegerAnswerFitsInt64) {
  const json schema = json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}},
      "required":["n"],"additionalProperties":false})");
  for (const auto& router : Routers()) {
    for (const char* prompt : {"How many?", "Count the stars.", "Give me a big number."}) {
      SCOPED_TRACE(::testing::Message() << "port " << router->port << " " << prompt);
      const json body = {
          {"messages", {{{"role", "user"}, {"content", prompt}}}},
          {"response_format",
           {{"type", "json_schema"}, {"json_schema", {{"name", "count"}, {"schema", schema}}}}},
          {"max_tokens", 60},
          {"temperature", 0}};
      const testing::ClientResponse response =
          RouterRequest(router->port, "POST", "/v1/chat/completions", body.dump());
      ASSERT_EQ(response.status, 200) << response.body;
      const std::string content = json::parse(response.body)["choices"][0]["message"]["content"];
      const json value = json::parse(content, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(value.is_object()) << content;
      // nlohmann reads an integer beyond 64 bits as a float.
      EXPECT_TRUE(value["n"].is_number_integer()) << content;
      const std::string digits = value["n"].dump();
      EXPECT_LE(digits.size() - (digits[0] == '-' ? 1 : 0), 18u) << content;
    }
  }
}

// SGLang's structural_tag on /generate, plain and PD: free text in which every "e" the model
// writes must be followed by one digit (the structure "e" + an integer 0..9 + ""). The outputs are
// in the tag's language, the trigger does occur, and a PD pair samples the same text as a plain
// worker for the same seed.
TEST_F(RouterToolsTest, StructuralTagConstrainsWhatFollowsTheTrigger) {
  const json tag = {{"structures",
                     {{{"begin", "e"},
                       {"schema", {{"type", "integer"}, {"minimum", 0}, {"maximum", 9}}},
                       {"end", ""}}}},
                    {"triggers", {"e"}}};
  auto grammar = engine::grammar::CompileStructuralTag(
      tag.dump(), engine::grammar::StructuralTagForm::kTriggered, false);
  ASSERT_TRUE(grammar.ok()) << grammar.status();
  std::vector<std::unique_ptr<RouterProcess>> routers = Routers();
  bool triggered = false;
  for (int seed = 1; seed <= 3; ++seed) {
    std::vector<std::string> texts;
    for (const auto& router : routers) {
      SCOPED_TRACE(::testing::Message() << "port " << router->port << " seed " << seed);
      const json body = {{"text", "Once upon a time"},
                         {"sampling_params",
                          {{"structural_tag", tag.dump()},
                           {"max_new_tokens", 40},
                           {"temperature", 1},
                           {"sampling_seed", seed}}}};
      const testing::ClientResponse response =
          RouterRequest(router->port, "POST", "/generate", body.dump());
      ASSERT_EQ(response.status, 200) << response.body;
      const std::string text = json::parse(response.body)["text"];
      auto matcher = engine::grammar::GrammarMatcher::Create(*grammar);
      ASSERT_TRUE(matcher.ok());
      EXPECT_TRUE(matcher->AcceptString(text) && matcher->IsComplete()) << text;
      triggered = triggered || text.find('e') != std::string::npos;
      texts.push_back(text);
    }
    EXPECT_EQ(texts[0], texts[1]) << "seed " << seed;
  }
  EXPECT_TRUE(triggered);
}

}  // namespace
}  // namespace tandem::itest

// /tokenize and /detokenize bodies: SGLang's shapes (a list in, a list out), the chat-template
// path, and every error a client can cause.
#include "router/api/tokenize.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

Json Tokenize(const std::string& body) {
  absl::StatusOr<std::string> answer = TokenizeBody(body, TinyEnglishTokenizer(), 512);
  EXPECT_TRUE(answer.ok()) << answer.status();
  return answer.ok() ? Json::parse(*answer) : Json();
}

Json Detokenize(const std::string& body) {
  absl::StatusOr<std::string> answer = DetokenizeBody(body, TinyEnglishTokenizer());
  EXPECT_TRUE(answer.ok()) << answer.status();
  return answer.ok() ? Json::parse(*answer) : Json();
}

std::string TokenizeError(const std::string& body) {
  absl::StatusOr<std::string> answer = TokenizeBody(body, TinyEnglishTokenizer(), 512);
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(answer.status().message());
}

std::string DetokenizeError(const std::string& body) {
  absl::StatusOr<std::string> answer = DetokenizeBody(body, TinyEnglishTokenizer());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument) << body;
  return std::string(answer.status().message());
}

TEST(TokenizeTest, OnePromptIsTheTokenizersIds) {
  const engine::Tokenizer& tok = TinyEnglishTokenizer();
  const Json j = Tokenize(R"({"model":"default","prompt":"Once upon a time"})");
  const std::vector<int32_t> ids = tok.Encode("Once upon a time");
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(j["count"], ids.size());
  EXPECT_EQ(j["max_model_len"], 512);
  // Exactly SGLang's three keys.
  EXPECT_EQ(j.size(), 3u) << j.dump();
}

TEST(TokenizeTest, AddSpecialTokensFalseLeavesThePostProcessorsTokensOut) {
  const engine::Tokenizer& tok = TinyEnglishTokenizer();
  const Json j = Tokenize(R"({"prompt":"Hello","add_special_tokens":false})");
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), tok.Encode("Hello", false));
}

TEST(TokenizeTest, AListInIsAListOut) {
  const engine::Tokenizer& tok = TinyEnglishTokenizer();
  const Json j = Tokenize(R"({"prompt":["Hello","Once upon a time",""]})");
  ASSERT_TRUE(j["tokens"].is_array());
  ASSERT_EQ(j["tokens"].size(), 3u);
  EXPECT_EQ(j["tokens"][1].get<std::vector<int32_t>>(), tok.Encode("Once upon a time"));
  EXPECT_EQ(j["count"],
            Json::array({tok.Encode("Hello").size(), tok.Encode("Once upon a time").size(),
                         tok.Encode("").size()}));
  const Json empty = Tokenize(R"({"prompt":[]})");
  EXPECT_EQ(empty["tokens"], Json::array());
  EXPECT_EQ(empty["count"], Json::array());
}

TEST(TokenizeTest, MessagesAreRenderedAsAChatRequestIs) {
  const std::string messages = R"([{"role":"user","content":"Tell me a fortune"}])";
  const Json j = Tokenize(R"({"messages":)" + messages + "}");
  ApiContext ctx;
  ctx.tokenizer = &TinyEnglishTokenizer();
  ctx.served_model_name = "tandem-tiny";
  ctx.context_length = 512;
  absl::StatusOr<RoutedRequest> chat =
      ParseChatCompletions(R"({"messages":)" + messages + "}", ctx);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), chat->input_ids);
  EXPECT_EQ(j["count"], chat->input_ids.size());
}

TEST(TokenizeTest, ErrorsNameTheField) {
  EXPECT_THAT(TokenizeError(R"({})"), HasSubstr("exactly one of prompt and messages"));
  EXPECT_THAT(TokenizeError(R"({"prompt":"a","messages":[{"role":"user","content":"b"}]})"),
              HasSubstr("exactly one of prompt and messages"));
  EXPECT_THAT(TokenizeError(R"({"prompt":7})"),
              HasSubstr("prompt must be a string or an array of strings, got integer"));
  EXPECT_THAT(TokenizeError(R"({"prompt":["a",[1,2]]})"),
              HasSubstr("prompt[1] must be a string, got array"));
  EXPECT_THAT(TokenizeError(R"({"prompt":"a","add_special_tokens":"yes"})"),
              HasSubstr("add_special_tokens must be a boolean"));
  EXPECT_THAT(TokenizeError(R"({"messages":[]})"), HasSubstr("messages must not be empty"));
  EXPECT_THAT(TokenizeError(R"({"messages":[{"role":"wizard","content":"x"}]})"),
              HasSubstr("messages[0]"));
  EXPECT_THAT(TokenizeError(R"({"prompt":"a","model":7})"), HasSubstr("model must be a string"));
  EXPECT_THAT(TokenizeError("[1,2]"), HasSubstr("object"));
  EXPECT_THAT(TokenizeError("{\"prompt\":\"a\"} trailing"), HasSubstr("JSON"));
  Json many = {{"prompt", Json::array()}};
  for (size_t i = 0; i <= kMaxTokenizeItems; ++i) many["prompt"].push_back("x");
  EXPECT_THAT(TokenizeError(many.dump()), HasSubstr("at most 1024"));
}

TEST(DetokenizeTest, IdsBackToTextAndListsToLists) {
  const engine::Tokenizer& tok = TinyEnglishTokenizer();
  const std::vector<int32_t> ids = tok.Encode("Once upon a time");
  const Json one = Detokenize(Json({{"tokens", ids}}).dump());
  EXPECT_EQ(one["text"], tok.Decode(ids, /*skip_special_tokens=*/true));
  EXPECT_EQ(one.size(), 1u);
  const Json two = Detokenize(Json({{"tokens", {ids, tok.Encode("Hello")}}}).dump());
  ASSERT_TRUE(two["text"].is_array());
  EXPECT_EQ(two["text"][0], one["text"]);
  EXPECT_EQ(two["text"][1], tok.Decode(tok.Encode("Hello"), true));
  EXPECT_EQ(Detokenize(R"({"tokens":[]})")["text"], "");
}

TEST(DetokenizeTest, SkipSpecialTokensDefaultsToTrue) {
  const engine::Tokenizer& tok = TinyEnglishTokenizer();
  const std::vector<int32_t> eos = tok.eos_token_ids();
  ASSERT_FALSE(eos.empty());
  std::vector<int32_t> ids = tok.Encode("Hello", false);
  ids.push_back(eos.front());
  const std::string kept = tok.Decode(ids, false);
  const std::string skipped = tok.Decode(ids, true);
  ASSERT_NE(kept, skipped);  // the fixture must tell the two apart
  EXPECT_EQ(Detokenize(Json({{"tokens", ids}}).dump())["text"], skipped);
  EXPECT_EQ(Detokenize(Json({{"tokens", ids}, {"skip_special_tokens", false}}).dump())["text"],
            kept);
}

TEST(DetokenizeTest, ErrorsNameTheField) {
  const int vocab = TinyEnglishTokenizer().vocab_size();
  EXPECT_THAT(DetokenizeError(R"({})"), HasSubstr("tokens is required"));
  EXPECT_THAT(DetokenizeError(R"({"tokens":"abc"})"), HasSubstr("tokens must be an array"));
  EXPECT_THAT(DetokenizeError(Json({{"tokens", {1, vocab}}}).dump()),
              HasSubstr("tokens[1] must be an integer in [0, " + std::to_string(vocab - 1)));
  EXPECT_THAT(DetokenizeError(R"({"tokens":[-1]})"), HasSubstr("tokens[0]"));
  EXPECT_THAT(DetokenizeError(R"({"tokens":[[1,2],[3,"x"]]})"), HasSubstr("tokens[1][1]"));
  EXPECT_THAT(DetokenizeError(R"({"tokens":[[1],2]})"), HasSubstr("tokens[1]"));
  EXPECT_THAT(DetokenizeError(R"({"tokens":[1],"skip_special_tokens":1})"),
              HasSubstr("skip_special_tokens must be a boolean"));
  Json many = {{"tokens", Json::array()}};
  for (size_t i = 0; i <= kMaxTokenizeItems; ++i) many["tokens"].push_back(Json::array({1}));
  EXPECT_THAT(DetokenizeError(many.dump()), HasSubstr("at most 1024"));
}

}  // namespace
}  // namespace tandem::router

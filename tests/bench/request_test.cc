// Request bodies per backend and the folding of SSE events / JSON bodies into RequestOutput.
#include "bench/tandem_bench/request.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using Json = nlohmann::json;

int CountWords(const std::string& text) {
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    if (c != ' ' && !in_word) ++words;
    in_word = c != ' ';
  }
  return words;
}

TEST(RequestTest, BackendNames) {
  EXPECT_EQ(*ParseBackend("sglang"), Backend::kSglang);
  EXPECT_EQ(*ParseBackend("sglang-native"), Backend::kSglang);
  EXPECT_EQ(*ParseBackend("sglang-oai"), Backend::kSglangOai);
  EXPECT_EQ(*ParseBackend("sglang-oai-chat"), Backend::kSglangOaiChat);
  auto bad = ParseBackend("vllm");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'vllm'"), std::string::npos);
  EXPECT_STREQ(ApiPath(Backend::kSglangOaiChat), "/v1/chat/completions");
}

TEST(RequestTest, BodiesPerBackend) {
  RequestSettings settings;
  Json body = Json::parse(BuildRequestBody(settings, "Love is", 16));
  EXPECT_EQ(body["text"], "Love is");
  EXPECT_EQ(body["sampling_params"]["max_new_tokens"], 16);
  EXPECT_EQ(body["sampling_params"]["ignore_eos"], true);
  EXPECT_EQ(body["sampling_params"]["temperature"], 0.0);
  EXPECT_EQ(body["stream"], true);

  settings.backend = Backend::kSglangOai;
  settings.model = "fake-model";
  settings.ignore_eos = false;
  body = Json::parse(BuildRequestBody(settings, "Love is", 8));
  EXPECT_EQ(body["prompt"], "Love is");
  EXPECT_EQ(body["model"], "fake-model");
  EXPECT_EQ(body["max_tokens"], 8);
  EXPECT_EQ(body["ignore_eos"], false);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);

  settings.backend = Backend::kSglangOaiChat;
  settings.stream = false;
  body = Json::parse(BuildRequestBody(settings, "Hi", 4));
  EXPECT_EQ(body["messages"][0]["role"], "user");
  EXPECT_EQ(body["messages"][0]["content"], "Hi");
  EXPECT_EQ(body["stream"], false);
  EXPECT_FALSE(body.contains("stream_options"));

  // Invalid UTF-8 in a prompt does not throw; it is replaced.
  settings.backend = Backend::kSglang;
  EXPECT_NO_THROW(Json::parse(BuildRequestBody(settings,
                                               std::string("a\xff"
                                                           "b"),
                                               1)));
}

TEST(RequestTest, SglangCumulativeEventsSpreadMultiTokenGaps) {
  ResponseAccumulator acc(Backend::kSglang);
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a","meta_info":{"completion_tokens":1}})", 0.10).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a b","meta_info":{"completion_tokens":2}})", 0.15).ok());
  // Two tokens in one event 0.10 s later: two gaps of 0.05 s.
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a b c d","meta_info":{"completion_tokens":4}})", 0.25).ok());
  ASSERT_TRUE(acc.OnEvent("[DONE]", 0.26).ok());
  RequestOutput out = std::move(acc).Finish(CountWords);
  ASSERT_TRUE(out.success) << out.error;
  EXPECT_EQ(out.generated_text, " a b c d");
  EXPECT_EQ(out.output_len, 4);
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.10);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.26);
  ASSERT_EQ(out.itl_s.size(), 3u);
  EXPECT_NEAR(out.itl_s[0], 0.05, 1e-12);
  EXPECT_NEAR(out.itl_s[1], 0.05, 1e-12);
  EXPECT_NEAR(out.itl_s[2], 0.05, 1e-12);
}

TEST(RequestTest, SglangIncrementalEventsAreAppended) {
  ResponseAccumulator acc(Backend::kSglang);
  ASSERT_TRUE(acc.OnEvent(R"({"text":"x","meta_info":{"completion_tokens":1}})", 0.1).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"text":"y","meta_info":{"completion_tokens":2}})", 0.2).ok());
  RequestOutput out = std::move(acc).Finish(CountWords);
  EXPECT_EQ(out.generated_text, "xy");
}

TEST(RequestTest, OpenAiUsageChunkGivesTheTokenCount) {
  ResponseAccumulator acc(Backend::kSglangOai);
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":" one"}]})", 0.2).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":" two"}]})", 0.3).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":""}]})", 0.35).ok());  // no content
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[],"usage":{"completion_tokens":5}})", 0.4).ok());
  ASSERT_TRUE(acc.OnEvent("[DONE]", 0.41).ok());
  RequestOutput out = std::move(acc).Finish(CountWords);
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.generated_text, " one two");
  EXPECT_EQ(out.output_len, 5);  // the server's count wins over re-tokenizing
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.2);
  ASSERT_EQ(out.itl_s.size(), 1u);
  EXPECT_NEAR(out.itl_s[0], 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.41);
}

TEST(RequestTest, ChatDeltasWithoutUsageAreRetokenized) {
  ResponseAccumulator acc(Backend::kSglangOaiChat);
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"role":"assistant"}}]})", 0.1).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":"good"}}]})", 0.2).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":" luck"}}]})", 0.3).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{},"finish_reason":"length"}]})", 0.3).ok());
  RequestOutput out = std::move(acc).Finish(CountWords);
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.generated_text, "good luck");
  EXPECT_EQ(out.output_len, 2);
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.2);  // the role-only chunk is not the first token
}

TEST(RequestTest, NonStreamedBody) {
  ResponseAccumulator acc(Backend::kSglangOaiChat);
  ASSERT_TRUE(acc.OnBody(R"({"choices":[{"message":{"content":"a b c"}}],
                             "usage":{"completion_tokens":3}})",
                         0.5)
                  .ok());
  RequestOutput out = std::move(acc).Finish(CountWords);
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.output_len, 3);
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.5);
  EXPECT_TRUE(out.itl_s.empty());
}

TEST(RequestTest, BadEventsFailTheRequest) {
  ResponseAccumulator acc(Backend::kSglang);
  absl::Status status = acc.OnEvent("{\"text\": \"trunc", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("malformed JSON"), std::string::npos);

  ResponseAccumulator error_acc(Backend::kSglangOai);
  status = error_acc.OnEvent(R"({"error":{"message":"decode worker d0 gone"}})", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("decode worker d0 gone"), std::string::npos);

  ResponseAccumulator shape_acc(Backend::kSglangOai);
  status = shape_acc.OnEvent(R"({"choices":"nope"})", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("unexpected response shape"), std::string::npos);

  status = shape_acc.OnEvent("[1,2]", 0.1);
  ASSERT_FALSE(status.ok());

  ResponseAccumulator empty_acc(Backend::kSglang);
  ASSERT_TRUE(empty_acc.OnEvent("[DONE]", 0.1).ok());
  RequestOutput out = std::move(empty_acc).Finish(CountWords);
  EXPECT_FALSE(out.success);
  EXPECT_NE(out.error.find("no generated text"), std::string::npos);
}

}  // namespace
}  // namespace tandem::bench

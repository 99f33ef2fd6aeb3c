// Request bodies per backend and the folding of SSE events / JSON bodies into RequestOutput.
#include "bench/tandem_bench/request.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {
namespace {

using Json = nlohmann::json;

TEST(RequestTest, BackendNames) {
  EXPECT_EQ(*ParseBackend("sglang"), Backend::kSglang);
  EXPECT_EQ(*ParseBackend("sglang-native"), Backend::kSglang);
  EXPECT_EQ(*ParseBackend("sglang-oai"), Backend::kSglangOai);
  EXPECT_EQ(*ParseBackend("sglang-oai-chat"), Backend::kSglangOaiChat);
  EXPECT_EQ(*ParseBackend("vllm"), Backend::kSglangOai);
  EXPECT_EQ(*ParseBackend("lmdeploy-chat"), Backend::kSglangOaiChat);
  auto bad = ParseBackend("trt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'trt'"), std::string::npos);
  EXPECT_STREQ(ApiPath(Backend::kSglangOaiChat), "/v1/chat/completions");
}

DatasetRow Row(const std::string& prompt) { return DatasetRow{prompt, {11, 12}, 2, 16}; }

// The bodies bench_serving sends per backend (key for key, values as it sets them).
TEST(RequestTest, BodiesPerBackend) {
  RequestSettings settings;
  Json body = Json::parse(BuildRequestBody(settings, Row("Love is"), 16));
  EXPECT_EQ(body, Json::parse(R"({"text": "Love is", "sampling_params": {"temperature": 0.0,
      "max_new_tokens": 16, "ignore_eos": true}, "stream": true, "lora_path": null,
      "return_logprob": false, "return_routed_experts": false, "logprob_start_len": -1})"));
  settings.send_ids = true;
  settings.return_logprob = true;
  body = Json::parse(BuildRequestBody(settings, Row("Love is"), 0));
  EXPECT_EQ(body["input_ids"], Json::parse("[11, 12]"));
  EXPECT_FALSE(body.contains("text"));
  EXPECT_EQ(body["sampling_params"]["max_new_tokens"], 0);
  EXPECT_EQ(body["return_logprob"], true);

  settings = RequestSettings{};
  settings.backend = Backend::kSglangOai;
  settings.model = "fake-model";
  settings.ignore_eos = false;
  body = Json::parse(BuildRequestBody(settings, Row("Love is"), 8));
  EXPECT_EQ(body, Json::parse(R"({"model": "fake-model", "prompt": "Love is", "best_of": 1,
      "max_tokens": 8, "stream": true, "temperature": 0.0, "ignore_eos": false})"));

  // The chat backend asks with max_completion_tokens and ignore_eos, and no usage.
  settings.backend = Backend::kSglangOaiChat;
  settings.stream = false;
  settings.ignore_eos = true;
  body = Json::parse(BuildRequestBody(settings, Row("Hi"), 4));
  EXPECT_EQ(body, Json::parse(R"({"model": "fake-model", "messages": [{"role": "user",
      "content": "Hi"}], "max_completion_tokens": 4, "stream": false, "temperature": 0.0,
      "ignore_eos": true})"));

  // --extra-request-body is merged last: its keys win.
  settings.extra_body = Json::parse(R"({"temperature": 0.7, "top_p": 0.9, "ignore_eos": false})");
  body = Json::parse(BuildRequestBody(settings, Row("Hi"), 4));
  EXPECT_EQ(body["temperature"], 0.7);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["ignore_eos"], false);

  // Invalid UTF-8 in a prompt does not throw; it is replaced.
  settings = RequestSettings{};
  EXPECT_NO_THROW(Json::parse(BuildRequestBody(settings,
                                               Row(std::string("a\xff"
                                                               "b")),
                                               1)));
}

TEST(RequestTest, SglangCumulativeEventsSpreadMultiTokenGaps) {
  ResponseAccumulator acc(Backend::kSglang, 16);
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a","meta_info":{"completion_tokens":1}})", 0.10).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a b","meta_info":{"completion_tokens":2}})", 0.15).ok());
  // Two tokens in one event 0.10 s later: two gaps of 0.05 s.
  ASSERT_TRUE(acc.OnEvent(R"({"text":" a b c d","meta_info":{"completion_tokens":4}})", 0.25).ok());
  ASSERT_TRUE(acc.OnEvent("[DONE]", 0.26).ok());
  RequestOutput out = std::move(acc).Finish();
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

TEST(RequestTest, TextlessTokensAreTimedOnlyWhenAskedFor) {
  // Tokens that decode to nothing, then one with text, then two more textless ones.
  const char* events[] = {R"({"text":"","meta_info":{"completion_tokens":1}})",
                          R"({"text":"","meta_info":{"completion_tokens":2}})",
                          R"({"text":"x","meta_info":{"completion_tokens":3}})",
                          R"({"text":"x","meta_info":{"completion_tokens":4}})",
                          R"({"text":"x","meta_info":{"completion_tokens":5}})"};
  const double times[] = {0.5, 0.6, 0.7, 0.8, 1.9};
  auto run = [&](bool textless) {
    ResponseAccumulator acc(Backend::kSglang, 5, textless);
    for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(acc.OnEvent(events[i], times[i]).ok());
    return std::move(acc).Finish();
  };
  // Upstream's rule: the first text is the first token; the same cumulative text again is
  // still an event (its token count grew).
  RequestOutput upstream = run(false);
  EXPECT_DOUBLE_EQ(upstream.ttft_s, 0.7);
  ASSERT_EQ(upstream.itl_s.size(), 2u);
  EXPECT_NEAR(upstream.itl_s[1], 1.1, 1e-12);
  // Timing every token: TTFT at the first token, one gap per token after it.
  RequestOutput all = run(true);
  EXPECT_DOUBLE_EQ(all.ttft_s, 0.5);
  ASSERT_EQ(all.itl_s.size(), 4u);
  EXPECT_NEAR(all.itl_s[0], 0.1, 1e-12);
  EXPECT_NEAR(all.itl_s[3], 1.1, 1e-12);
  EXPECT_EQ(all.generated_text, "x");
  EXPECT_EQ(all.output_len, 5);
  // Only the sglang backend reports token counts per event.
  ResponseAccumulator oai(Backend::kSglangOai, 5, true);
  EXPECT_TRUE(oai.OnEvent(R"({"choices":[{"text":""}]})", 0.5).ok());
  EXPECT_EQ(std::move(oai).Finish().ttft_s, 0.0);
}

TEST(RequestTest, SglangIncrementalEventsAreAppended) {
  ResponseAccumulator acc(Backend::kSglang, 16);
  ASSERT_TRUE(acc.OnEvent(R"({"text":"x","meta_info":{"completion_tokens":1}})", 0.1).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"text":"y","meta_info":{"completion_tokens":2}})", 0.2).ok());
  RequestOutput out = std::move(acc).Finish();
  EXPECT_EQ(out.generated_text, "xy");
}

TEST(RequestTest, OpenAiUsageChunkGivesTheTokenCount) {
  ResponseAccumulator acc(Backend::kSglangOai, 16);
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":" one"}]})", 0.2).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":" two"}]})", 0.3).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"index":0,"text":""}]})", 0.35).ok());  // no content
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[],"usage":{"completion_tokens":5}})", 0.4).ok());
  ASSERT_TRUE(acc.OnEvent("[DONE]", 0.41).ok());
  RequestOutput out = std::move(acc).Finish();
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.generated_text, " one two");
  EXPECT_EQ(out.output_len, 5);  // the server's count wins over re-tokenizing
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.2);
  ASSERT_EQ(out.itl_s.size(), 1u);
  EXPECT_NEAR(out.itl_s[0], 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.41);
}

TEST(RequestTest, ChatDeltasWithoutUsageCountWhatWasAskedFor) {
  ResponseAccumulator acc(Backend::kSglangOaiChat, 7);
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"role":"assistant"}}]})", 0.1).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":"good"}}]})", 0.2).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{"content":" luck"}}]})", 0.3).ok());
  ASSERT_TRUE(acc.OnEvent(R"({"choices":[{"delta":{},"finish_reason":"length"}]})", 0.3).ok());
  RequestOutput out = std::move(acc).Finish();
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.generated_text, "good luck");
  EXPECT_EQ(out.output_len, 7);       // no usage from the server: max_tokens, as bench_serving
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.2);  // the role-only chunk is not the first token
}

TEST(RequestTest, NonStreamedBody) {
  ResponseAccumulator acc(Backend::kSglangOaiChat, 7);
  ASSERT_TRUE(acc.OnBody(R"({"choices":[{"message":{"content":"a b c"}}],
                             "usage":{"completion_tokens":3}})",
                         0.5)
                  .ok());
  RequestOutput out = std::move(acc).Finish();
  ASSERT_TRUE(out.success);
  EXPECT_EQ(out.output_len, 3);
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.5);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.5);
  EXPECT_TRUE(out.itl_s.empty());
}

TEST(RequestTest, BadEventsFailTheRequest) {
  ResponseAccumulator acc(Backend::kSglang, 16);
  absl::Status status = acc.OnEvent("{\"text\": \"trunc", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("malformed JSON"), std::string::npos);

  ResponseAccumulator error_acc(Backend::kSglangOai, 1);
  status = error_acc.OnEvent(R"({"error":{"message":"decode worker d0 gone"}})", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("decode worker d0 gone"), std::string::npos);

  ResponseAccumulator shape_acc(Backend::kSglangOai, 1);
  status = shape_acc.OnEvent(R"({"choices":"nope"})", 0.1);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("unexpected response shape"), std::string::npos);

  status = shape_acc.OnEvent("[1,2]", 0.1);
  ASSERT_FALSE(status.ok());
}

// An answer without generated text (a zero-token request, an immediate EOS) is a success, as
// bench_serving counts it; its output length is the server's count or what was asked for.
TEST(RequestTest, EmptyAnswersSucceed) {
  ResponseAccumulator zero(Backend::kSglang, 0);
  ASSERT_TRUE(
      zero.OnEvent(
              R"({"text":"","meta_info":{"completion_tokens":0,"finish_reason":{"type":"length"}}})",
              0.1)
          .ok());
  ASSERT_TRUE(zero.OnEvent("[DONE]", 0.12).ok());
  RequestOutput out = std::move(zero).Finish();
  EXPECT_TRUE(out.success);
  EXPECT_EQ(out.output_len, 0);
  EXPECT_EQ(out.generated_text, "");
  EXPECT_DOUBLE_EQ(out.ttft_s, 0.0);
  EXPECT_DOUBLE_EQ(out.latency_s, 0.12);

  ResponseAccumulator eos(Backend::kSglangOaiChat, 5);
  ASSERT_TRUE(
      eos.OnBody(R"({"choices":[{"message":{"content":""}}],"usage":{"completion_tokens":1}})", 0.2)
          .ok());
  out = std::move(eos).Finish();
  EXPECT_TRUE(out.success);
  EXPECT_EQ(out.output_len, 1);
}

}  // namespace
}  // namespace tandem::bench

// ParseBatch (lists of prompts, n) and the merged answers of a batch (ResponseShaper::BatchBody,
// BatchStreamUsage, item chunks), in SGLang's and OpenAI's shapes.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"
#include "router/api/response.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ErrorOf(ApiKind kind, const std::string& body) {
  const auto parsed = ParseBatch(kind, body, TinyEnglishContext());
  EXPECT_FALSE(parsed.ok()) << body;
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  return std::string(parsed.status().message());
}

std::vector<std::string> Rids(const RoutedBatch& batch) {
  std::vector<std::string> rids;
  for (const RoutedRequest& item : batch.items) rids.push_back(item.rid);
  return rids;
}

TEST(ParseBatchTest, OnePromptOneChoiceIsTheSingleRequest) {
  const auto batch =
      ParseBatch(ApiKind::kGenerate, R"({"text":"Hello","rid":"r1"})", TinyEnglishContext());
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 1u);
  EXPECT_TRUE(batch->single());
  EXPECT_EQ(batch->items[0].rid, "r1");
  EXPECT_EQ(batch->items[0].batch_rid, "");
  EXPECT_EQ(batch->items[0].index, 0);
  const auto one = ParseGenerate(R"({"text":"Hello","rid":"r1"})", TinyEnglishContext());
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(batch->items[0].input_ids, one->input_ids);
  EXPECT_EQ(batch->items[0].sampling.SerializeAsString(), one->sampling.SerializeAsString());
}

TEST(ParseBatchTest, GenerateTextListWithPerPromptSamplingParams) {
  const auto batch = ParseBatch(ApiKind::kGenerate, R"({"text":["Hello","world"],"rid":"r",
      "sampling_params":[{"max_new_tokens":3},{"max_new_tokens":5,"n":2}]})",
                                TinyEnglishContext());
  EXPECT_FALSE(batch.ok());
  EXPECT_THAT(std::string(batch.status().message()),
              HasSubstr("sampling_params[1].n is 2 but an earlier entry's is 1"));

  const auto ok = ParseBatch(ApiKind::kGenerate, R"({"text":["Hello","world"],"rid":"r",
      "sampling_params":[{"max_new_tokens":3,"n":2},{"max_new_tokens":5,"n":2}]})",
                             TinyEnglishContext());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->list_response);
  EXPECT_EQ(ok->n, 2);
  ASSERT_EQ(ok->items.size(), 4u);
  EXPECT_THAT(Rids(*ok), ElementsAre("r_0", "r_1", "r_2", "r_3"));
  EXPECT_EQ(ok->items[0].input_ids, TinyEnglishTokenizer().Encode("Hello"));
  EXPECT_EQ(ok->items[1].input_ids, TinyEnglishTokenizer().Encode("Hello"));
  EXPECT_EQ(ok->items[2].input_ids, TinyEnglishTokenizer().Encode("world"));
  EXPECT_EQ(ok->items[0].sampling.max_new_tokens(), 3);
  EXPECT_EQ(ok->items[3].sampling.max_new_tokens(), 5);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(ok->items[k].index, k);
    EXPECT_EQ(ok->items[k].batch_rid, "r");
  }
}

TEST(ParseBatchTest, GenerateInputIdsListAndRidList) {
  const auto batch = ParseBatch(ApiKind::kGenerate,
                                R"({"input_ids":[[5,6],[7]],"rid":["a","b"],
      "return_logprob":[true,false],"sampling_params":{"max_new_tokens":2}})",
                                TinyEnglishContext());
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 2u);
  EXPECT_THAT(Rids(*batch), ElementsAre("a", "b"));
  EXPECT_THAT(batch->items[0].input_ids, ElementsAre(5, 6));
  EXPECT_THAT(batch->items[1].input_ids, ElementsAre(7));
  EXPECT_TRUE(batch->items[0].return_logprob);
  EXPECT_FALSE(batch->items[1].return_logprob);
  EXPECT_TRUE(batch->list_response);

  RoutedBatch copy = *batch;
  SetBatchRid("hdr", &copy);  // a request-id header wins over the list
  EXPECT_THAT(Rids(copy), ElementsAre("hdr_0", "hdr_1"));

  EXPECT_THAT(ErrorOf(ApiKind::kGenerate, R"({"input_ids":[[5],[6]],"rid":["a"]})"),
              HasSubstr("rid has 1 entries for 2 prompts"));
  EXPECT_THAT(ErrorOf(ApiKind::kGenerate, R"({"text":["a",""]})"),
              HasSubstr("text[1]: text is empty"));
  EXPECT_THAT(ErrorOf(ApiKind::kGenerate, R"({"text":[]})"), HasSubstr("text is an empty list"));
  // A rid listed twice: the client's mistake, not a request already in progress (a 409).
  EXPECT_EQ(ErrorOf(ApiKind::kGenerate, R"({"text":["a","b","c"],"rid":["x","y","x"]})"),
            "rid[2] 'x' repeats rid[0]; give each prompt its own rid");
}

TEST(ParseBatchTest, GenerateNOnOnePromptAnswersAList) {
  const auto batch = ParseBatch(ApiKind::kGenerate,
                                R"({"text":"Hi","sampling_params":{"n":3,"sampling_seed":40}})",
                                TinyEnglishContext());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->list_response);
  ASSERT_EQ(batch->items.size(), 3u);
  // Each choice its own seed: different samples, the same ones again for the same request.
  EXPECT_EQ(batch->items[0].sampling.seed(), 40u);
  EXPECT_EQ(batch->items[1].sampling.seed(), 41u);
  EXPECT_EQ(batch->items[2].sampling.seed(), 42u);
  EXPECT_EQ(batch->items[0].rid + "", batch->rid + "_0");
  EXPECT_EQ(batch->rid.size(), 32u);  // generated
}

TEST(ParseBatchTest, CompletionsPromptListAndN) {
  const auto batch = ParseBatch(ApiKind::kCompletions,
                                R"({"prompt":["a",[5,6]],"n":2,"best_of":2,"max_tokens":4,
      "rid":"x"})",
                                TinyEnglishContext());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_FALSE(batch->list_response);
  ASSERT_EQ(batch->items.size(), 4u);
  EXPECT_THAT(Rids(*batch), ElementsAre("x_0", "x_1", "x_2", "x_3"));
  EXPECT_THAT(batch->items[3].input_ids, ElementsAre(5, 6));
  EXPECT_EQ(batch->items[0].sampling.max_new_tokens(), 4);
  EXPECT_FALSE(batch->items[0].sampling.has_seed());

  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":"a","n":2,"best_of":3})"),
              HasSubstr("best_of greater than n is not supported"));
  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":"a","n":3,"best_of":2})"),
              HasSubstr("best_of must be at least n (3), got 2"));
  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":"a","n":0})"),
              HasSubstr("n must be an integer in [1, 128]"));
  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":"a","n":129})"),
              HasSubstr("n must be an integer in [1, 128]"));
  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":["a","b","c"],"n":64})"),
              HasSubstr("3 prompts x n 64 = 192 choices; at most 128"));
  EXPECT_THAT(ErrorOf(ApiKind::kCompletions, R"({"prompt":["a",7]})"),
              HasSubstr("prompt[1]: prompt must be a string or an array of token ids"));
}

TEST(ParseBatchTest, ChatN) {
  const auto batch =
      ParseBatch(ApiKind::kChatCompletions,
                 R"({"messages":[{"role":"user","content":"hi"}],"n":2,"seed":9,"stream":true,
      "stream_options":{"include_usage":true}})",
                 TinyEnglishContext());
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items.size(), 2u);
  EXPECT_TRUE(batch->include_usage);
  EXPECT_EQ(batch->items[0].sampling.seed(), 9u);
  EXPECT_EQ(batch->items[1].sampling.seed(), 10u);
  EXPECT_EQ(batch->items[0].input_ids, batch->items[1].input_ids);
}

proto::DecodeEvent Final(std::vector<int32_t> ids, const std::string& text, int prompt_tokens) {
  proto::DecodeEvent e;
  for (int32_t id : ids) e.add_token_ids(id);
  e.set_text(text);
  e.set_finished(true);
  e.mutable_finish_reason()->set_type(proto::FinishReason::LENGTH);
  e.mutable_finish_reason()->set_length(static_cast<int32_t>(ids.size()));
  e.set_prompt_tokens(prompt_tokens);
  e.set_completion_tokens(static_cast<int32_t>(ids.size()));
  e.set_cached_tokens(1);
  return e;
}

RoutedBatch Batch(ApiKind kind, const std::string& body) {
  auto batch = ParseBatch(kind, body, TinyEnglishContext());
  EXPECT_TRUE(batch.ok()) << batch.status();
  for (RoutedRequest& item : batch->items) item.created = 1700000000;
  return *batch;
}

TEST(BatchResponseTest, CompletionsBodyIndexesChoicesAndSumsUsage) {
  const RoutedBatch batch =
      Batch(ApiKind::kCompletions, R"({"prompt":["a","b"],"n":2,"rid":"q","max_tokens":2})");
  std::vector<std::unique_ptr<ResponseShaper>> shapers;
  std::vector<const ResponseShaper*> items;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    shapers.push_back(std::make_unique<ResponseShaper>(batch.items[k]));
    shapers.back()->Accumulate(
        Final({static_cast<int32_t>(10 + k)}, absl::StrCat("t", k), k < 2 ? 3 : 5));
    items.push_back(shapers.back().get());
  }
  const Json body = Json::parse(ResponseShaper::BatchBody(items, batch.n, 0.5));
  const Json expected = Json::parse(R"({"id":"cmpl-q","object":"text_completion",
      "created":1700000000,"model":"tandem-tiny","choices":[
      {"index":0,"text":"t0","logprobs":null,"finish_reason":"length","matched_stop":null},
      {"index":1,"text":"t1","logprobs":null,"finish_reason":"length","matched_stop":null},
      {"index":2,"text":"t2","logprobs":null,"finish_reason":"length","matched_stop":null},
      {"index":3,"text":"t3","logprobs":null,"finish_reason":"length","matched_stop":null}],
      "usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12,
      "prompt_tokens_details":{"cached_tokens":2}}})");
  EXPECT_EQ(body, expected);
}

TEST(BatchResponseTest, GenerateBodyIsAListAndStreamObjectsCarryIndex) {
  const RoutedBatch batch =
      Batch(ApiKind::kGenerate, R"({"text":"a","rid":"g","sampling_params":{"n":2}})");
  std::vector<std::unique_ptr<ResponseShaper>> shapers;
  std::vector<const ResponseShaper*> items;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    shapers.push_back(std::make_unique<ResponseShaper>(batch.items[k]));
    shapers.back()->Accumulate(Final({7}, "x", 2));
    items.push_back(shapers.back().get());
  }
  const Json body = Json::parse(ResponseShaper::BatchBody(items, batch.n, 1.5));
  ASSERT_TRUE(body.is_array());
  ASSERT_EQ(body.size(), 2u);
  EXPECT_EQ(body[0]["meta_info"]["id"], "g_0");
  EXPECT_EQ(body[1]["meta_info"]["id"], "g_1");
  EXPECT_FALSE(body[1].contains("index"));  // SGLang's non-streamed list has none
  EXPECT_EQ(body[1]["text"], "x");

  RoutedRequest streamed = batch.items[1];
  streamed.stream = true;
  ResponseShaper shaper(streamed);
  const std::string sse = shaper.StreamEvent(Final({7}, "x", 2));
  ASSERT_EQ(sse.rfind("data: ", 0), 0u);
  const Json object = Json::parse(sse.substr(6));
  EXPECT_EQ(object["index"], 1);
  EXPECT_EQ(object["meta_info"]["id"], "g_1");
}

TEST(BatchResponseTest, ChatStreamChunksCarryTheirChoiceAndOneUsageChunk) {
  const RoutedBatch batch = Batch(ApiKind::kChatCompletions,
                                  R"({"messages":[{"role":"user","content":"hi"}],"n":2,
      "stream":true,"stream_options":{"include_usage":true},"rid":"c"})");
  std::vector<std::unique_ptr<ResponseShaper>> shapers;
  std::vector<const ResponseShaper*> items;
  for (size_t k = 0; k < batch.items.size(); ++k) {
    shapers.push_back(std::make_unique<ResponseShaper>(batch.items[k]));
    items.push_back(shapers.back().get());
  }
  proto::DecodeEvent token;
  token.add_token_ids(4);
  token.set_text("o");
  const std::string first = shapers[1]->StreamEvent(token);
  const Json chunk = Json::parse(first.substr(6));
  EXPECT_EQ(chunk["id"], "chatcmpl-c");
  EXPECT_EQ(chunk["choices"][0]["index"], 1);
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  // The last chunk of an item has no usage chunk after it: the batch sends one at the end.
  const std::string last = shapers[1]->StreamEvent(Final({5}, "k", 6));
  EXPECT_EQ(last.find("data: ", 1), std::string::npos) << last;
  shapers[0]->StreamEvent(Final({6, 7}, "ab", 6));
  const std::string usage = ResponseShaper::BatchStreamUsage(items, batch.n);
  const Json usage_chunk = Json::parse(usage.substr(6));
  EXPECT_EQ(usage_chunk, Json::parse(R"({"id":"chatcmpl-c","object":"chat.completion.chunk",
      "created":1700000000,"model":"tandem-tiny","choices":[],"usage":{"prompt_tokens":6,
      "completion_tokens":3,"total_tokens":9,"prompt_tokens_details":{"cached_tokens":1}}})"));
}

}  // namespace
}  // namespace tandem::router

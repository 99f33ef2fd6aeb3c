// Logprob shapes with real token text: OpenAI chat `content[].token/bytes`, completions `tokens`,
// `top_logprobs` keys and character `text_offset`, completions echo (the prompt's tokens first,
// the first one null), and SGLang's input/output token logprobs with return_text_in_logprobs.
// Bodies are compared as whole JSON objects.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/api/request.h"
#include "router/api/response.h"
#include "router/api/shapes.h"
#include "tests/router/api/test_tokenizer.h"

namespace tandem::router {
namespace {

using Json = nlohmann::json;

const engine::Tokenizer& Tok() { return TinyEnglishTokenizer(); }

// The first id whose bytes are not whole UTF-8 characters (a byte-level token of part of one).
int32_t PartialUtf8Token() {
  for (int32_t id = 0; id < Tok().vocab_size(); ++id) {
    const std::string b = Tok().TokenBytes(id, false);
    if (b.size() == 1 && static_cast<unsigned char>(b[0]) >= 0xE0 &&
        static_cast<unsigned char>(b[0]) < 0xF0) {
      return id;
    }
  }
  return -1;
}

proto::DecodeEvent Final(const std::vector<int32_t>& ids, const std::string& text,
                         const std::vector<float>& logprobs) {
  proto::DecodeEvent e;
  for (int32_t id : ids) e.add_token_ids(id);
  for (float lp : logprobs) e.add_token_logprobs(lp);
  e.set_text(text);
  e.set_finished(true);
  e.mutable_finish_reason()->set_type(proto::FinishReason::LENGTH);
  e.mutable_finish_reason()->set_length(static_cast<int32_t>(ids.size()));
  e.set_prompt_tokens(3);
  e.set_completion_tokens(static_cast<int32_t>(ids.size()));
  return e;
}

TEST(LogprobShapesTest, TokenTextIsTheTokensTextAndPartialBytesAreEscaped) {
  const std::vector<int32_t> world = Tok().Encode(" world", false);
  ASSERT_EQ(world.size(), 1u);
  EXPECT_EQ(api_internal::TokenText(&Tok(), world[0]), " world");
  const int32_t partial = PartialUtf8Token();
  ASSERT_GE(partial, 0);
  const unsigned char byte = static_cast<unsigned char>(Tok().TokenBytes(partial, false)[0]);
  char expected[8];
  std::snprintf(expected, sizeof(expected), "\\x%02x", byte);
  EXPECT_EQ(api_internal::TokenText(&Tok(), partial), expected);
  EXPECT_EQ(api_internal::TokenText(nullptr, 7), "token_id:7");
}

TEST(LogprobShapesTest, CharCounterCountsWholeCharacters) {
  api_internal::CharCounter c;
  c.Add("h\xc3");  // "h" and the first byte of "é"
  EXPECT_EQ(c.chars(), 1);
  c.Add("\xa9llo");
  EXPECT_EQ(c.chars(), 5);
  c.Add("\xf0\x9f\x98\x80");  // one emoji
  EXPECT_EQ(c.chars(), 6);
  c.Add("\xff");  // a stray byte is one U+FFFD
  EXPECT_EQ(c.chars(), 7);
}

// OpenAI's documented chat shape, with the token's real text and UTF-8 bytes; a token holding
// part of a character has its raw bytes and an escaped text.
TEST(LogprobShapesTest, ChatLogprobsCarryTextAndBytes) {
  const int32_t world = Tok().Encode(" world", false)[0];
  const int32_t partial = PartialUtf8Token();
  const std::string partial_text = api_internal::TokenText(&Tok(), partial);
  const int partial_byte = static_cast<unsigned char>(Tok().TokenBytes(partial, false)[0]);
  proto::TopLogprobs top;
  top.add_token_ids(world);
  top.add_logprobs(-0.25f);
  top.add_token_ids(partial);
  top.add_logprobs(-2.5f);
  const api_internal::TopLogprobList tops = {top};
  const Json got = api_internal::ChatLogprobs(&Tok(), {world}, {-0.25f}, &tops);
  const Json bytes = Json::array({32, 119, 111, 114, 108, 100});
  const Json expected = {
      {"content",
       Json::array({{{"token", " world"},
                     {"logprob", -0.25},
                     {"bytes", bytes},
                     {"top_logprobs",
                      Json::array({{{"token", " world"}, {"logprob", -0.25}, {"bytes", bytes}},
                                   {{"token", partial_text},
                                    {"logprob", -2.5},
                                    {"bytes", Json::array({partial_byte})}}})}}})}};
  EXPECT_EQ(got, expected);
}

// Completions with echo and logprobs: the prompt's text first; its tokens first in the
// logprobs, the first with null logprob and null top_logprobs (as OpenAI); text_offset in
// characters of the returned text.
TEST(LogprobShapesTest, CompletionsEchoPutsThePromptFirst) {
  RoutedRequest r;
  r.kind = ApiKind::kCompletions;
  r.rid = "e";
  r.model = "m";
  r.created = 1;
  r.echo = true;
  r.return_logprob = true;
  r.top_logprobs = 1;
  r.logprob_start_len = 0;
  r.sampling.set_skip_special_tokens(true);
  r.prompt_text = "Hello world";
  r.input_ids = Tok().Encode("Hello world", false);
  const size_t n = r.input_ids.size();
  ASSERT_GE(n, 2u);
  const std::vector<int32_t> out = Tok().Encode(" caf\xc3\xa9!", false);
  ResponseShaper shaper(r, &Tok());
  proto::DecodeEvent e = Final(out, " caf\xc3\xa9!", std::vector<float>(out.size(), -1.0f));
  e.mutable_prompt_logprobs()->set_start(0);
  for (size_t i = 1; i < n; ++i) {
    e.mutable_prompt_logprobs()->add_logprobs(-3.0f);
    proto::TopLogprobs* t = e.mutable_prompt_logprobs()->add_top_logprobs();
    t->add_token_ids(r.input_ids[i]);
    t->add_logprobs(-3.0f);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    proto::TopLogprobs* o = e.add_top_logprobs();
    o->add_token_ids(out[i]);
    o->add_logprobs(-1.0f);
  }
  shaper.Accumulate(e);
  const Json choice = Json::parse(shaper.Body(0))["choices"][0];
  EXPECT_EQ(choice["text"], "Hello world caf\xc3\xa9!");
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), n + out.size());
  std::string prompt;
  Json offsets = Json::array();
  for (size_t i = 0; i < n; ++i) {
    offsets.push_back(prompt.size());  // ASCII: characters are bytes
    prompt += lp["tokens"][i].get<std::string>();
    EXPECT_EQ(lp["token_logprobs"][i], i == 0 ? Json(nullptr) : Json(-3.0));
    EXPECT_EQ(lp["top_logprobs"][i],
              i == 0 ? Json(nullptr) : Json({{lp["tokens"][i].get<std::string>(), -3.0}}));
  }
  EXPECT_EQ(prompt, "Hello world");
  // Offsets: where each token's text starts, in characters ("é" is one).
  int64_t at = 11;
  for (int32_t id : out) {
    offsets.push_back(at);
    api_internal::CharCounter c;
    c.Add(Tok().TokenBytes(id, true));
    at += c.chars();
  }
  EXPECT_EQ(lp["text_offset"], offsets);
  EXPECT_EQ(at, 17);  // " café!" is 6 characters

  // Streamed: the first chunk carries the prompt and its logprobs.
  r.stream = true;
  ResponseShaper streaming(r, &Tok());
  const std::string sse = streaming.StreamEvent(e);
  const Json chunk = Json::parse(sse.substr(6, sse.find("\n\n") - 6));
  EXPECT_EQ(chunk["choices"][0]["text"], "Hello world caf\xc3\xa9!");
  EXPECT_EQ(chunk["choices"][0]["logprobs"], lp);
}

// SGLang: input_token_logprobs from logprob_start_len, the first entry's logprob null;
// return_text_in_logprobs puts each token's text third.
TEST(LogprobShapesTest, GenerateInputTokenLogprobsWithText) {
  RoutedRequest r;
  r.kind = ApiKind::kGenerate;
  r.rid = "g";
  r.return_logprob = true;
  r.return_text_in_logprobs = true;
  r.logprob_start_len = 0;
  r.input_ids = Tok().Encode("Hello world", false);
  const int32_t out = Tok().Encode("!", false)[0];
  ResponseShaper shaper(r, &Tok());
  proto::DecodeEvent e = Final({out}, "!", {-0.5f});
  e.mutable_prompt_logprobs()->set_start(0);
  Json expected = Json::array();
  for (size_t i = 0; i < r.input_ids.size(); ++i) {
    if (i > 0) e.mutable_prompt_logprobs()->add_logprobs(-4.0f);
    expected.push_back(Json::array({i == 0 ? Json(nullptr) : Json(-4.0), r.input_ids[i],
                                    api_internal::TokenText(&Tok(), r.input_ids[i])}));
  }
  shaper.Accumulate(e);
  const Json meta = Json::parse(shaper.Body(0))["meta_info"];
  EXPECT_EQ(meta["input_token_logprobs"], expected);
  EXPECT_EQ(meta["input_token_logprobs"][3][2], " world");
  EXPECT_EQ(meta["output_token_logprobs"], Json::array({Json::array({-0.5, out, "!"})}));
  EXPECT_FALSE(meta.contains("input_top_logprobs"));
}

// The request fields: echo with logprobs scores the prompt from its first token; /generate's
// logprob_start_len must fall inside the prompt (a 400 otherwise, as SGLang).
TEST(LogprobShapesTest, PromptLogprobFieldsParse) {
  ApiContext ctx;
  ctx.tokenizer = &Tok();
  ctx.served_model_name = "m";
  auto echo = ParseCompletions(R"({"prompt":"Hello world","echo":true,"logprobs":1})", ctx);
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_TRUE(echo->echo);
  EXPECT_EQ(echo->logprob_start_len, 0);
  auto plain_echo = ParseCompletions(R"({"prompt":"Hello world","echo":true})", ctx);
  ASSERT_TRUE(plain_echo.ok());
  EXPECT_EQ(plain_echo->logprob_start_len, -1);  // no logprobs: nothing to score

  auto g = ParseGenerate(
      R"({"input_ids":[5,6,7],"return_logprob":true,"logprob_start_len":2,
          "return_text_in_logprobs":true,"sampling_params":{"max_new_tokens":0}})",
      ctx);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->logprob_start_len, 2);
  EXPECT_TRUE(g->return_text_in_logprobs);
  EXPECT_EQ(g->sampling.max_new_tokens(), 0);
  auto past =
      ParseGenerate(R"({"input_ids":[5,6,7],"return_logprob":true,"logprob_start_len":3})", ctx);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().message(),
            "logprob_start_len (3) must be less than the number of input tokens (3)");
  // Without return_logprob the start means nothing (as SGLang).
  EXPECT_TRUE(ParseGenerate(R"({"input_ids":[5,6,7],"logprob_start_len":9})", ctx).ok());
  auto bad = ParseGenerate(R"({"input_ids":[5],"logprob_start_len":-2})", ctx);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("logprob_start_len"), std::string::npos);
}

}  // namespace
}  // namespace tandem::router

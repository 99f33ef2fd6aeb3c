#include "engine/output_processor.h"

#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer/utf8.h"
#include "gtest/gtest.h"
#include "tests/engine/sampling/test_tokenizers.h"

namespace tandem::engine {
namespace {

using testing::AllTokenizers;
using testing::ByteTokens;
using testing::PieceTokens;
using testing::TinyEnglishTokenizer;

constexpr int32_t kTinyEnglishEos = 3069;  // <|endoftext|>

// Everything a stream produced.
struct Stream {
  std::vector<std::string> updates;  // text of each Push, in order
  std::string text;                  // concatenation
  std::optional<FinishReason> finish;
  int64_t finished_at = -1;  // 1-based index of the finishing token
};

Stream Feed(OutputProcessor& out, const std::vector<int32_t>& ids) {
  Stream s;
  for (size_t i = 0; i < ids.size(); ++i) {
    OutputProcessor::Update u = out.Push(ids[i]);
    EXPECT_TRUE(IsValidUtf8(u.text)) << "update " << i << " emitted broken UTF-8";
    s.updates.push_back(u.text);
    s.text += u.text;
    if (u.finish && !s.finish) {
      s.finish = u.finish;
      s.finished_at = static_cast<int64_t>(i) + 1;
    }
  }
  EXPECT_EQ(out.text(), s.text);
  return s;
}

SamplingParams WithStops(std::vector<std::string> stops, int32_t max_new_tokens = 1000) {
  SamplingParams p;
  p.stop = std::move(stops);
  p.max_new_tokens = max_new_tokens;
  EXPECT_TRUE(ValidateSamplingParams(p, 1 << 20).ok());
  return p;
}

TEST(OutputProcessorTest, StopStringSplitAcrossTwoToFourTokensIsCutAndNeverPartlyEmitted) {
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    for (const std::string stop : {"\n\n", "END", "STOP", "世"}) {  // 2, 3, 4, 3 bytes
      SCOPED_TRACE(stop);
      OutputProcessor out(*tok, WithStops({stop}), {});
      const std::string prefix = "Hello there ";
      const std::vector<int32_t> ids = ByteTokens(*tok, prefix + stop + " and more");
      const Stream s = Feed(out, ids);
      EXPECT_EQ(s.text, prefix);
      ASSERT_TRUE(s.finish.has_value());
      EXPECT_EQ(*s.finish, FinishReason::StopString(stop));
      EXPECT_EQ(s.finished_at, static_cast<int64_t>(prefix.size() + stop.size()));
      EXPECT_EQ(out.num_tokens(), s.finished_at);
      // Until the match completed, nothing of the stop string was released.
      for (const std::string& u : s.updates) EXPECT_EQ(u.find(stop[0]), std::string::npos) << u;
    }
  }
}

TEST(OutputProcessorTest, StopStringSplitAcrossRealTokens) {
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    OutputProcessor out(*tok, WithStops({"world peace"}), {});
    const Stream s = Feed(out, PieceTokens(*tok, {"Hello wor", "ld pe", "ace, all"}));
    EXPECT_EQ(s.text, "Hello ");
    ASSERT_TRUE(s.finish.has_value());
    EXPECT_EQ(*s.finish, FinishReason::StopString("world peace"));
  }
}

TEST(OutputProcessorTest, MultiByteCharactersSplitAcrossTokensAreNeverEmittedBroken) {
  const std::string text = "價格: 你好世界 🙂👍🏽 naïve €5 ✓";
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    SamplingParams p;
    p.max_new_tokens = 10000;
    OutputProcessor out(*tok, p, {});
    const Stream s = Feed(out, ByteTokens(*tok, text));  // Feed checks every update
    EXPECT_FALSE(s.finish.has_value());
    EXPECT_EQ(s.text + out.Flush(), text);
    // Real tokenization, too.
    OutputProcessor real(*tok, p, {});
    const Stream r = Feed(real, tok->Encode(text, false));
    EXPECT_EQ(r.text + real.Flush(), text);
  }
}

TEST(OutputProcessorTest, MultiByteStopStringMatchesAcrossTokens) {
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    OutputProcessor out(*tok, WithStops({"🙂👍"}), {});
    const Stream s = Feed(out, ByteTokens(*tok, "ok 🙂🙂👍 tail"));
    EXPECT_EQ(s.text, "ok 🙂");
    ASSERT_TRUE(s.finish.has_value());
    EXPECT_EQ(*s.finish, FinishReason::StopString("🙂👍"));
  }
}

TEST(OutputProcessorTest, HeldBackPrefixIsReleasedWhenTheMatchFails) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  OutputProcessor out(tok, WithStops({"END"}), {});
  const std::vector<int32_t> ids = ByteTokens(tok, "Hi ENd!");
  std::vector<std::string> seen;
  for (int32_t id : ids) {
    OutputProcessor::Update u = out.Push(id);
    EXPECT_FALSE(u.finish.has_value());
    seen.push_back(out.text());
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"H", "Hi", "Hi ", "Hi ", "Hi ", "Hi ENd", "Hi ENd!"}));
}

TEST(OutputProcessorTest, NoStopTrimKeepsTheStopString) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  SamplingParams p = WithStops({"END"});
  p.no_stop_trim = true;
  OutputProcessor out(tok, p, {});
  const Stream s = Feed(out, ByteTokens(tok, "abc END def"));
  EXPECT_EQ(s.text, "abc END");
  EXPECT_EQ(*s.finish, FinishReason::StopString("END"));
}

TEST(OutputProcessorTest, NothingAfterTheMatchIsEmittedEvenInTheSameToken) {
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    OutputProcessor out(*tok, WithStops({"ENDx"}), {});
    const Stream s = Feed(out, PieceTokens(*tok, {"foo", "ENDxbar baz", " more"}));
    EXPECT_EQ(s.text, "foo");
    EXPECT_EQ(*s.finish, FinishReason::StopString("ENDx"));
    // Pushing after the end changes nothing.
    OutputProcessor::Update u = out.Push(tok->Encode("zzz", false)[0]);
    EXPECT_EQ(u.text, "");
    EXPECT_EQ(*u.finish, FinishReason::StopString("ENDx"));
    EXPECT_EQ(out.Flush(), "");
    EXPECT_EQ(out.text(), "foo");
  }
}

TEST(OutputProcessorTest, TheStopStringThatCompletesFirstWins) {
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    // "lo w" completes before "world" (and before "Hello world", which starts earlier).
    for (const auto& ids : {ByteTokens(*tok, "Hello world!"), tok->Encode("Hello world!", false)}) {
      OutputProcessor out(*tok, WithStops({"world", "Hello world", "lo w"}), {});
      const Stream s = Feed(out, ids);
      EXPECT_EQ(s.text, "Hel");
      EXPECT_EQ(*s.finish, FinishReason::StopString("lo w"));
    }
    // Same end: the one that starts first.
    OutputProcessor out(*tok, WithStops({"rld", "world"}), {});
    const Stream s = Feed(out, tok->Encode("Hello world!", false));
    EXPECT_EQ(s.text, "Hello ");
    EXPECT_EQ(*s.finish, FinishReason::StopString("world"));
  }
}

TEST(OutputProcessorTest, EosEndsUnlessIgnoreEos) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  std::vector<int32_t> ids = tok.Encode("Hi there", false);
  ids.push_back(kTinyEnglishEos);
  ids.push_back(tok.Encode("x", false)[0]);

  SamplingParams p;
  OutputProcessor out(tok, p, {kTinyEnglishEos});
  Stream s = Feed(out, ids);
  EXPECT_EQ(s.text, "Hi there");
  EXPECT_EQ(*s.finish, FinishReason::StopToken(kTinyEnglishEos));
  EXPECT_EQ(s.finished_at, static_cast<int64_t>(ids.size()) - 1);

  p.ignore_eos = true;
  p.max_new_tokens = static_cast<int32_t>(ids.size());
  OutputProcessor ignoring(tok, p, {kTinyEnglishEos});
  s = Feed(ignoring, ids);
  EXPECT_EQ(s.text, "Hi therex");  // the special token has no text with skip_special_tokens
  EXPECT_EQ(*s.finish, FinishReason::Length(static_cast<int64_t>(ids.size())));

  p.skip_special_tokens = false;
  OutputProcessor verbatim(tok, p, {kTinyEnglishEos});
  s = Feed(verbatim, ids);
  EXPECT_EQ(s.text, "Hi there<|endoftext|>x");
}

TEST(OutputProcessorTest, StopTokenIdsEndEvenWithIgnoreEosAndReleaseHeldText) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  const int32_t bang = ByteTokens(tok, "!")[0];
  SamplingParams p = WithStops({"END"});
  p.stop_token_ids = {bang};
  p.ignore_eos = true;
  OutputProcessor out(tok, p, {kTinyEnglishEos});
  std::vector<int32_t> ids = ByteTokens(tok, "wow EN");
  ids.push_back(bang);
  const Stream s = Feed(out, ids);
  EXPECT_EQ(s.text, "wow EN");  // "EN" was held back, then released; "!" is not emitted
  EXPECT_EQ(*s.finish, FinishReason::StopToken(bang));
  EXPECT_EQ(s.updates.back(), "EN");
}

TEST(OutputProcessorTest, LengthReleasesEverythingHeld) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  const std::vector<int32_t> ids = ByteTokens(tok, "ab EN");
  OutputProcessor out(tok, WithStops({"END"}, static_cast<int32_t>(ids.size())), {});
  const Stream s = Feed(out, ids);
  EXPECT_EQ(s.text, "ab EN");
  EXPECT_EQ(*s.finish, FinishReason::Length(static_cast<int64_t>(ids.size())));
  EXPECT_EQ(s.finished_at, static_cast<int64_t>(ids.size()));

  // An incomplete character at the very end becomes U+FFFD.
  std::vector<int32_t> cut = ByteTokens(tok, "a你");
  cut.pop_back();
  SamplingParams p;
  p.max_new_tokens = static_cast<int32_t>(cut.size());
  OutputProcessor broken(tok, p, {});
  EXPECT_EQ(Feed(broken, cut).text, "a\xEF\xBF\xBD");
}

TEST(OutputProcessorTest, MaxNewTokensOfOne) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  SamplingParams p;
  p.max_new_tokens = 1;
  OutputProcessor out(tok, p, {kTinyEnglishEos});
  OutputProcessor::Update u = out.Push(tok.Encode("Hi", false)[0]);
  ASSERT_TRUE(u.finish.has_value());
  EXPECT_EQ(*u.finish, FinishReason::Length(1));
  EXPECT_EQ(u.finish->ToJson().dump(), R"({"length":1,"type":"length"})");
  // EOS as the only token is a stop, not a length finish.
  OutputProcessor eos(tok, p, {kTinyEnglishEos});
  EXPECT_EQ(*eos.Push(kTinyEnglishEos).finish, FinishReason::StopToken(kTinyEnglishEos));
}

TEST(OutputProcessorTest, MinNewTokensDefersEosAndStopStrings) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  SamplingParams p = WithStops({"x"});
  p.min_new_tokens = 3;
  OutputProcessor out(tok, p, {kTinyEnglishEos});
  const std::vector<int32_t> ids = {kTinyEnglishEos, ByteTokens(tok, "x")[0],
                                    ByteTokens(tok, "y")[0], kTinyEnglishEos};
  const Stream s = Feed(out, ids);
  // The first 3 tokens never end it by EOS; "x" completed at token 2 (< min_new_tokens) stays
  // text; the EOS at token 4 ends it.
  EXPECT_EQ(s.finished_at, 4);
  EXPECT_EQ(*s.finish, FinishReason::StopToken(kTinyEnglishEos));
  EXPECT_EQ(s.text, "xy");

  OutputProcessor by_string(tok, p, {kTinyEnglishEos});
  const Stream t = Feed(by_string, ByteTokens(tok, "abx"));
  EXPECT_EQ(t.finished_at, 3);
  EXPECT_EQ(t.text, "ab");
}

TEST(OutputProcessorTest, FlushReleasesHeldTextOnce) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  OutputProcessor out(tok, WithStops({"END"}), {});
  std::vector<int32_t> ids = ByteTokens(tok, "so EN");
  const std::vector<int32_t> half = ByteTokens(tok, "€");
  ids.insert(ids.end(), half.begin(), half.begin() + 1);  // and a dangling lead byte
  const Stream s = Feed(out, ids);
  EXPECT_EQ(s.text, "so ");
  EXPECT_EQ(out.Flush(), "EN\xEF\xBF\xBD");
  EXPECT_EQ(out.text(), "so EN\xEF\xBF\xBD");
  EXPECT_EQ(out.Flush(), "");
  EXPECT_FALSE(out.finished());
}

// The final text and finish reason do not depend on how the text is split into tokens.
TEST(OutputProcessorTest, OutcomeIsIndependentOfTokenization) {
  const std::vector<std::string> words = {"the ", "cat", " sat", "\n", "\n\n", "你好", "世界",
                                          "🙂", "END", "EN",   "D",  "ok.",  " ",    "é"};
  const std::vector<std::string> stops = {"\n\n", "END", "好世", "t s"};
  std::mt19937 rng(1234);
  for (const auto& [name, tok] : AllTokenizers()) {
    SCOPED_TRACE(name);
    for (int round = 0; round < 60; ++round) {
      std::vector<std::string> pieces;
      std::string text;
      const int n = 1 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) {
        pieces.push_back(words[rng() % words.size()]);
        text += pieces.back();
      }
      // Reference on the whole text: the earliest-completing stop string.
      size_t best_end = std::string::npos, best_pos = std::string::npos;
      std::string matched;
      for (const std::string& st : stops) {
        const size_t pos = text.find(st);
        if (pos == std::string::npos) continue;
        const size_t end = pos + st.size();
        if (end < best_end || (end == best_end && pos < best_pos)) {
          best_end = end;
          best_pos = pos;
          matched = st;
        }
      }
      const std::string want = best_pos == std::string::npos ? text : text.substr(0, best_pos);
      for (const auto& ids :
           {ByteTokens(*tok, text), PieceTokens(*tok, pieces), tok->Encode(text, false)}) {
        OutputProcessor out(*tok, WithStops(stops), {});
        const Stream s = Feed(out, ids);
        SCOPED_TRACE(text);
        if (best_pos == std::string::npos) {
          EXPECT_FALSE(s.finish.has_value());
          EXPECT_EQ(s.text + out.Flush(), want);
        } else {
          ASSERT_TRUE(s.finish.has_value());
          EXPECT_EQ(*s.finish, FinishReason::StopString(matched));
          EXPECT_EQ(s.text, want);
        }
      }
    }
  }
}

TEST(OutputProcessorTest, AnEmptyStopStringNeverMatches) {
  const Tokenizer& tok = TinyEnglishTokenizer();
  SamplingParams p;
  p.stop = {"", "zz"};  // not validated: the empty one is ignored, "zz" still works
  OutputProcessor out(tok, p, {});
  std::string text;
  for (int32_t id : ByteTokens(tok, "abc zz")) {
    OutputProcessor::Update u = out.Push(id);
    text += u.text;
    if (u.finish) {
      EXPECT_EQ(*u.finish, FinishReason::StopString("zz"));
    }
  }
  EXPECT_EQ(text, "abc ");
  EXPECT_TRUE(out.finished());
}

}  // namespace
}  // namespace tandem::engine

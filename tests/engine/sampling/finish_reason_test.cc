#include "engine/finish_reason.h"

#include "gtest/gtest.h"

namespace tandem::engine {
namespace {

TEST(FinishReasonTest, JsonShapesAreSGLangs) {
  EXPECT_EQ(FinishReason::Length(128).ToJson().dump(), R"({"length":128,"type":"length"})");
  EXPECT_EQ(FinishReason::StopToken(151645).ToJson().dump(), R"({"matched":151645,"type":"stop"})");
  EXPECT_EQ(FinishReason::StopString("\n\n").ToJson().dump(),
            R"({"matched":"\n\n","type":"stop"})");
  EXPECT_EQ(FinishReason::Abort("client disconnected").ToJson().dump(),
            R"({"message":"client disconnected","type":"abort"})");
  // Compared as values too, whatever the key order of a serializer.
  EXPECT_EQ(FinishReason::StopString("你好").ToJson(),
            nlohmann::json::parse(R"({"type":"stop","matched":"你好"})"));
}

TEST(FinishReasonTest, OpenAiNames) {
  EXPECT_EQ(FinishReason::Length(1).OpenAiName(), "length");
  EXPECT_EQ(FinishReason::StopToken(2).OpenAiName(), "stop");
  EXPECT_EQ(FinishReason::StopString("x").OpenAiName(), "stop");
  EXPECT_EQ(FinishReason::Abort("m").OpenAiName(), "abort");
}

TEST(FinishReasonTest, FieldsOfEachKind) {
  const FinishReason length = FinishReason::Length(7);
  EXPECT_EQ(length.kind, FinishReason::Kind::kLength);
  EXPECT_EQ(length.length, 7);
  const FinishReason token = FinishReason::StopToken(3);
  EXPECT_EQ(token.kind, FinishReason::Kind::kStop);
  EXPECT_EQ(std::get<int32_t>(token.matched), 3);
  const FinishReason text = FinishReason::StopString("END");
  EXPECT_EQ(std::get<std::string>(text.matched), "END");
  EXPECT_NE(token, text);
  EXPECT_EQ(text, FinishReason::StopString("END"));
}

TEST(FinishReasonTest, AbortMessageWithBrokenUtf8StillSerialises) {
  const FinishReason r = FinishReason::Abort("bad \xFF byte");
  EXPECT_EQ(r.message, "bad \xEF\xBF\xBD byte");
  EXPECT_EQ(r.ToJson().dump(), "{\"message\":\"bad \xEF\xBF\xBD byte\",\"type\":\"abort\"}");
}

}  // namespace
}  // namespace tandem::engine

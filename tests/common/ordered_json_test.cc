// ParseOrderedJson against nlohmann's own ordered_json::parse: the same values, member order,
// repeated keys and errors, and linear work on wide objects.
#include "common/ordered_json.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem {
namespace {

using Ordered = nlohmann::ordered_json;

TEST(OrderedJsonTest, MatchesNlohmannsParse) {
  for (const char* text :
       {R"({"z":1,"a":[true,false,null],"m":{"y":"s","b":-2,"c":1.5e3},"e":{},"f":[]})",
        R"([1,{"b":2,"a":3},[[]],"\u00e9\ud83d\ude00",18446744073709551615,-9223372036854775808])",
        R"("just a string")", "3.25", "null", R"({"k":1,"j":2,"k":3,"i":{"x":1,"x":[2]}})",
        R"(  {"a" : [ 1 , 2 ] }  )"}) {
    SCOPED_TRACE(text);
    const Ordered ours = ParseOrderedJson(text);
    const Ordered theirs = Ordered::parse(text);
    EXPECT_EQ(ours, theirs);
    EXPECT_EQ(ours.dump(), theirs.dump());  // same member order, same repeated-key outcome
  }
  EXPECT_EQ(ParseOrderedJson(R"({"k":1,"j":2,"k":3})").dump(), R"({"k":3,"j":2})");
}

TEST(OrderedJsonTest, RefusesWhatNlohmannRefuses) {
  for (const char* text : {"", "{", R"({"a":1,})", "[1 2]", "{} x", R"({"a":NaN})", "\"\xff\"",
                           "[1,]", R"({"a" 1})", "tru"}) {
    SCOPED_TRACE(text);
    std::string theirs, ours;
    try {
      (void)Ordered::parse(text);
    } catch (const Ordered::parse_error& e) {
      theirs = e.what();
    }
    try {
      (void)ParseOrderedJson(text);
    } catch (const Ordered::parse_error& e) {
      ours = e.what();
    }
    EXPECT_FALSE(theirs.empty());
    EXPECT_EQ(ours, theirs);
  }
}

// An object of 200,000 members keeps every member in order (nlohmann's ordered parse compares
// ~2e10 keys for it: about two minutes).
TEST(OrderedJsonTest, WideObjectsKeepTheirOrder) {
  constexpr int kMembers = 200000;
  std::string text = "{";
  for (int i = 0; i < kMembers; ++i) {
    text += (i > 0 ? ",\"p" : "\"p") + std::to_string(kMembers - i) + "\":" + std::to_string(i);
  }
  text += "}";
  const Ordered parsed = ParseOrderedJson(text);
  ASSERT_EQ(parsed.size(), static_cast<size_t>(kMembers));
  int i = 0;
  for (const auto& item : parsed.items()) {
    ASSERT_EQ(item.key(), "p" + std::to_string(kMembers - i));
    ASSERT_EQ(item.value(), i);
    ++i;
  }
}

// What a client is shown of a parse error: the problem and where, not nlohmann's tag, and the
// token it quotes cut short.
TEST(OrderedJsonTest, ErrorTextDropsTheTagAndCutsTheQuotedToken) {
  try {
    ParseOrderedJson("{\"a\": tru}");
    FAIL() << "parsed";
  } catch (const Ordered::exception& e) {
    const std::string text = JsonErrorText(e.what());
    EXPECT_TRUE(text.starts_with("parse error at line 1, column 1")) << text;
    EXPECT_NE(text.find("syntax error while parsing value - invalid literal"), std::string::npos)
        << text;
  }
  const std::string long_token =
      "[json.exception.parse_error.101] last read: '" + std::string(1000, 'x') + "\x01\xc3\xa9'";
  const std::string cut = JsonErrorText(long_token);
  EXPECT_EQ(cut, "last read: '" + std::string(64, 'x') + "...");
  EXPECT_EQ(JsonErrorText("last read: 'a\x01\xc3\xa9'"), "last read: 'a?\xc3\xa9'");
  EXPECT_EQ(JsonErrorText("no quote"), "no quote");
}

}  // namespace
}  // namespace tandem

// Real chat templates (tests/engine/jinja_templates/*.jinja) rendered by Tandem's interpreter
// must equal, byte for byte, what Python's Jinja2 renders with Hugging Face's settings
// (goldens.json, from render_goldens.py), and must fail exactly where Jinja2 fails.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "engine/jinja/template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tandem::jinja {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const fs::path kDir = fs::path(TANDEM_SOURCE_DIR) / "tests/engine/jinja_templates";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The clock render_goldens.py fixes: Saturday 2026-03-14 15:09:26.
std::tm FixedNow() {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 2;
  t.tm_mday = 14;
  t.tm_hour = 15;
  t.tm_min = 9;
  t.tm_sec = 26;
  t.tm_wday = 6;
  t.tm_yday = 72;
  return t;
}

TEST(JinjaGoldenTest, MatchesPythonJinja2OnRealChatTemplates) {
  const std::string text = ReadFile(kDir / "goldens.json");
  ASSERT_FALSE(text.empty());
  const Json goldens = Json::parse(text).at("goldens");
  ASSERT_GE(goldens.size(), 200u);
  std::map<std::string, std::unique_ptr<Template>> templates;
  RenderOptions options;
  options.clock = FixedNow;
  size_t rendered = 0;
  size_t failed_alike = 0;
  for (const Json& g : goldens) {
    const std::string name = g.at("template");
    if (!templates.count(name)) {
      auto t = Template::Parse(ReadFile(kDir / name));
      ASSERT_TRUE(t.ok()) << name << ": " << t.status();
      templates[name] = std::move(*t);
    }
    const Value variables = Value::FromJson(g.at("variables"));
    auto result = templates[name]->Render(variables.AsDict(), options);
    const std::string where =
        name + " / " + g.at("label").get<std::string>() +
        " / add_generation_prompt=" + g.at("variables").at("add_generation_prompt").dump();
    if (g.contains("error")) {
      EXPECT_FALSE(result.ok()) << where << ": Jinja2 failed (" << g.at("error")
                                << ") but Tandem rendered:\n"
                                << *result;
      failed_alike += !result.ok();
      continue;
    }
    ASSERT_TRUE(result.ok()) << where << ": " << result.status();
    EXPECT_EQ(*result, g.at("rendered").get<std::string>()) << where;
    ++rendered;
  }
  EXPECT_GE(rendered, 200u);
  EXPECT_GT(failed_alike, 0u);
}

// One construct per template (operators, filters, tests, methods, loops, whitespace control,
// printing of Python values), each compared with Jinja2's rendering.
TEST(JinjaGoldenTest, ConstructsMatchPythonJinja2) {
  const Json all = Json::parse(ReadFile(kDir / "goldens.json"));
  const Value variables = Value::FromJson(all.at("construct_variables"));
  const Json& constructs = all.at("constructs");
  ASSERT_GE(constructs.size(), 50u);
  RenderOptions options;
  options.clock = FixedNow;
  for (const Json& c : constructs) {
    const std::string source = c.at("template");
    auto t = Template::Parse(source);
    absl::StatusOr<std::string> result =
        t.ok() ? (*t)->Render(variables.AsDict(), options) : t.status();
    if (c.contains("error")) {
      EXPECT_FALSE(result.ok()) << source << ": Jinja2 failed (" << c.at("error")
                                << ") but Tandem rendered: " << *result;
      continue;
    }
    ASSERT_TRUE(result.ok()) << source << ": " << result.status();
    EXPECT_EQ(*result, c.at("rendered").get<std::string>()) << source;
  }
}

}  // namespace
}  // namespace tandem::jinja

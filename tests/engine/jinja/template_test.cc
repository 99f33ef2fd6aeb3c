// The interpreter's contract beyond agreement with Jinja2 (golden_test.cc): unsupported syntax
// is refused at parse time with the construct and line, and hostile templates or inputs end in
// a clear error within the limits instead of a crash or a hang.
#include "engine/jinja/template.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(const std::string& source, const Dict& variables = {},
                                   const RenderOptions& options = {}) {
  auto t = Template::Parse(source);
  if (!t.ok()) return t.status();
  return (*t)->Render(variables, options);
}

std::string ParseError(const std::string& source) {
  auto t = Template::Parse(source);
  EXPECT_FALSE(t.ok()) << source;
  return t.ok() ? "" : std::string(t.status().message());
}

TEST(JinjaTemplateTest, RendersVariablesAndKeepsInsertionOrder) {
  Dict vars = {{"m", Value(Dict{{"z", Value(1)}, {"a", Value("x")}})}};
  auto r = Render("{{ m|tojson }} {% for k in m %}{{ k }}{% endfor %}", vars);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "{\"z\": 1, \"a\": \"x\"} za");
}

TEST(JinjaTemplateTest, UnsupportedConstructsFailAtParseTimeWithTheLine) {
  EXPECT_THAT(ParseError("a\n{% include 'x.jinja' %}"), HasSubstr("line 2"));
  EXPECT_THAT(ParseError("{% include 'x.jinja' %}"), HasSubstr("include"));
  EXPECT_THAT(ParseError("{% extends 'base' %}"), HasSubstr("extends"));
  EXPECT_THAT(ParseError("{% call m() %}x{% endcall %}"), HasSubstr("call"));
  EXPECT_THAT(ParseError("\n\n{{ x|frobnicate }}"),
              HasSubstr("line 3: unsupported filter 'frobnicate'"));
  EXPECT_THAT(ParseError("{{ x is prime }}"), HasSubstr("unsupported test 'prime'"));
  EXPECT_THAT(ParseError("{% for x in y recursive %}{% endfor %}"), HasSubstr("recursive"));
  EXPECT_THAT(ParseError("{% generation %}x{% endgeneration %}"), HasSubstr("generation"));
  EXPECT_THAT(ParseError("{% frob %}"), HasSubstr("unknown tag 'frob'"));
}

TEST(JinjaTemplateTest, SyntaxErrorsNameTheLine) {
  EXPECT_THAT(ParseError("{% if x %}never closed"), HasSubstr("missing 'endif'"));
  EXPECT_THAT(ParseError("x\n{% endfor %}"), HasSubstr("line 2: unexpected '{% endfor %}'"));
  EXPECT_THAT(ParseError("{{ 'unclosed }}"), HasSubstr("unclosed string"));
  EXPECT_THAT(ParseError("{{ x "), HasSubstr("unclosed expression"));
  EXPECT_THAT(ParseError("{# never closed"), HasSubstr("unclosed comment"));
  EXPECT_THAT(ParseError("{{ (1 }}"), HasSubstr("unexpected '}'"));
  EXPECT_THAT(ParseError("{{ 1 + }}"), HasSubstr("unexpected token"));
  EXPECT_THAT(ParseError("{{ x @ y }}"), HasSubstr("unexpected character '@'"));
  EXPECT_THAT(ParseError("{% break %}"), HasSubstr("outside a for loop"));
  EXPECT_THAT(ParseError("{% raw %}no end"), HasSubstr("endraw"));
}

TEST(JinjaTemplateTest, DeepNestingIsRefusedNotACrash) {
  const int n = 100000;
  EXPECT_THAT(ParseError("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}"),
              HasSubstr("nested too deeply"));
  EXPECT_THAT(ParseError("{{ " + std::string(n, '[') + std::string(n, ']') + " }}"),
              HasSubstr("nested too deeply"));
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_THAT(ParseError(ifs), HasSubstr("nested too deeply"));
  std::string nots = "{{ ";
  for (int i = 0; i < n; ++i) nots += "not ";
  EXPECT_THAT(ParseError(nots + "x }}"), HasSubstr("nested too deeply"));
}

TEST(JinjaTemplateTest, UnboundedRecursionHitsTheCallDepthLimit) {
  auto r = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nested deeper than"));
}

TEST(JinjaTemplateTest, HugeLoopsHitTheIterationLimit) {
  RenderOptions options;
  options.limits.max_loop_iterations = 10000;
  auto r =
      Render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {},
             options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("10000 iterations"));
  // Jinja2's sandbox refuses range() longer than 100000 items.
  auto big = Render("{{ range(100001)|length }}");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("range too big"));
}

TEST(JinjaTemplateTest, OutputAndStringGrowthAreBounded) {
  RenderOptions options;
  options.limits.max_output_bytes = 1 << 20;
  // Doubling a string: stopped by the size limit long before memory runs out.
  auto doubling = Render(
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
      "{% endfor %}{{ ns.s|length }}",
      {}, options);
  ASSERT_FALSE(doubling.ok());
  EXPECT_EQ(doubling.status().code(), absl::StatusCode::kResourceExhausted);
  auto repeat = Render("{{ 'x' * 10000000000 }}", {}, options);
  ASSERT_FALSE(repeat.ok());
  EXPECT_EQ(repeat.status().code(), absl::StatusCode::kResourceExhausted);
  auto text = Render("{% for i in range(100000) %}0123456789abcdef{% endfor %}", {}, options);
  ASSERT_FALSE(text.ok());
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("exceeds"));
}

TEST(JinjaTemplateTest, RaiseExceptionAndUndefinedErrorsNameTheLine) {
  auto raised = Render("line one\n{{ raise_exception('bad roles') }}");
  ASSERT_FALSE(raised.ok());
  EXPECT_THAT(std::string(raised.status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(raised.status().message()), HasSubstr("bad roles"));
  auto undefined = Render("{{ nothing.here }}");
  ASSERT_FALSE(undefined.ok());
  EXPECT_THAT(std::string(undefined.status().message()), HasSubstr("'nothing' is undefined"));
}

TEST(JinjaTemplateTest, StrftimeNowUsesTheInjectedClock) {
  RenderOptions options;
  options.clock = [] {
    std::tm t{};
    t.tm_year = 124;
    t.tm_mon = 6;
    t.tm_mday = 26;
    return t;
  };
  auto r = Render("{{ strftime_now('%d %b %Y') }}", {}, options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "26 Jul 2024");
}

TEST(JinjaTemplateTest, ConcurrentRendersOfOneTemplateAreIndependent) {
  auto t = Template::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}"
      "{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  Dict three = {{"messages", Value(List{Value(1), Value(2), Value(3)})}};
  for (int i = 0; i < 3; ++i) {
    auto r = (*t)->Render(three, {});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, "3");  // the namespace is per render, not shared across renders
  }
}

TEST(JinjaTemplateTest, IllFormedUtf8InInputsDoesNotBreakStringFunctions) {
  Dict vars = {{"s", Value(std::string("a\xff\xfe b\xc3"))}};
  auto r = Render("{{ s|length }} {{ s[::-1]|length }} {{ s.split()|length }} {{ s|upper|length }}",
                  vars);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "6 6 2 6");
}

// Found by jinja_fuzz: an attribute index past int64 threw out of the parser.
TEST(JinjaTemplateTest, HugeIntegerAttributeIndexIsUndefined) {
  Dict vars = {{"x", Value(List{Value(1)})}};
  auto r = Render("[{{ x.99999999999999999999999 }}]", vars);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "[]");
}

// Found by jinja_fuzz: a float or numeric string past int64 reached an undefined conversion.
// Python's integers are unbounded; where int64 cannot hold Python's result the render fails
// with an overflow error, and INT64_MIN // -1 must not reach the trapping division instruction.
TEST(JinjaTemplateTest, IntegerResultsPastInt64AreOverflowErrorsNotUndefinedBehaviour) {
  const std::string kMin = "(-9223372036854775807 - 1)";
  const std::vector<std::string> overflows = {
      "{{ '999999999999999999999999999999999999999999993.9'|int }}",
      "{{ 1e45|int }}",
      "{{ -9.3e18|int }}",
      "{{ '99999999999999999999'|int }}",
      "{{ -" + kMin + " }}",
      "{{ " + kMin + "|abs }}",
      "{{ " + kMin + " // -1 }}",
      "{{ 3 ** 40 }}"};
  for (const std::string& source : overflows) {
    auto r = Render(source);
    ASSERT_FALSE(r.ok()) << source << " rendered " << *r;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange) << source;
    EXPECT_NE(r.status().message().find("integer overflow"), std::string::npos) << source;
  }
  auto edges = Render("{{ " + kMin + " % -1 }} {{ '9.2e18'|int }} {{ -9.2e18|int }}" +
                      " {{ (-2) ** 63 }} {{ " + kMin + " // 1 }}");
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(*edges,
            "0 9200000000000000000 -9200000000000000000 -9223372036854775808 "
            "-9223372036854775808");
}

}  // namespace
}  // namespace tandem::jinja

#include "common/metrics.h"

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

// A parser of the Prometheus text format 0.0.4, strict enough to catch rendering mistakes:
// every line is a comment (# HELP / # TYPE) or `name[{labels}] value`.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Exposition {
  std::map<std::string, std::string> help;
  std::map<std::string, std::string> type;
  std::vector<Sample> samples;

  // The value of the one sample with this name and exactly these labels; fails the test if absent.
  double Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const Sample& s : samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
    ADD_FAILURE() << "no sample " << name << " with the given labels";
    return NAN;
  }
};

std::string UnescapeHelp(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      ++i;
      out += text[i] == 'n' ? '\n' : text[i];
    } else {
      out += text[i];
    }
  }
  return out;
}

bool ParseExposition(const std::string& text, Exposition* out, std::string* error) {
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    auto fail = [&](const std::string& why) {
      *error = "line " + std::to_string(number) + ": " + why + ": " + line;
      return false;
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream words(line);
      std::string hash, kind, name;
      words >> hash >> kind >> name;
      std::string rest;
      std::getline(words, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "HELP") {
        out->help[name] = UnescapeHelp(rest);
      } else if (kind == "TYPE") {
        out->type[name] = rest;
      } else {
        return fail("unknown comment");
      }
      continue;
    }
    Sample sample;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') sample.name += line[i++];
    if (sample.name.empty()) return fail("no name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string label;
        while (i < line.size() && line[i] != '=') label += line[i++];
        if (i + 1 >= line.size() || line[i + 1] != '"') return fail("label without quotes");
        i += 2;
        std::string value;
        for (;;) {
          if (i >= line.size()) return fail("unterminated label value");
          char c = line[i++];
          if (c == '"') break;
          if (c == '\\') {
            if (i >= line.size()) return fail("dangling escape");
            char e = line[i++];
            if (e == 'n') {
              value += '\n';
            } else if (e == '\\' || e == '"') {
              value += e;
            } else {
              return fail("bad escape");
            }
          } else {
            if (c == '\n') return fail("raw newline");
            value += c;
          }
        }
        if (!sample.labels.emplace(label, value).second) return fail("duplicate label");
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return fail("unterminated labels");
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') return fail("no value");
    const std::string value = line.substr(i + 1);
    if (value == "+Inf") {
      sample.value = INFINITY;
    } else if (value == "-Inf") {
      sample.value = -INFINITY;
    } else if (value == "NaN") {
      sample.value = NAN;
    } else {
      size_t used = 0;
      try {
        sample.value = std::stod(value, &used);
      } catch (...) {
        return fail("bad number");
      }
      if (used != value.size()) return fail("trailing characters");
    }
    out->samples.push_back(std::move(sample));
  }
  return true;
}

Exposition Parse(const MetricsRegistry& registry) {
  Exposition exposition;
  std::string error;
  const std::string text = registry.Render();
  EXPECT_TRUE(ParseExposition(text, &exposition, &error)) << error << "\n" << text;
  return exposition;
}

TEST(MetricsTest, CountersAndGaugesWithLabels) {
  MetricsRegistry registry;
  auto& requests =
      registry.AddCounter("tandem_requests_total", "Requests received", {"route", "code"});
  requests.WithLabels({"/v1/completions", "200"}).Increment();
  requests.WithLabels({"/v1/completions", "200"}).Increment(2);
  requests.WithLabels({"/generate", "500"}).Increment(0.5);
  requests.WithLabels({"/generate", "500"}).Increment(-7);  // ignored
  auto& running = registry.AddGauge("tandem_running_requests", "Requests running");
  running.Get().Set(5);
  running.Get().Decrement(2);

  Exposition e = Parse(registry);
  EXPECT_EQ(e.type["tandem_requests_total"], "counter");
  EXPECT_EQ(e.help["tandem_requests_total"], "Requests received");
  EXPECT_EQ(e.type["tandem_running_requests"], "gauge");
  EXPECT_EQ(e.Value("tandem_requests_total", {{"route", "/v1/completions"}, {"code", "200"}}), 3);
  EXPECT_EQ(e.Value("tandem_requests_total", {{"route", "/generate"}, {"code", "500"}}), 0.5);
  EXPECT_EQ(e.Value("tandem_running_requests", {}), 3);
}

TEST(MetricsTest, UnlabelledMetricRendersZeroBeforeUse) {
  MetricsRegistry registry;
  registry.AddCounter("tandem_errors_total", "Errors");
  Exposition e = Parse(registry);
  EXPECT_EQ(e.Value("tandem_errors_total", {}), 0);
}

TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  auto& latency = registry.AddHistogram("tandem_ttft_seconds", "Time to first token", {"worker"},
                                        {0.1, 0.5, 1});
  Histogram& h = latency.WithLabels({"w1"});
  for (double v : {0.05, 0.1, 0.2, 0.7, 3.0, 3.0}) h.Observe(v);
  h.Observe(NAN);  // ignored

  Exposition e = Parse(registry);
  EXPECT_EQ(e.type["tandem_ttft_seconds"], "histogram");
  auto bucket = [&](const std::string& le) {
    return e.Value("tandem_ttft_seconds_bucket", {{"worker", "w1"}, {"le", le}});
  };
  EXPECT_EQ(bucket("0.1"), 2);  // 0.05 and 0.1 (upper bound inclusive)
  EXPECT_EQ(bucket("0.5"), 3);
  EXPECT_EQ(bucket("1"), 4);
  EXPECT_EQ(bucket("+Inf"), 6);
  EXPECT_EQ(e.Value("tandem_ttft_seconds_count", {{"worker", "w1"}}), 6);
  EXPECT_DOUBLE_EQ(e.Value("tandem_ttft_seconds_sum", {{"worker", "w1"}}), 7.05);
}

TEST(MetricsTest, DefaultLatencyBucketsAreSecondsAndAscending) {
  const std::vector<double>& b = DefaultLatencyBuckets();
  ASSERT_GE(b.size(), 10u);
  EXPECT_LE(b.front(), 0.001);
  EXPECT_GE(b.back(), 30);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_GT(b[i], b[i - 1]);
  MetricsRegistry registry;
  registry.AddHistogram("tandem_e2e_seconds", "End to end").Get().Observe(0.3);
  Exposition e = Parse(registry);
  EXPECT_EQ(e.Value("tandem_e2e_seconds_bucket", {{"le", "0.25"}}), 0);
  EXPECT_EQ(e.Value("tandem_e2e_seconds_bucket", {{"le", "0.5"}}), 1);
  EXPECT_EQ(e.Value("tandem_e2e_seconds_bucket", {{"le", "+Inf"}}), 1);
}

TEST(MetricsTest, BucketHelpers) {
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
  EXPECT_EQ(LinearBuckets(0, 5, 3), (std::vector<double>{0, 5, 10}));
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry registry;
  auto& family =
      registry.AddCounter("tandem_odd_total", "Help with \\ backslash\nand newline", {"path"});
  const std::string nasty = "a\"b\\c\nd}e,f=g";
  family.WithLabels({nasty}).Increment(4);
  const std::string text = registry.Render();
  EXPECT_THAT(text, ::testing::HasSubstr(R"(path="a\"b\\c\nd}e,f=g")"));
  EXPECT_THAT(text, ::testing::HasSubstr(R"(# HELP tandem_odd_total Help with \\ backslash\nand)"));
  Exposition e = Parse(registry);
  EXPECT_EQ(e.help["tandem_odd_total"], "Help with \\ backslash\nand newline");
  EXPECT_EQ(e.Value("tandem_odd_total", {{"path", nasty}}), 4);
}

TEST(MetricsTest, ValuesFormatExactly) {
  EXPECT_EQ(FormatMetricValue(3), "3");
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatMetricValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatMetricValue(NAN), "NaN");
}

TEST(MetricsTest, SameDefinitionReturnsSameFamily) {
  MetricsRegistry registry;
  auto& a = registry.AddCounter("tandem_x_total", "X", {"k"});
  auto& b = registry.AddCounter("tandem_x_total", "X", {"k"});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(&a.WithLabels({"v"}), &b.WithLabels({"v"}));
}

TEST(MetricsDeathTest, MisuseAborts) {
  MetricsRegistry registry;
  registry.AddCounter("tandem_y_total", "Y", {"k"});
  EXPECT_DEATH(registry.AddGauge("tandem_y_total", "Y", {"k"}), "different definitions");
  EXPECT_DEATH(registry.AddCounter("bad-name", "Z"), "invalid metric name");
  EXPECT_DEATH(registry.AddCounter("tandem_z", "Z", {"__reserved"}), "invalid label name");
  EXPECT_DEATH(registry.AddHistogram("tandem_h", "H", {"le"}), "cannot use the label name 'le'");
  EXPECT_DEATH(registry.AddHistogram("tandem_h2", "H", {}, {1, 1}), "strictly ascending");
  auto& family = registry.AddCounter("tandem_w_total", "W", {"a", "b"});
  EXPECT_DEATH(family.WithLabels({"only-one"}), "has 2 labels");
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  auto& counter = registry.AddCounter("tandem_c_total", "C", {"t"});
  auto& histogram = registry.AddHistogram("tandem_h_seconds", "H", {}, {0.5});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      Counter& c = counter.WithLabels({"shared"});
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        histogram.Get().Observe(i % 2 == 0 ? 0.25 : 1.0);
      }
    });
  }
  std::thread renderer([&] {
    for (int i = 0; i < 20; ++i) registry.Render();
  });
  for (auto& t : threads) t.join();
  renderer.join();
  Exposition e = Parse(registry);
  EXPECT_EQ(e.Value("tandem_c_total", {{"t", "shared"}}), kThreads * kPerThread);
  EXPECT_EQ(e.Value("tandem_h_seconds_bucket", {{"le", "0.5"}}), kThreads * kPerThread / 2);
  EXPECT_EQ(e.Value("tandem_h_seconds_count", {}), kThreads * kPerThread);
  EXPECT_DOUBLE_EQ(e.Value("tandem_h_seconds_sum", {}), kThreads * kPerThread / 2 * 1.25);
}

}  // namespace
}  // namespace tandem

#include "common/logging.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace tandem {
namespace {

// %* in the pattern: the message with CR and LF escaped, so that every event stays one line
// even when a message quotes peer input.
class OneLineMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const char* data = msg.payload.data();
    const size_t size = msg.payload.size();
    size_t start = 0;
    for (size_t i = 0; i < size; ++i) {
      if (data[i] != '\n' && data[i] != '\r') continue;
      dest.append(data + start, data + i);
      dest.append(data[i] == '\n' ? std::string_view("\\n") : std::string_view("\\r"));
      start = i + 1;
    }
    dest.append(data + start, data + size);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<OneLineMessage>();
  }
};

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(name.data(), name.size()));
  if (lower == "trace") return spdlog::level::trace;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "info") return spdlog::level::info;
  if (lower == "warn" || lower == "warning") return spdlog::level::warn;
  if (lower == "error" || lower == "err") return spdlog::level::err;
  if (lower == "critical") return spdlog::level::critical;
  if (lower == "off") return spdlog::level::off;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log level '", std::string(name), "' (expected ", kLogLevelNames, ")"));
}

absl::Status InitLogging(const std::string& program, const std::string& level) {
  // Colours only when stderr is a terminal; log files stay plain.
  return InitLogging(
      program, level,
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic));
}

absl::Status InitLogging(const std::string& program, const std::string& level,
                         spdlog::sink_ptr sink) {
  std::string name = level;
  std::string source = "--log-level";
  if (name.empty()) {
    const char* env = std::getenv(kLogLevelEnv);
    if (env != nullptr && *env != '\0') {
      name = env;
      source = kLogLevelEnv;
    } else {
      name = "info";
    }
  }
  absl::StatusOr<spdlog::level::level_enum> parsed = ParseLogLevel(name);
  if (!parsed.ok()) return Annotate(parsed.status(), absl::StrCat(source, ": "));

  auto logger = std::make_shared<spdlog::logger>(program, std::move(sink));
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  formatter->add_flag<OneLineMessage>('*').set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%l%$ %n[%t] %*");
  logger->set_formatter(std::move(formatter));
  logger->set_level(*parsed);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace tandem

#include "common/logging.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace tandem {

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
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%l%$ %n[%t] %v", spdlog::pattern_time_type::utc);
  logger->set_level(*parsed);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(std::move(logger));
  return absl::OkStatus();
}

}  // namespace tandem

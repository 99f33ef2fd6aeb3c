// Process-wide logging on spdlog: one line per event, to stderr.
//
// Line format (UTC):
//   2026-11-22T02:56:53.123456Z info tandem-router[4711] listening on 0.0.0.0:30000
//   <time>                      <level> <program>[<thread id>] <message>
// Levels print as trace, debug, info, warning, error, critical.
// Line breaks inside a message are written as \n and \r, so one event is always one line.
//
// InitLogging installs the default spdlog logger, so code anywhere logs with the spdlog API:
//   spdlog::info("loaded {} layers", n);
// and tags a line with a request id with LOG_RID, which costs nothing beyond a level check when
// the level is disabled and adds `rid=<id> ` in front of the message:
//   LOG_RID(warn, rid, "prefill worker {} failed: {}", url, status.ToString());
//   -> ... warning tandem-router[4711] rid=3f2a9c... prefill worker http://h:8000 failed: ...
// `rid` may be anything fmt can format (a string, a 64-bit room id, ...).
//
// Thread-safety: InitLogging is called once from main() before other threads start; logging
// itself (spdlog's *_mt sinks) is thread-safe.
#ifndef TANDEM_COMMON_LOGGING_H_
#define TANDEM_COMMON_LOGGING_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spdlog/spdlog.h"

namespace tandem {

// The environment variable read when no --log-level is given.
inline constexpr char kLogLevelEnv[] = "TANDEM_LOG_LEVEL";
// The accepted level names, for help texts.
inline constexpr char kLogLevelNames[] = "trace|debug|info|warn|error|critical|off";

// Parses a level name (case-insensitive): trace, debug, info, warn (or warning), error (or err),
// critical, off. Anything else is InvalidArgument naming the value and the accepted names.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(std::string_view name);

// Installs the default logger named `program`, writing to stderr. `level` comes from the
// --log-level flag; when empty the environment variable TANDEM_LOG_LEVEL is used, and when that
// is unset or empty, info. An unknown level is InvalidArgument saying where it came from; the
// previous logger is then left in place. Warnings and above are flushed immediately.
absl::Status InitLogging(const std::string& program, const std::string& level);
// The same, writing to `sink` instead of stderr (tests, tools that log to a file).
absl::Status InitLogging(const std::string& program, const std::string& level,
                         spdlog::sink_ptr sink);

}  // namespace tandem

// LOG_RID(severity, rid, format, args...): logs `rid=<rid> <message>` on the default logger at
// spdlog level `severity`: trace, debug, info, warn, err or critical (spdlog's enum names; the
// line shows trace, debug, info, warning, error, critical). `format` must be a literal.
#define LOG_RID(severity, rid, format, ...)                            \
  do {                                                                 \
    ::spdlog::logger* tandem_logger_ = ::spdlog::default_logger_raw(); \
    if (tandem_logger_->should_log(::spdlog::level::severity)) {       \
      tandem_logger_->log(::spdlog::level::severity, "rid={} " format, \
                          (rid)__VA_OPT__(, ) __VA_ARGS__);            \
    }                                                                  \
  } while (0)

#endif  // TANDEM_COMMON_LOGGING_H_

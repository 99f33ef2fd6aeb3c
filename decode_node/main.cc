// tandem-decode: flags -> config -> DecodeServer -> wait for SIGINT/SIGTERM -> drain.
#include <string>

#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/signals.h"
#include "decode_node/decode_server.h"

int main(int argc, char** argv) {
  tandem::InitDaemonRuntime();
  tandem::BlockShutdownSignals();
  tandem::Flags flags("tandem-decode",
                      "Decode worker: receives KV caches and generates tokens (--local-prefill: "
                      "colocated)");
  tandem::decode::DecodeOptions options;
  tandem::decode::RegisterDecodeFlags(flags, &options);
  if (auto exit_code = flags.Parse(argc, argv)) return *exit_code;
  if (auto s = tandem::InitLogging("tandem-decode", flags.log_level()); !s.ok()) {
    return tandem::ReportStartupFailure("tandem-decode", s);
  }
  for (const std::string& note : flags.IgnoredNotes()) spdlog::info("{}", note);
  auto server = tandem::decode::DecodeServer::Create(options);
  if (!server.ok()) return tandem::ReportStartupFailure("tandem-decode", server.status());
  int sig = tandem::WaitForShutdownSignal();
  spdlog::info("signal {}: draining", sig);
  (*server)->Drain();
  return 0;
}

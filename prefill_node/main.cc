// tandem-prefill: flags -> config -> PrefillServer -> wait for SIGINT/SIGTERM.
#include <string>

#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/signals.h"
#include "prefill_node/prefill_server.h"

int main(int argc, char** argv) {
  tandem::InitDaemonRuntime();
  tandem::BlockShutdownSignals();
  tandem::Flags flags("tandem-prefill",
                      "Prefill worker: computes prompts' KV caches and pushes them to decode "
                      "workers");
  tandem::prefill::PrefillOptions options;
  tandem::prefill::RegisterPrefillFlags(flags, &options);
  if (auto exit_code = flags.Parse(argc, argv)) return *exit_code;
  if (auto s = tandem::InitLogging("tandem-prefill", flags.log_level()); !s.ok()) {
    return tandem::ReportStartupFailure("tandem-prefill", s);
  }
  for (const std::string& note : flags.IgnoredNotes()) spdlog::info("{}", note);
  auto server = tandem::prefill::PrefillServer::Create(options);
  if (!server.ok()) return tandem::ReportStartupFailure("tandem-prefill", server.status());
  int sig = tandem::WaitForShutdownSignal();
  spdlog::info("signal {}: draining", sig);
  (*server)->Drain();
  return 0;
}

// tandem-router: flags -> config -> RouterServer -> wait for SIGINT/SIGTERM.
#include <string>

#include "common/daemon.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/release_memory.h"
#include "common/signals.h"
#include "router/router_server.h"

int main(int argc, char** argv) {
  tandem::InitDaemonRuntime();
  tandem::MapLargeBlocksAlone();  // request bodies go back to the system when freed
  tandem::BlockShutdownSignals();
  tandem::Flags flags("tandem-router",
                      "Router: OpenAI and SGLang HTTP front door that pairs prefill and decode "
                      "workers");
  tandem::router::RouterOptions options;
  tandem::router::RegisterRouterFlags(flags, &options);
  if (auto exit_code = flags.Parse(argc, argv)) return *exit_code;
  if (auto s = tandem::InitLogging("tandem-router", flags.log_level()); !s.ok()) {
    return tandem::ReportStartupFailure("tandem-router", s);
  }
  for (const std::string& note : flags.IgnoredNotes()) spdlog::info("{}", note);
  auto server = tandem::router::RouterServer::Create(options);
  if (!server.ok()) return tandem::ReportStartupFailure("tandem-router", server.status());
  int sig = tandem::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  (*server)->Shutdown();
  return 0;
}

// tandemctl: the operator's command line over tandem-router's admin API. Flags here; the
// commands are in tools/tandemctl/commands.h (exit codes: 0 ok, 1 router error, 2 usage,
// 3 router unreachable).
#include <iostream>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/tandemctl/admin_key.h"
#include "tools/tandemctl/commands.h"

int main(int argc, char** argv) {
  using tandem::ctl::Commands;
  using tandem::ctl::CtlOptions;
  CtlOptions options;
  double timeout_secs = 30;
  CLI::App app{"tandemctl: operate a Tandem cluster through its router"};
  app.require_subcommand(1);
  // Global options may also follow the subcommand: `tandemctl workers list --json`.
  app.fallthrough();
  app.add_option("--router", options.router, "Router base URL")
      ->envname("TANDEM_ROUTER")
      ->capture_default_str();
  tandem::ctl::AdminKeySources key_sources;
  app.add_option("--admin-key", key_sources.key,
                 "Admin key for the admin routes (prefer --admin-key-file or --run-dir)")
      ->envname("TANDEM_ADMIN_KEY");
  app.add_option("--admin-key-file", key_sources.key_file, "File whose first line is the admin key")
      ->envname("TANDEM_ADMIN_KEY_FILE");
  app.add_option("--run-dir", key_sources.run_dir,
                 "Run directory of deploy/local-cluster.sh or deploy/quickstart.sh: read its "
                 "admin-key file (default: run/local-cluster when its router.url is --router)")
      ->envname("TANDEM_RUN_DIR");
  app.add_option("--api-key", options.api_key, "Client API key (generate, loads)")
      ->envname("TANDEM_API_KEY");
  app.add_flag("--json", options.json, "Machine-readable JSON instead of tables");
  app.add_option("--timeout", timeout_secs, "Seconds allowed for each call to the router")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  CLI::App* workers = app.add_subcommand("workers", "List, add, remove or drain workers");
  workers->require_subcommand(1);
  workers->add_subcommand("list", "Registered workers with health, circuit and load");
  CLI::App* add = workers->add_subcommand("add", "Register a worker");
  std::string url, type = "regular";
  std::optional<int> bootstrap_port;
  add->add_option("url", url, "Worker URL (http://host:grpc-port)")->required();
  add->add_option("--type", type, "Worker role")
      ->check(CLI::IsMember({"prefill", "decode", "regular"}))
      ->capture_default_str();
  add->add_option("--bootstrap-port", bootstrap_port, "A prefill worker's bootstrap port")
      ->check(CLI::Range(1, 65535));
  CLI::App* remove = workers->add_subcommand("remove", "Unregister a worker");
  remove->add_option("url", url, "Worker URL")->required();
  CLI::App* drain = workers->add_subcommand("drain", "Stop sending new requests to a worker");
  drain->add_option("url", url, "Worker URL")->required();

  CLI::App* loads = app.add_subcommand("loads", "Per-worker load as the router sees it");
  CLI::App* health = app.add_subcommand("health", "Whether the router can route requests");
  CLI::App* flush = app.add_subcommand("flush-cache", "Flush every worker's prefix cache");
  CLI::App* metrics = app.add_subcommand("metrics", "A summary of the router's metrics");
  CLI::App* generate = app.add_subcommand("generate", "Send one prompt through the router");
  std::string prompt;
  Commands::GenerateOptions gen;
  generate->add_option("prompt", prompt, "Prompt text")->required();
  generate->add_option("--max-new-tokens", gen.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  generate->add_option("--temperature", gen.temperature, "Sampling temperature; 0 is greedy")
      ->check(CLI::Range(0.0, 100.0));
  generate->add_flag("--ignore-eos", gen.ignore_eos, "Keep generating past an EOS token");
  generate->add_flag("--stream", gen.stream, "Print the text as it is generated");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return tandem::ctl::kExitUsage;
  }
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_secs * 1000));
  key_sources.router = options.router;
  key_sources.default_run_dirs = tandem::ctl::DefaultRunDirs(argv[0]);
  absl::StatusOr<std::string> admin_key = tandem::ctl::ResolveAdminKey(key_sources);
  if (!admin_key.ok()) {
    std::cerr << "tandemctl: admin key: " << admin_key.status().message() << "\n";
    return tandem::ctl::kExitUsage;
  }
  options.admin_key = *std::move(admin_key);

  Commands ctl(options, std::cout, std::cerr);
  if (workers->parsed()) {
    if (workers->got_subcommand("list")) return ctl.WorkersList();
    if (add->parsed()) {
      if (type == "prefill" && !bootstrap_port) {
        std::cerr << "tandemctl: workers add --type prefill needs --bootstrap-port\n";
        return tandem::ctl::kExitUsage;
      }
      return ctl.WorkersAdd(url, type, bootstrap_port);
    }
    if (remove->parsed()) return ctl.WorkersRemove(url);
    if (drain->parsed()) return ctl.WorkersDrain(url);
  }
  if (loads->parsed()) return ctl.Loads();
  if (health->parsed()) return ctl.Health();
  if (flush->parsed()) return ctl.FlushCache();
  if (metrics->parsed()) return ctl.Metrics();
  if (generate->parsed()) return ctl.Generate(prompt, gen);
  std::cerr << app.help();
  return tandem::ctl::kExitUsage;
}

// The backends of router_bench, each set in a process of its own so that the CPU it spends per
// request can be read from /proc apart from the load generator's and the proxies':
//   - ServeStandIns: `count` StandInWorker gRPC servers (what tandem-router talks to), each
//     with its session socket unless `session_socket` is false;
//   - ServeHttpBackends: `count` HttpServer instances with one I/O thread each, answering
//     POST /generate with a fixed JSON body (what nginx talks to).
// Both write their ports, one per line, to `ports_file` (atomically: written to a temp name,
// then renamed) once every server listens, then serve until SIGTERM or SIGINT and return the
// process exit code. router_bench runs them by re-executing itself with a hidden flag;
// WaitForPorts reads the file on the parent's side.
//
// Thread-safety: each Serve* call owns its servers; call it from main() before any thread starts
// (it blocks SIGTERM/SIGINT so that one thread can wait for them).
#ifndef TANDEM_BENCH_ROUTER_BENCH_BACKENDS_H_
#define TANDEM_BENCH_ROUTER_BENCH_BACKENDS_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/router_bench/children.h"

namespace tandem::bench {

int ServeStandIns(int count, int tokens, const std::string& model_path, bool session_socket,
                  const std::string& ports_file);
// `reply_file` holds the body every backend answers with.
int ServeHttpBackends(int count, const std::string& reply_file, const std::string& ports_file);

// Waits until `ports_file` lists `count` ports, or fails when the child `name` of `children`
// exited or `timeout` passed (the error carries the child's log tail).
absl::StatusOr<std::vector<int>> WaitForPorts(ChildSet& children, const std::string& name,
                                              const std::string& ports_file, int count,
                                              std::chrono::seconds timeout);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_ROUTER_BENCH_BACKENDS_H_

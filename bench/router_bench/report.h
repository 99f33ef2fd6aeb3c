// What router_bench reports: CPU time of every process taking part, read around each measured
// phase and turned into microseconds per request per path; and the medians over rounds and the
// table rows it prints. Plain functions over values; the readers touch /proc and getrusage only.
#ifndef TANDEM_BENCH_ROUTER_BENCH_REPORT_H_
#define TANDEM_BENCH_ROUTER_BENCH_REPORT_H_

#include <sys/types.h>

#include <vector>

#include "bench/router_bench/load.h"
#include "nlohmann/json.hpp"

namespace tandem::bench {

// The processes whose CPU time is read (0: not started).
struct Pids {
  pid_t router = 0, nginx = 0, stand_ins = 0, http = 0;
};

// CPU seconds used so far by each process taking part (0 for one not started).
struct CpuSample {
  double client = 0;     // this process: the load generator
  double router = 0;     // tandem-router
  double nginx = 0;      // nginx master + worker
  double stand_ins = 0;  // the gRPC stand-ins' process
  double http = 0;       // the HTTP backends' process
  double box = 0;        // every CPU of the machine, busy time (all processes, anyone's)
};
CpuSample ReadCpu(const Pids& pids);

// One path's CPU per request in microseconds.
struct PathCpu {
  double client = 0;
  double proxy = 0;  // 0 on the direct paths
  double backends = 0;
  double total() const { return client + proxy + backends; }
  double box = 0;  // the whole machine, anyone's processes included
};
nlohmann::json PathCpuJson(const PathCpu& c);

double Ms(double seconds);
double Median(std::vector<double> v);
// Per figure, the median over rounds; LoadResult's counts are summed.
LoadResult MedianOf(const std::vector<LoadResult>& rounds);
PathCpu MedianOf(const std::vector<PathCpu>& rounds);

// One row of the latency table and of the CPU table, to stdout.
void PrintRow(const char* name, const LoadResult& r);
void PrintCpuRow(const char* name, const PathCpu& c);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_ROUTER_BENCH_REPORT_H_

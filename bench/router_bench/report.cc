#include "bench/router_bench/report.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "bench/router_bench/children.h"

namespace tandem::bench {
namespace {

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Busy CPU seconds of the whole machine since boot, from the first line of /proc/stat.
double BoxBusySeconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  if (!f || cpu != "cpu") return 0;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

CpuSample ReadCpu(const Pids& pids) {
  CpuSample s;
  s.client = SelfCpuSeconds();
  if (pids.router > 0) s.router = ProcessTreeCpuSeconds(pids.router);
  if (pids.nginx > 0) s.nginx = ProcessTreeCpuSeconds(pids.nginx);
  if (pids.stand_ins > 0) s.stand_ins = ProcessTreeCpuSeconds(pids.stand_ins);
  if (pids.http > 0) s.http = ProcessTreeCpuSeconds(pids.http);
  s.box = BoxBusySeconds();
  return s;
}

nlohmann::json PathCpuJson(const PathCpu& c) {
  return {{"client", c.client},
          {"proxy", c.proxy},
          {"backends", c.backends},
          {"total", c.total()},
          {"machine", c.box}};
}

double Ms(double seconds) { return seconds * 1e3; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Per figure, the median over rounds; counts are summed.
LoadResult MedianOf(const std::vector<LoadResult>& rounds) {
  LoadResult m;
  std::vector<double> rps, p50, p99, mean;
  for (const LoadResult& r : rounds) {
    m.ok += r.ok;
    m.errors += r.errors;
    if (m.first_error.empty()) m.first_error = r.first_error;
    rps.push_back(r.rps);
    p50.push_back(r.p50_s);
    p99.push_back(r.p99_s);
    mean.push_back(r.mean_s);
  }
  m.rps = Median(rps);
  m.p50_s = Median(p50);
  m.p99_s = Median(p99);
  m.mean_s = Median(mean);
  return m;
}

void PrintRow(const char* name, const LoadResult& r) {
  std::printf("%-22s %10.0f %9.3f %9.3f %9.3f %7lld\n", name, r.rps, Ms(r.p50_s), Ms(r.p99_s),
              Ms(r.mean_s), static_cast<long long>(r.errors));
}

PathCpu MedianOf(const std::vector<PathCpu>& rounds) {
  std::vector<double> client, proxy, backends, box;
  for (const PathCpu& c : rounds) {
    client.push_back(c.client);
    proxy.push_back(c.proxy);
    backends.push_back(c.backends);
    box.push_back(c.box);
  }
  return {Median(client), Median(proxy), Median(backends), Median(box)};
}

void PrintCpuRow(const char* name, const PathCpu& c) {
  std::printf("%-22s %8.1f %8.1f %9.1f %8.1f %9.1f\n", name, c.client, c.proxy, c.backends,
              c.total(), c.box);
}

}  // namespace tandem::bench

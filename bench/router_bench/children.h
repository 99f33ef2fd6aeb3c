// Child processes of router_bench (the router, nginx): spawned with their output in a log file,
// killed when the set is destroyed, and also on SIGINT/SIGTERM and if this process dies (Linux
// parent-death signal), so a failed or interrupted run leaves nothing behind. Also a temp dir
// removed on destruction, and a free loopback port. One controlling thread; not thread-safe.
#ifndef TANDEM_BENCH_ROUTER_BENCH_CHILDREN_H_
#define TANDEM_BENCH_ROUTER_BENCH_CHILDREN_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::bench {

class ChildSet {
 public:
  ChildSet() = default;
  ~ChildSet();  // SIGTERM to every child, SIGKILL after 3 s, all reaped
  ChildSet(const ChildSet&) = delete;
  ChildSet& operator=(const ChildSet&) = delete;

  // Starts argv[0] (a path) with stdout and stderr appended to `log_path`. Errors: fork/exec
  // failures, naming the program.
  absl::StatusOr<pid_t> Spawn(const std::string& name, const std::vector<std::string>& argv,
                              const std::string& log_path);
  // False once any child has exited (it is reaped then).
  bool AllRunning();
  // The last 4 KiB of the named child's log.
  std::string LogTail(const std::string& name) const;
  void KillAll();

 private:
  struct Child {
    std::string name;
    pid_t pid = -1;
    std::string log_path;
    bool exited = false;
  };
  std::vector<Child> children_;
};

// Makes SIGINT/SIGTERM kill and reap every child spawned by any ChildSet, remove `temp_dir`
// (if not empty) and exit with 128 + the signal. Call before starting any thread.
void InstallChildKiller(const std::string& temp_dir);
// Records a pid for InstallChildKiller (ChildSet calls it).
void RecordChildPid(pid_t pid);

class TempDir {
 public:
  static absl::StatusOr<std::unique_ptr<TempDir>> Create(const std::string& prefix, bool keep);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  TempDir(std::string path, bool keep) : path_(std::move(path)), keep_(keep) {}
  std::string path_;
  bool keep_;
};

// CPU seconds (user + system) used so far by `pid` and its direct children that are still
// running (nginx's master and its worker), from /proc. 0 when the process is gone.
double ProcessTreeCpuSeconds(pid_t pid);

// A TCP port on 127.0.0.1 that was free a moment ago (0 on failure).
int FreeLoopbackPort();

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_ROUTER_BENCH_CHILDREN_H_

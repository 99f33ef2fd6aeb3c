// Test support: run a real binary as a child process, capture its output, signal it, wait for it
// with a deadline; and tiny HTTP/1.1 GET over a loopback socket. Integration tests only.
#ifndef TANDEM_TESTS_INTEGRATION_PROCESS_H_
#define TANDEM_TESTS_INTEGRATION_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem::itest {

// Path of a binary built into build*/bin.
std::string BinaryPath(const std::string& name);
// Path below the source tree.
std::string SourcePath(const std::string& relative);

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;  // stdout and stderr, interleaved
};

// Runs `argv` to completion (killed after `timeout`), capturing stdout+stderr.
RunResult RunToExit(const std::vector<std::string>& argv,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// A child process running in the background; killed (SIGKILL) on destruction if still running.
class Process {
 public:
  explicit Process(const std::vector<std::string>& argv);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit; returns the exit code, -1 if signalled, nullopt on timeout. Once the process
  // has been reaped, every later call returns the same code at once.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  // Everything the process printed so far (stdout+stderr go to a temp file).
  std::string Output() const;

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = 0;  // valid once reaped_
  std::string log_path_;
};

struct HttpReply {
  int status = 0;  // 0: no answer
  std::string body;
};
// GET http://127.0.0.1:port/path, one request, connection closed after.
HttpReply HttpGet(int port, const std::string& path);
// Polls `path` until it answers with `status` or the deadline passes.
bool WaitForHttp(int port, const std::string& path, int status, std::chrono::milliseconds timeout);
// A TCP connection to 127.0.0.1:port whose reads and writes give up after `timeout_secs`; -1 if
// nothing listens. The caller closes it.
int ConnectLoopback(int port, int timeout_secs = 30);
// /proc/<pid>/status's `field` ("VmRSS", "VmHWM") in bytes; -1 if unreadable.
int64_t ProcStatusBytes(pid_t pid, const std::string& field);
// How many descriptors process `pid` has open (/proc/<pid>/fd); -1 if unreadable.
int OpenFds(pid_t pid);
// A TCP port free on 127.0.0.1 and kept for this process: it lies below the kernel's ephemeral
// range (no outgoing connection takes it) and no other test process is handed it. 0 if none.
int FreePort();
// The first of `span` consecutive such ports; 0 if none.
int FreePortRange(int span);

}  // namespace tandem::itest

#endif  // TANDEM_TESTS_INTEGRATION_PROCESS_H_

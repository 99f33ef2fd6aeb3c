#include "bench/router_bench/children.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace tandem::bench {
namespace {

constexpr int kMaxPids = 64;
std::atomic<pid_t> g_pids[kMaxPids];
std::atomic<int> g_npids{0};

}  // namespace

void RecordChildPid(pid_t pid) {
  const int i = g_npids.fetch_add(1);
  if (i < kMaxPids) g_pids[i].store(pid);
}

void InstallChildKiller(const std::string& temp_dir) {
  // SIGINT/SIGTERM are blocked in every thread (threads inherit the mask, so this must run
  // before any is started) and taken by one thread with sigwait, which can then do what a
  // signal handler may not: reap the children and remove the temp dir.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set, temp_dir] {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return;
    const int n = std::min(g_npids.load(), kMaxPids);
    for (int i = 0; i < n; ++i) {
      const pid_t pid = g_pids[i].load();
      if (pid > 0) kill(pid, SIGKILL);
    }
    for (int i = 0; i < n; ++i) {
      const pid_t pid = g_pids[i].load();
      if (pid > 0) waitpid(pid, nullptr, 0);
    }
    std::error_code ec;
    if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir, ec);
    std::fprintf(stderr, "router_bench: interrupted; children stopped\n");
    _exit(128 + sig);
  }).detach();
}

ChildSet::~ChildSet() { KillAll(); }

absl::StatusOr<pid_t> ChildSet::Spawn(const std::string& name, const std::vector<std::string>& argv,
                                      const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError(absl::StrCat(name, ": empty command"));
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("fork for ", name, ": ", std::strerror(errno)));
  }
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);  // the parent blocks SIGINT/SIGTERM; exec keeps masks
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(args[0], args.data());
    const char msg[] = "exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(127);
  }
  close(log_fd);
  RecordChildPid(pid);
  children_.push_back({name, pid, log_path, false});
  return pid;
}

bool ChildSet::AllRunning() {
  bool all = true;
  for (Child& c : children_) {
    if (c.exited) {
      all = false;
      continue;
    }
    int status = 0;
    if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
      c.exited = true;
      all = false;
    }
  }
  return all;
}

std::string ChildSet::LogTail(const std::string& name) const {
  for (const Child& c : children_) {
    if (c.name != name) continue;
    std::ifstream f(c.log_path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (text.size() > 4096) text = text.substr(text.size() - 4096);
    return absl::StrCat("--- ", name, " (", c.log_path, ") ---\n", text);
  }
  return "";
}

void ChildSet::KillAll() {
  for (Child& c : children_) {
    if (!c.exited) kill(c.pid, SIGTERM);
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (Child& c : children_) {
    while (!c.exited) {
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || r < 0) {
        c.exited = true;
      } else if (std::chrono::steady_clock::now() > until) {
        kill(c.pid, SIGKILL);
        waitpid(c.pid, &status, 0);
        c.exited = true;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
}

absl::StatusOr<std::unique_ptr<TempDir>> TempDir::Create(const std::string& prefix, bool keep) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + ".XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<TempDir>(new TempDir(tmpl, keep));
}

TempDir::~TempDir() {
  std::error_code ec;
  if (keep_) {
    std::fprintf(stderr, "kept %s\n", path_.c_str());
  } else {
    std::filesystem::remove_all(path_, ec);
  }
}

namespace {

// utime + stime in clock ticks and the parent pid, from /proc/<pid>/stat; false if unreadable.
bool ReadStat(const std::string& path, long long* ticks, long long* ppid) {
  std::ifstream f(path);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: fields restart after the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 4) *ppid = std::atoll(field.c_str());
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  *ticks = utime + stime;
  return true;
}

}  // namespace

double ProcessTreeCpuSeconds(pid_t pid) {
  long long total = 0, ticks = 0, ppid = 0;
  if (!ReadStat(absl::StrCat("/proc/", pid, "/stat"), &ticks, &ppid)) return 0;
  total += ticks;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadStat(entry.path().string() + "/stat", &ticks, &ppid) && ppid == pid) total += ticks;
  }
  return static_cast<double>(total) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace tandem::bench

#include "tests/integration/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace tandem::itest {
namespace {

std::vector<char*> Argv(const std::vector<std::string>& args) {
  std::vector<char*> out;
  for (const auto& a : args) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    // Children must not inherit blocked signals from the test process.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    auto args = Argv(argv);
    execv(args[0], args.data());
    fprintf(stderr, "exec %s failed\n", args[0]);
    _exit(127);
  }
  return pid;
}

std::string TempLog() {
  char path[] = "/tmp/tandem-test-XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) close(fd);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::string BinaryPath(const std::string& name) {
  return std::string(TANDEM_BINARY_DIR) + "/bin/" + name;
}

std::string SourcePath(const std::string& relative) {
  return std::string(TANDEM_SOURCE_DIR) + "/" + relative;
}

RunResult RunToExit(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  Process p(argv);
  RunResult r;
  auto code = p.Wait(timeout);
  if (!code) {
    r.timed_out = true;
    p.Signal(SIGKILL);
    p.Wait(std::chrono::seconds(5));
  } else {
    r.exit_code = *code;
  }
  r.out = p.Output();
  return r;
}

Process::Process(const std::vector<std::string>& argv) : log_path_(TempLog()) {
  pid_ = Spawn(argv, log_path_);
}

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  unlink(log_path_.c_str());
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  if (reaped_) return exit_code_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      return exit_code_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string Process::Output() const { return ReadFile(log_path_); }

int ConnectLoopback(int port, int timeout_secs) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{timeout_secs, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int64_t ProcStatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1)) * 1024;  // "VmRSS:   12345 kB"
    }
  }
  return -1;
}

int OpenFds(pid_t pid) {
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec);
  if (ec) return -1;
  int n = 0;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) return -1;
    ++n;
  }
  return n;
}

HttpReply HttpGet(int port, const std::string& path) {
  HttpReply reply;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return reply;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return reply;
  }
  std::string req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return reply;
  }
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || raw.size() < 12) return reply;
  reply.status = std::atoi(raw.substr(9, 3).c_str());
  auto body_at = raw.find("\r\n\r\n");
  if (body_at != std::string::npos) reply.body = raw.substr(body_at + 4);
  return reply;
}

bool WaitForHttp(int port, const std::string& path, int status, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (HttpGet(port, path).status == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

namespace {

// Ports handed out by FreePort / FreePortRange come from below the kernel's ephemeral range, so
// no outgoing connection (a gRPC channel, an HTTP client, a KV transfer socket) can be given one
// between the test picking it and a daemon binding it. Each is reserved across every test
// process on the machine with an flock'ed file held until this process exits, so parallel
// tests never pick the same port either.
constexpr int kLowestPort = 10000;
constexpr char kLockDir[] = "/tmp/tandem-itest-ports";

std::mutex reserve_mu;
std::vector<int> reserved_fds;  // kept open (and locked) for the life of the process

// The first port of the kernel's ephemeral range (32768 when it cannot be read).
int EphemeralLow() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (f >> low >> high && low > kLowestPort + 1000) return low;
  return 32768;
}

bool Bindable(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// Locks `port`'s file without waiting; -1 when another holder (any process, or an earlier
// reservation of this one) has it.
int LockPort(int port) {
  const std::string path = std::string(kLockDir) + "/" + std::to_string(port);
  int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int FreePortRange(int span) {
  std::lock_guard<std::mutex> lock(reserve_mu);
  static const bool lock_dir_made = [] {
    mkdir(kLockDir, 01777);
    chmod(kLockDir, 01777);  // shared by every user's tests (mkdir applies the umask)
    return true;
  }();
  (void)lock_dir_made;
  const int low = kLowestPort, high = EphemeralLow();  // ports [low, high)
  if (span < 1 || span > high - low) return 0;
  static std::mt19937 rng(
      static_cast<uint32_t>(getpid()) ^
      static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const int choices = high - low - span + 1;
  int base = low + static_cast<int>(rng() % static_cast<uint32_t>(choices));
  for (int tried = 0; tried < choices; ++tried, base = base + 1 < low + choices ? base + 1 : low) {
    std::vector<int> fds;
    for (int p = base; p < base + span; ++p) {
      const int fd = LockPort(p);
      if (fd < 0 || !Bindable(p)) {
        if (fd >= 0) close(fd);
        break;
      }
      fds.push_back(fd);
    }
    if (static_cast<int>(fds.size()) == span) {
      reserved_fds.insert(reserved_fds.end(), fds.begin(), fds.end());
      return base;
    }
    for (int fd : fds) close(fd);
  }
  return 0;
}

int FreePort() { return FreePortRange(1); }

}  // namespace tandem::itest

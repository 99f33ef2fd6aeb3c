#include "tools/tandemctl/admin_key.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace tandem::ctl {
namespace {

namespace fs = std::filesystem;

// The first line of `path`, trimmed; nullopt when the file cannot be opened.
std::optional<std::string> FirstLine(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// "http://127.0.0.1:30000/" and "http://127.0.0.1:30000" name the same router.
std::string TrimUrl(std::string url) {
  url = std::string(absl::StripAsciiWhitespace(url));
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

}  // namespace

absl::StatusOr<std::string> ResolveAdminKey(const AdminKeySources& s) {
  if (!s.key.empty()) return s.key;
  if (!s.key_file.empty()) {
    std::optional<std::string> key = FirstLine(s.key_file);
    if (!key) return absl::InvalidArgumentError(absl::StrCat("cannot read '", s.key_file, "'"));
    if (key->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", s.key_file, "': the first line holds no key"));
    }
    return *key;
  }
  if (!s.run_dir.empty()) {
    const std::string path = (fs::path(s.run_dir) / kAdminKeyFileName).string();
    std::optional<std::string> key = FirstLine(path);
    if (!key || key->empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--run-dir: no admin key in '", path, "'"));
    }
    return *key;
  }
  for (const std::string& dir : s.default_run_dirs) {
    std::optional<std::string> url = FirstLine((fs::path(dir) / "router.url").string());
    if (!url || TrimUrl(*url) != TrimUrl(s.router)) continue;
    std::optional<std::string> key = FirstLine((fs::path(dir) / kAdminKeyFileName).string());
    if (key && !key->empty()) return *key;
  }
  return std::string();
}

std::vector<std::string> DefaultRunDirs(const std::string& argv0) {
  std::vector<std::string> dirs = {"run/local-cluster"};
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) exe = fs::absolute(argv0, ec);
  if (!ec && exe.has_parent_path()) {
    // <checkout>/build/bin/tandemctl
    dirs.push_back((exe.parent_path().parent_path().parent_path() / "run" / "local-cluster")
                       .lexically_normal()
                       .string());
  }
  return dirs;
}

}  // namespace tandem::ctl

// Where tandemctl finds the router's admin key, so that an operator of a cluster started by
// deploy/local-cluster.sh or deploy/quickstart.sh (which write the key into their run directory)
// needs no flag, while the key never has to appear on a command line (`ps` shows those).
//
// Order: the --admin-key flag, then TANDEM_ADMIN_KEY (both arrive as `key`), then
// --admin-key-file / TANDEM_ADMIN_KEY_FILE, then `<run dir>/admin-key` for --run-dir /
// TANDEM_RUN_DIR, and last, with none of those given, the local cluster's default run directory
// (`run/local-cluster` under the working directory, or under the checkout that holds the
// tandemctl binary) but only when its `router.url` names `router`: a key of the local cluster is
// never sent to some other router.
//
// Stateless; thread-safe.
#ifndef TANDEM_TOOLS_TANDEMCTL_ADMIN_KEY_H_
#define TANDEM_TOOLS_TANDEMCTL_ADMIN_KEY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tandem::ctl {

// The file name of the admin key inside a run directory.
inline constexpr char kAdminKeyFileName[] = "admin-key";

struct AdminKeySources {
  std::string key;       // --admin-key or TANDEM_ADMIN_KEY
  std::string key_file;  // --admin-key-file or TANDEM_ADMIN_KEY_FILE
  std::string run_dir;   // --run-dir or TANDEM_RUN_DIR
  // Default run directories tried when none of the above is given (see the header comment).
  std::vector<std::string> default_run_dirs;
  std::string router;  // the router URL tandemctl talks to
};

// The key to send ("" when none was found: the admin routes then answer 401 or 403 and say
// why). Errors: a --admin-key-file that cannot be read or whose first line is empty, and a
// --run-dir without a readable admin-key file; each names the file.
absl::StatusOr<std::string> ResolveAdminKey(const AdminKeySources& sources);

// `run/local-cluster` under the working directory and under the checkout holding `argv0`
// (build/bin/tandemctl -> <checkout>/run/local-cluster).
std::vector<std::string> DefaultRunDirs(const std::string& argv0);

}  // namespace tandem::ctl

#endif  // TANDEM_TOOLS_TANDEMCTL_ADMIN_KEY_H_

# What the network-namespace tests share (sourced, not run): skip/fail with the exit codes ctest
# reads, the checks that say whether namespaces can be made here, bringing the hosts up with
# deploy/netns/hosts.sh, and a cleanup on exit that removes them and prints the ends of the logs
# of a failed run.
#
# The sourcing script sets, before calling netns_setup:
#   hosts  path of deploy/netns/hosts.sh      id    the hosts' id (hosts.sh --id)
#   work   a scratch directory, removed on exit
#   logs   a glob of the log files whose last `log_lines` lines a failed run prints

skip() {
  echo "SKIPPED: $1"
  exit 77
}
fail() {
  echo "FAIL: $1" >&2
  exit 1
}

# netns_require BIN_DIR CMD...: skips without root or iproute2 or one of CMD; fails when a
# Tandem binary is missing.
netns_require() {
  local bin=$1 cmd b
  shift
  [ "$(id -u)" = 0 ] || skip "network namespaces need root (running as uid $(id -u))"
  command -v ip > /dev/null || skip "'ip' (iproute2) is not installed"
  for cmd in "$@"; do
    command -v "$cmd" > /dev/null || skip "'$cmd' is not installed"
  done
  for b in tandem-router tandem-prefill tandem-decode; do
    [ -x "$bin/$b" ] || fail "$bin/$b is missing"
  done
}

netns_cleanup() {
  local rc=$? log
  # Deleting the namespaces ends every process left in them and removes their links and qdiscs.
  "$hosts" --id "$id" down || echo "cleanup: hosts.sh down failed" >&2
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    for log in $logs; do
      [ -e "$log" ] || continue
      echo "---- end of $(basename "$log")" >&2
      tail -n "${log_lines:-20}" "$log" >&2
    done
  fi
  rm -rf "$work"
  exit "$rc"
}

# netns_setup SUBNET N: installs the cleanup, then makes N hosts on SUBNET (a /24 prefix such as
# 10.20.30); skips where namespaces cannot be made. Prints what hosts.sh printed.
netns_setup() {
  trap netns_cleanup EXIT
  trap 'exit 1' INT TERM
  local rc=0 out
  out=$("$hosts" --id "$id" --subnet "$1" up "$2" 2>&1) || rc=$?
  [ "$rc" != 3 ] || skip "cannot make network namespaces here: $out"
  [ "$rc" = 0 ] || fail "hosts.sh up $2: $out"
  echo "$out"
}

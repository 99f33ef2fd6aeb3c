#!/usr/bin/env bash
# hosts.sh: separate "hosts" on one Linux machine, made of network namespaces joined by veth
# pairs through a bridge, so that a multi-node Tandem deployment (and its KV transfers) crosses a
# real network boundary without a second machine.
#
#   deploy/netns/hosts.sh [--id ID] [--subnet A.B.C] up N    make hosts h1..hN
#   deploy/netns/hosts.sh [--id ID] down                     remove them (idempotent)
#   deploy/netns/hosts.sh [--id ID] exec HOST CMD [ARG...]   run CMD inside HOST (h3 or 3)
#   deploy/netns/hosts.sh [--id ID] ip HOST                  print HOST's address
#   deploy/netns/hosts.sh [--id ID] list                     the hosts, their namespaces and addresses
#
# Layout for ID and subnet A.B.C (defaults: $TANDEM_NETNS_ID or "default", 10.77.0):
#   namespace tandem-ID-br     holds bridge br0 and one veth end vK per host; nothing else
#   namespace tandem-ID-hK     holds lo (up) and eth0 = A.B.C.K/24, the other end of vK
# Only these namespaces are touched: the machine's own interfaces, routes and addresses are never
# changed, and runs with different IDs do not see each other (parallel test runs pick their own).
# `down` first ends the processes still running inside the ID's namespaces (by pid, SIGTERM, then
# SIGKILL after 5 s), then deletes the namespaces.
#
# Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2 with veth and bridge support.
# Exit codes: 0 ok; 1 a failure (an `up` that fails removes what it made); 2 usage errors;
# 3 namespaces cannot be made here (not root, no `ip`, no veth/bridge support).
set -euo pipefail

prog=$(basename "$0")
usage() {
  sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
die() {
  echo "$prog: $1" >&2
  exit "${2:-1}"
}

id=${TANDEM_NETNS_ID:-default}
subnet=10.77.0
while [ $# -gt 0 ]; do
  case "$1" in
    --id) [ $# -ge 2 ] || die "--id needs a value" 2; id=$2; shift 2 ;;
    --subnet) [ $# -ge 2 ] || die "--subnet needs a value" 2; subnet=$2; shift 2 ;;
    -h | --help | help) usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
command=$1
shift
[[ $id =~ ^[A-Za-z0-9_.-]{1,32}$ ]] ||
  die "--id must be 1-32 letters, digits, '.', '_' or '-', not '$id'" 2
[[ $subnet =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
  [ "${BASH_REMATCH[1]}" -le 255 ] && [ "${BASH_REMATCH[2]}" -le 255 ] &&
  [ "${BASH_REMATCH[3]}" -le 255 ] ||
  die "--subnet must be the first three octets of an IPv4 /24 (e.g. 10.77.0), not '$subnet'" 2

prefix="tandem-$id"
bridge_ns="$prefix-br"

# The namespaces of this ID, hosts first (so that `down` empties them before the bridge goes).
our_namespaces() {
  local all
  all=$(ip netns list 2> /dev/null | awk '{print $1}')
  grep -E "^${prefix//./\\.}-h[0-9]+$" <<< "$all" | sort -V || true
  grep -x -- "$bridge_ns" <<< "$all" || true
}

host_ns() {
  local h=${1#h}
  [[ $h =~ ^[1-9][0-9]*$ ]] || die "host must be hK or K (K >= 1), not '$1'" 2
  echo "$prefix-h$h"
}

require_tools() {
  command -v ip > /dev/null || die "'ip' (iproute2) is not installed" 3
  [ "$(id -u)" = 0 ] || die "making network namespaces needs root (running as uid $(id -u))" 3
}

# Ends every process inside namespace $1: SIGTERM, up to 5 s, then SIGKILL.
end_processes() {
  local ns=$1 pids waited=0
  pids=$(ip netns pids "$ns" 2> /dev/null || true)
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill -TERM $pids 2> /dev/null || true
  while [ -n "$(ip netns pids "$ns" 2> /dev/null || true)" ] && [ "$waited" -lt 50 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  pids=$(ip netns pids "$ns" 2> /dev/null || true)
  if [ -n "$pids" ]; then
    echo "$prog: processes $pids in $ns ignored SIGTERM for 5s; SIGKILL" >&2
    # shellcheck disable=SC2086
    kill -KILL $pids 2> /dev/null || true
    sleep 0.2
  fi
}

down() {
  local ns
  for ns in $(our_namespaces); do
    end_processes "$ns"
    ip netns delete "$ns" 2> /dev/null || {
      # Deleted concurrently by another `down` is fine; anything else is reported.
      if ip netns list | awk '{print $1}' | grep -qx -- "$ns"; then
        echo "$prog: could not delete namespace $ns" >&2
        return 1
      fi
    }
  done
}

up() {
  local n=$1 k ns
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] ||
    die "up needs a host count from 1 to 250, not '$n'" 2
  require_tools
  if [ -n "$(our_namespaces)" ]; then
    die "hosts with id '$id' exist already ($(our_namespaces | tr '\n' ' ')); run '$prog --id $id down' first" 1
  fi
  trap 'echo "$prog: up failed; removing what was made" >&2; down || true' ERR
  if ! ip netns add "$bridge_ns" 2> /dev/null; then
    trap - ERR
    die "cannot create network namespace $bridge_ns (no CAP_SYS_ADMIN, or /run/netns not writable)" 3
  fi
  ip -n "$bridge_ns" link set lo up
  if ! ip -n "$bridge_ns" link add br0 type bridge 2> /dev/null; then
    trap - ERR
    down || true
    die "cannot create a bridge (kernel without bridge support?)" 3
  fi
  ip -n "$bridge_ns" link set br0 up
  for k in $(seq 1 "$n"); do
    ns="$prefix-h$k"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Created inside the bridge namespace, the host's end moved straight into its own namespace:
    # no interface ever appears in the machine's namespace.
    ip -n "$bridge_ns" link add "v$k" type veth peer name eth0 netns "$ns"
    ip -n "$bridge_ns" link set "v$k" master br0
    ip -n "$bridge_ns" link set "v$k" up
    ip -n "$ns" addr add "$subnet.$k/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  trap - ERR
  echo "$prog: $n hosts up (id $id, $subnet.1-$subnet.$n/24); '$prog --id $id exec h1 CMD' runs CMD on h1"
}

case "$command" in
  up)
    [ $# -eq 1 ] || die "usage: $prog up N" 2
    up "$1"
    ;;
  down)
    [ $# -eq 0 ] || die "usage: $prog down" 2
    command -v ip > /dev/null || die "'ip' (iproute2) is not installed" 3
    down
    ;;
  exec)
    [ $# -ge 2 ] || die "usage: $prog exec HOST CMD [ARG...]" 2
    ns=$(host_ns "$1")
    shift
    ip netns list | awk '{print $1}' | grep -qx -- "$ns" || die "no host $ns (run '$prog --id $id up N')" 1
    exec ip netns exec "$ns" "$@"
    ;;
  ip)
    [ $# -eq 1 ] || die "usage: $prog ip HOST" 2
    ns=$(host_ns "$1")
    addr=$(ip -n "$ns" -o -4 addr show dev eth0 2> /dev/null | awk '{print $4}')
    [ -n "$addr" ] || die "no host $ns (run '$prog --id $id up N')" 1
    echo "${addr%/*}"
    ;;
  list)
    for ns in $(our_namespaces); do
      [ "$ns" = "$bridge_ns" ] && continue
      printf '%-6s %-28s %s\n' "h${ns##*-h}" "$ns" \
        "$(ip -n "$ns" -o -4 addr show dev eth0 2> /dev/null | awk '{print $4}')"
    done
    ;;
  *) die "unknown command '$command' (up, down, exec, ip or list)" 2 ;;
esac

#!/usr/bin/env bash
# launch.sh: one script for every host of a multi-node Tandem deployment. Each host runs the same
# script with the same cluster.env; it starts the role(s) whose address in P_IP / D_IP / ROUTER_IP
# is one of the host's own addresses: prefill worker i on P_IP[i], decode worker j on D_IP[j], and
# the router on ROUTER_IP, started last, once every worker answers /health.
#
#   deploy/multinode/launch.sh start  [--env FILE]   start this host's roles in the background
#   deploy/multinode/launch.sh stop   [--env FILE]   stop them (SIGTERM, SIGKILL after STOP_TIMEOUT)
#   deploy/multinode/launch.sh status [--env FILE]   this host's roles and whether they run
#   deploy/multinode/launch.sh run ROLE [--env FILE] run ROLE (prefill|decode|router) in the
#                                                    foreground (what the systemd units call)
#
# FILE defaults to $TANDEM_CLUSTER_ENV, else cluster.env beside this script; see
# cluster.env.example for every setting. Bash arrays (P_IP=(a b)) and space-separated strings
# (P_IP="a b", the form systemd's EnvironmentFile reads) are both accepted. A setting the file
# leaves out is taken from the environment, else from the defaults in this script.
#
# Logs and pid files go to RUN_DIR as ROLE-ADDRESS.log / .pid, so hosts may share a file system.
# Exit codes: 0 ok; 1 a start that failed (this host's started roles are stopped again) or, for
# status, a role that is not running; 2 configuration or usage errors.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prog=$(basename "$0")

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}
die() {
  echo "$prog: $1" >&2
  exit "${2:-1}"
}

[ $# -ge 1 ] || usage
command=$1
shift
role_arg=""
case "$command" in
  start | stop | status) ;;
  run)
    [ $# -ge 1 ] || die "run needs a role: prefill, decode or router" 2
    role_arg=$1
    shift
    case "$role_arg" in prefill | decode | router) ;; *) die "unknown role '$role_arg'" 2 ;; esac
    ;;
  -h | --help | help) usage ;;
  *) die "unknown command '$command' (start, stop, status or run)" 2 ;;
esac
env_file=${TANDEM_CLUSTER_ENV:-$here/cluster.env}
while [ $# -gt 0 ]; do
  case "$1" in
    --env) [ $# -ge 2 ] || die "--env needs a file" 2; env_file=$2; shift 2 ;;
    *) die "unknown option '$1'" 2 ;;
  esac
done

# ---- configuration (cluster.env overrides these) ----
P_IP=()              # prefill worker addresses; worker i uses bootstrap port BOOTSTRAP_PORT+i
D_IP=()              # decode worker addresses
ROUTER_IP=""         # the router's host
MODEL_PATH=""
[ -r "$env_file" ] || die "cannot read the cluster environment file '$env_file' (--env FILE)" 2
# shellcheck disable=SC1090
source "$env_file"
read -r -a P_IP <<< "${P_IP[*]:-}"
read -r -a D_IP <<< "${D_IP[*]:-}"
TANDEM_BIN=${TANDEM_BIN:-$repo/build/bin}
PREFILL_PORT=${PREFILL_PORT:-8000}
PREFILL_HTTP_PORT=${PREFILL_HTTP_PORT:-9000}
BOOTSTRAP_PORT=${BOOTSTRAP_PORT:-8998}
DECODE_PORT=${DECODE_PORT:-8001}
DECODE_HTTP_PORT=${DECODE_HTTP_PORT:-9001}
PREFILL_SESSION_PORT=${PREFILL_SESSION_PORT:-0}
DECODE_SESSION_PORT=${DECODE_SESSION_PORT:-0}
ROUTER_HOST=${ROUTER_HOST:-$ROUTER_IP}
ROUTER_PORT=${ROUTER_PORT:-30000}
ROUTER_POLICY=${ROUTER_POLICY:-cache_aware}
TRANSFER_BACKEND=${TRANSFER_BACKEND:-tcp}
KV_CACHE_MEMORY=${KV_CACHE_MEMORY:-2GiB}
WORKER_THREADS=${WORKER_THREADS:-0}
SECRET_FILE=${SECRET_FILE:-/etc/tandem/cluster-secret}
RUN_DIR=${RUN_DIR:-/var/lib/tandem}
WAIT_SECS=${WAIT_SECS:-300}
STOP_TIMEOUT=${STOP_TIMEOUT:-30}

[ ${#P_IP[@]} -ge 1 ] || die "P_IP lists no prefill worker ($env_file)" 2
[ ${#D_IP[@]} -ge 1 ] || die "D_IP lists no decode worker ($env_file)" 2
[ -n "$ROUTER_IP" ] || die "ROUTER_IP is not set ($env_file)" 2
for v in PREFILL_PORT PREFILL_HTTP_PORT BOOTSTRAP_PORT DECODE_PORT DECODE_HTTP_PORT ROUTER_PORT \
  WAIT_SECS STOP_TIMEOUT WORKER_THREADS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer, not '${!v}'" 2
done
[ $((BOOTSTRAP_PORT + ${#P_IP[@]} - 1)) -le 65535 ] || die "BOOTSTRAP_PORT leaves no room" 2
case "$TRANSFER_BACKEND" in tcp | rdma) ;; *) die "TRANSFER_BACKEND must be tcp or rdma" 2 ;; esac
# One prefill and one decode worker per address at most: they share the configured ports.
for list in "${P_IP[*]}" "${D_IP[*]}"; do
  dup=$(tr ' ' '\n' <<< "$list" | sort | uniq -d | head -n 1)
  [ -z "$dup" ] || die "$dup appears twice in P_IP or D_IP; one worker of a kind per host" 2
done

# This host's addresses: every address of every interface (`ip -o addr`), else `hostname -I`.
local_addresses() {
  if command -v ip > /dev/null; then
    ip -o addr show 2> /dev/null | awk '{split($4, a, "/"); print a[1]}'
  else
    hostname -I 2> /dev/null | tr ' ' '\n'
  fi
}
mapfile -t LOCAL_IPS < <(local_addresses | grep -v '^$')
is_local() {
  local a
  for a in "${LOCAL_IPS[@]}"; do [ "$a" = "$1" ] && return 0; done
  return 1
}
# URLs put IPv6 addresses in brackets.
url_host() { if [[ $1 == *:* ]]; then echo "[$1]"; else echo "$1"; fi; }

# ---- the roles ----
# Each builds ARGS (the binary and its flags) for one role instance.
prefill_args() {
  local i=$1 ip=${P_IP[$1]}
  ARGS=("$TANDEM_BIN/tandem-prefill" --model-path "$MODEL_PATH" --host "$ip"
    --port "$PREFILL_PORT" --http-port "$PREFILL_HTTP_PORT" --session-port "$PREFILL_SESSION_PORT"
    --disaggregation-bootstrap-port $((BOOTSTRAP_PORT + i))
    --disaggregation-transfer-backend "$TRANSFER_BACKEND" --transfer-host "$ip"
    --kv-cache-memory "$KV_CACHE_MEMORY" --threads "$WORKER_THREADS"
    --cluster-secret-file "$SECRET_FILE")
  # shellcheck disable=SC2206
  ARGS+=(${PREFILL_ARGS:-})
}
decode_args() {
  local ip=${D_IP[$1]}
  ARGS=("$TANDEM_BIN/tandem-decode" --model-path "$MODEL_PATH" --host "$ip"
    --port "$DECODE_PORT" --http-port "$DECODE_HTTP_PORT" --session-port "$DECODE_SESSION_PORT"
    --disaggregation-transfer-backend "$TRANSFER_BACKEND" --transfer-host "$ip"
    --kv-cache-memory "$KV_CACHE_MEMORY" --threads "$WORKER_THREADS"
    --cluster-secret-file "$SECRET_FILE")
  # shellcheck disable=SC2206
  ARGS+=(${DECODE_ARGS:-})
}
router_args() {
  local i
  ARGS=("$TANDEM_BIN/tandem-router" --pd-disaggregation --policy "$ROUTER_POLICY"
    --model-path "$MODEL_PATH" --host "$ROUTER_HOST" --port "$ROUTER_PORT"
    --cluster-secret-file "$SECRET_FILE")
  for i in "${!P_IP[@]}"; do
    ARGS+=(--prefill "http://$(url_host "${P_IP[$i]}"):$PREFILL_PORT" $((BOOTSTRAP_PORT + i)))
  done
  for i in "${!D_IP[@]}"; do
    ARGS+=(--decode "http://$(url_host "${D_IP[$i]}"):$DECODE_PORT")
  done
  [ -z "${ADMIN_KEY:-}" ] || ARGS+=(--admin-key "$ADMIN_KEY")
  [ -z "${ADMIN_KEY_FILE:-}" ] || ARGS+=(--admin-key-file "$ADMIN_KEY_FILE")
  [ -z "${API_KEY:-}" ] || ARGS+=(--api-key "$API_KEY")
  # shellcheck disable=SC2206
  ARGS+=(${ROUTER_ARGS:-})
}

# This host's role instances as "role index address" lines, router last.
my_roles() {
  local i
  for i in "${!P_IP[@]}"; do if is_local "${P_IP[$i]}"; then echo "prefill $i ${P_IP[$i]}"; fi; done
  for i in "${!D_IP[@]}"; do if is_local "${D_IP[$i]}"; then echo "decode $i ${D_IP[$i]}"; fi; done
  if is_local "$ROUTER_IP"; then echo "router 0 $ROUTER_IP"; fi
}

check_common() {
  [ -n "$MODEL_PATH" ] && [ -f "$MODEL_PATH/config.json" ] ||
    die "MODEL_PATH must be a model directory with config.json (got '${MODEL_PATH:-nothing}')" 2
  [ -r "$SECRET_FILE" ] || die "cannot read SECRET_FILE '$SECRET_FILE' (the cluster secret, same on every host)" 2
}

# Waits until every worker answers http://ADDRESS:HTTP_PORT/health with 200.
wait_for_workers() {
  local deadline=$((SECONDS + WAIT_SECS)) url pending ip
  while :; do
    pending=""
    for ip in "${P_IP[@]}"; do
      url="http://$(url_host "$ip"):$PREFILL_HTTP_PORT/health"
      [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)" = 200 ] ||
        pending+=" prefill@$ip"
    done
    for ip in "${D_IP[@]}"; do
      url="http://$(url_host "$ip"):$DECODE_HTTP_PORT/health"
      [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)" = 200 ] ||
        pending+=" decode@$ip"
    done
    [ -n "$pending" ] || return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "$prog: workers not healthy after ${WAIT_SECS}s:$pending" >&2
      return 1
    fi
    sleep 1
  done
}

if [ "$command" = run ]; then
  check_common
  found=""
  while read -r role i ip; do
    [ "$role" = "$role_arg" ] && found="$i" && break
  done < <(my_roles)
  [ -n "$found" ] ||
    die "no $role_arg role for this host: none of its addresses (${LOCAL_IPS[*]}) is listed for it" 2
  if [ "$role_arg" = router ]; then
    echo "$prog: waiting for the workers' /health before starting the router"
    wait_for_workers || exit 1
  fi
  "${role_arg}_args" "$found"
  exec "${ARGS[@]}"
fi

# shellcheck source=deploy/lib/pidfiles.sh
source "$here/../lib/pidfiles.sh"

# The pid files of this host's roles, router first.
my_pid_files() {
  local role i ip
  while read -r role i ip; do echo "$RUN_DIR/$role-$ip.pid"; done < <(my_roles) | sort -r
}

stop_mine() {
  # shellcheck disable=SC2046 # one word per pid file
  stop_pid_files "$STOP_TIMEOUT" $(my_pid_files)
}

roles=$(my_roles)
if [ -z "$roles" ]; then
  echo "$prog: nothing to do here: none of this host's addresses (${LOCAL_IPS[*]}) is in" \
    "P_IP, D_IP or ROUTER_IP"
  exit 0
fi

case "$command" in
  stop)
    stop_mine
    echo "$prog: stopped $(echo "$roles" | awk '{printf "%s%s@%s", (NR > 1 ? ", " : ""), $1, $3}')"
    exit 0
    ;;
  status)
    rc=0
    printf '%-8s %-40s %-8s %s\n' ROLE ADDRESS PID STATE
    while read -r role i ip; do
      f="$RUN_DIR/$role-$ip.pid"
      if pid=$(live_pid "$f"); then
        printf '%-8s %-40s %-8s %s\n' "$role" "$ip" "$pid" alive
      else
        printf '%-8s %-40s %-8s %s\n' "$role" "$ip" - "not running (see $RUN_DIR/$role-$ip.log)"
        rc=1
      fi
    done <<< "$roles"
    exit "$rc"
    ;;
esac

# ---- start ----
check_common
mkdir -p "$RUN_DIR"
while read -r role i ip; do
  [ -x "$TANDEM_BIN/tandem-$role" ] ||
    die "$TANDEM_BIN/tandem-$role is missing (build it, or set TANDEM_BIN)" 2
  if pid=$(live_pid "$RUN_DIR/$role-$ip.pid"); then
    die "$role@$ip is already running (pid $pid); '$prog stop' first" 2
  fi
done <<< "$roles"

on_failure() {
  echo "$prog: start failed; stopping this host's roles (logs in $RUN_DIR)" >&2
  stop_mine
  exit 1
}

# Workers first, each detached with its output in ROLE-ADDRESS.log.
while read -r role i ip; do
  [ "$role" = router ] && continue
  "${role}_args" "$i"
  echo "$prog: starting $role worker $i on $ip"
  setsid "${ARGS[@]}" > "$RUN_DIR/$role-$ip.log" 2>&1 < /dev/null &
  echo "$! tandem-$role" > "$RUN_DIR/$role-$ip.pid"
done <<< "$roles"

if is_local "$ROUTER_IP"; then
  # Other hosts may still be starting their workers: wait for every worker, ours included.
  echo "$prog: waiting up to ${WAIT_SECS}s for ${#P_IP[@]} prefill and ${#D_IP[@]} decode workers"
  wait_for_workers || on_failure
  router_args
  echo "$prog: starting the router on $ROUTER_HOST:$ROUTER_PORT"
  setsid "${ARGS[@]}" > "$RUN_DIR/router-$ROUTER_IP.log" 2>&1 < /dev/null &
  echo "$! tandem-router" > "$RUN_DIR/router-$ROUTER_IP.pid"
  router_url="http://$(url_host "$ROUTER_HOST"):$ROUTER_PORT"
  [ "$ROUTER_HOST" != 0.0.0.0 ] || router_url="http://127.0.0.1:$ROUTER_PORT"
  deadline=$((SECONDS + WAIT_SECS))
  # /readiness: the router has a healthy worker of each kind (older routers: /health).
  router_ready() {
    local code
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$router_url/readiness" || true)
    [ "$code" != 404 ] ||
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$router_url/health" || true)
    [ "$code" = 200 ]
  }
  until router_ready; do
    live_pid "$RUN_DIR/router-$ROUTER_IP.pid" > /dev/null || {
      echo "$prog: the router exited during start-up; the end of its log:" >&2
      tail -n 10 "$RUN_DIR/router-$ROUTER_IP.log" >&2 || true
      on_failure
    }
    [ "$SECONDS" -lt "$deadline" ] || { echo "$prog: router not healthy after ${WAIT_SECS}s" >&2; on_failure; }
    sleep 0.5
  done
  echo "$prog: ready: $router_url (logs in $RUN_DIR)"
else
  # Only workers here: report those that died at once (bad flags, port in use, unreadable model).
  sleep 1
  while read -r role i ip; do
    [ "$role" = router ] && continue
    live_pid "$RUN_DIR/$role-$ip.pid" > /dev/null || {
      echo "$prog: $role@$ip exited during start-up; the end of its log:" >&2
      tail -n 10 "$RUN_DIR/$role-$ip.log" >&2 || true
      on_failure
    }
  done <<< "$roles"
  echo "$prog: started $(echo "$roles" | awk '{printf "%s%s@%s", (NR > 1 ? ", " : ""), $1, $3}') (logs in $RUN_DIR)"
fi

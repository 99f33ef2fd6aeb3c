# Pid files of the daemons the deploy scripts start (sourced, not run). A pid file holds
# "PID BINARY_PATH"; the caller sets `prog` (its name, for messages).

# A pid file's process, if it is still the binary that was started (pids are reused).
live_pid() {
  local file=$1 pid name
  [ -s "$file" ] || return 1
  read -r pid name < "$file" || true
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2> /dev/null || return 1
  if [ -n "$name" ] && [ -r "/proc/$pid/cmdline" ]; then
    tr '\0' '\n' < "/proc/$pid/cmdline" | head -n 1 | grep -q -- "$name$" || return 1
  fi
  echo "$pid"
}

# stop_pid_files TIMEOUT FILE...: SIGTERM to each live process in the order given (put the router
# first, so no new request reaches a worker that is going away), up to TIMEOUT seconds for all of
# them to exit (they drain), SIGKILL for any left; then the pid files are removed.
stop_pid_files() {
  local timeout=$1 f pid waited=0 alive
  shift
  for f in "$@"; do
    if pid=$(live_pid "$f"); then kill -TERM "$pid" 2> /dev/null || true; fi
  done
  while :; do
    alive=0
    for f in "$@"; do if live_pid "$f" > /dev/null; then alive=1; fi; done
    [ "$alive" = 1 ] || break
    if [ "$waited" -ge $((timeout * 10)) ]; then
      for f in "$@"; do
        if pid=$(live_pid "$f"); then
          echo "$prog: $(basename "$f" .pid) (pid $pid) ignored SIGTERM for ${timeout}s; SIGKILL" >&2
          kill -KILL "$pid" 2> /dev/null || true
        fi
      done
      sleep 0.2
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  for f in "$@"; do rm -f "$f"; done
}

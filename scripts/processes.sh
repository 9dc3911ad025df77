#!/usr/bin/env bash
# Shared by scripts/control-plane.sh and scripts/registry.sh (sourced, not run): root or sudo,
# free loopback ports, and processes tracked by PID files. The caller defines `log`.

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Whether the process of PID file $1 runs.
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stop the process of PID file $1 (named $2 in messages): SIGTERM, 10 s, then SIGKILL.
stop_pid() {
  local f=$1 name=$2
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$pid" 2>/dev/null && { log "$name ($pid) ignored SIGTERM; killing"; kill -9 "$pid" 2>/dev/null || true; }
  fi
  rm -f "$f"
}

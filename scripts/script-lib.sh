#!/usr/bin/env bash
# Shared by scripts/control-plane.sh and scripts/registry.sh (sourced, not run): root or sudo,
# Debian packages installed when missing, free loopback ports, and processes tracked by PID
# files. The caller defines `log` and `die`.

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Install those of the Debian packages "$@" that are not installed.
install_missing() {
  local need=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

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

# SIGKILL the process of PID file $1 (named $2 in messages; it must run) and wait until it is
# gone (its ports free) before a restart binds them again.
kill_pid() {
  local f=$1 name=$2
  alive "$f" || die "$name is not running"
  local pid; pid=$(cat "$f")
  kill -9 "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$f"
  log "killed $name"
}

#!/usr/bin/env bash
# A real, throw-away OCI registry (Debian's docker-registry, the CNCF distribution registry) on
# loopback with TLS and basic auth, for wasmloop's OCI tests and demo.
#
#   registry.sh install        install docker-registry, apache2-utils (htpasswd) and openssl
#   registry.sh start [DIR]    start a registry on a free port; state in DIR (default: a new temp
#                              dir); prints DIR. DIR holds:
#                                ca.crt         the self-signed CA that signed the server certificate
#                                address        host:port (127.0.0.1:PORT)
#                                username, password   the basic-auth credentials
#                                dockerconfig.json    the same as a docker config (imagePullSecrets format)
#                                env            `export WASMLOOP_REGISTRY_...` lines
#   registry.sh stop DIR       stop the registry started in DIR (by PID) and remove DIR
#   registry.sh kill DIR       SIGKILL it but keep DIR (a registry that went down)
#   registry.sh restart DIR    start it again on the same port, storage and certificates
#
# Several registries can run side by side: each picks its own free port and directory.
set -euo pipefail

die() { echo "registry: $*" >&2; exit 1; }
log() { echo "registry: $*" >&2; }
# shellcheck source=scripts/script-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/script-lib.sh"

install() {
  install_missing docker-registry apache2-utils openssl curl
}

# A CA and a server certificate for 127.0.0.1/localhost signed by it.
make_certs() {
  local d=$1
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=wasmloop test registry CA" \
    -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$d/server.key" -out "$d/server.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/server.ext" -out "$d/server.crt" >/dev/null 2>&1
  rm -f "$d/server.csr" "$d/server.ext"
}

launch() {
  local dir=$1 port; port=$(cat "$dir/port")
  docker-registry serve "$dir/config.yml" >>"$dir/registry.log" 2>&1 &
  echo $! >"$dir/registry.pid"
  local i=0 user pass
  user=$(cat "$dir/username"); pass=$(cat "$dir/password")
  until curl -sf --max-time 1 --cacert "$dir/ca.crt" -u "$user:$pass" "https://127.0.0.1:$port/v2/" >/dev/null 2>&1; do
    alive "$dir/registry.pid" || { tail -n 20 "$dir/registry.log" >&2; return 1; }
    i=$((i + 1)); [ $i -ge 120 ] && { log "registry not ready after 30s"; return 1; }
    sleep 0.25
  done
}

start() {
  command -v docker-registry >/dev/null || die "docker-registry not installed: run '$0 install'"
  command -v htpasswd >/dev/null || die "htpasswd not installed: run '$0 install'"
  local dir=${1:-}
  if [ -n "$dir" ]; then
    alive "$dir/registry.pid" && die "a registry is already running in $dir"
    mkdir -p "$dir"
  else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/wasmloop-registry.XXXXXX")
  fi
  dir=$(cd "$dir" && pwd)
  mkdir -p "$dir/data"
  local port user=wasmloop pass
  port=$(free_port)
  pass=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$port" >"$dir/port"
  echo "127.0.0.1:$port" >"$dir/address"
  echo "$user" >"$dir/username"
  echo "$pass" >"$dir/password"
  htpasswd -Bbn "$user" "$pass" >"$dir/htpasswd" 2>/dev/null
  make_certs "$dir"
  local auth; auth=$(printf '%s:%s' "$user" "$pass" | base64 -w0)
  printf '{"auths":{"127.0.0.1:%s":{"username":"%s","password":"%s","auth":"%s"}}}\n' \
    "$port" "$user" "$pass" "$auth" >"$dir/dockerconfig.json"
  cat >"$dir/config.yml" <<CFG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  secret: $(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  tls:
    certificate: $dir/server.crt
    key: $dir/server.key
auth:
  htpasswd:
    realm: wasmloop-test
    path: $dir/htpasswd
CFG
  cat >"$dir/env" <<ENV
export WASMLOOP_REGISTRY=$dir
export WASMLOOP_REGISTRY_ADDRESS=127.0.0.1:$port
export WASMLOOP_REGISTRY_CA=$dir/ca.crt
ENV
  launch "$dir" || { stop "$dir" >/dev/null 2>&1 || true; die "docker-registry did not start (log above)"; }
  log "ready: https://127.0.0.1:$port (user $user) in $dir"
  echo "$dir"
}

stop() {
  local dir=${1:-}
  [ -n "$dir" ] || die "usage: $0 stop DIR"
  if [ ! -d "$dir" ]; then log "nothing to stop: $dir does not exist"; return 0; fi
  [ -f "$dir/config.yml" ] || die "$dir does not look like a registry directory; refusing to remove it"
  stop_pid "$dir/registry.pid" docker-registry
  rm -rf "$dir"
  log "stopped and removed $dir"
}

kill_it() {
  local dir=${1:?dir}
  kill_pid "$dir/registry.pid" "the registry of $dir"
}

restart() {
  local dir=${1:?dir}
  [ -f "$dir/config.yml" ] || die "$dir has no registry configuration"
  stop_pid "$dir/registry.pid" docker-registry
  launch "$dir" || die "docker-registry did not come back (log above)"
  log "restarted the registry of $dir"
}

case "${1:-}" in
  install) install ;;
  start) shift; start "${1:-}" ;;
  stop) shift; stop "${1:-}" ;;
  kill) shift; kill_it "${1:-}" ;;
  restart) shift; restart "${1:-}" ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

#!/usr/bin/env bash
# A real, throw-away Kubernetes control plane (etcd + kube-apiserver, optionally
# kube-controller-manager) on loopback, for wasmloop's tests, demo and benchmarks.
#
#   control-plane.sh build          install etcd, build kube-apiserver/kube-controller-manager/kubectl
#                                    v1.20.2 from Debian's source package (cached; rebuilt only if missing)
#   control-plane.sh start [DIR]    start etcd + apiserver on free ports; state in DIR (default: a new
#                                    temp dir); prints DIR. Writes DIR/kubeconfig and DIR/env.
#   control-plane.sh stop DIR       stop the processes started in DIR (by PID) and remove DIR
#   control-plane.sh env DIR        print `export KUBECONFIG=...` etc. for DIR
#   control-plane.sh kcm DIR [ARGS] start kube-controller-manager against DIR's apiserver (PID in DIR)
#   control-plane.sh bin NAME       print the path of a built binary (kube-apiserver, kubectl, ...)
#   control-plane.sh kill DIR etcd|apiserver     SIGKILL one of DIR's processes (fault injection)
#   control-plane.sh restart DIR etcd|apiserver  start it again (stopping it first if it runs) on
#                                    the same ports, data and certificates; waits until it serves
#
# Several control planes can run side by side: each picks its own free ports and directory.
set -euo pipefail

K8S_VERSION=v1.20.2
DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
CACHE=${WASMLOOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmloop}
BIN=$CACHE/kubernetes-$K8S_VERSION/bin
ETCD=${ETCD_BIN:-/usr/bin/etcd}

die() { echo "control-plane: $*" >&2; exit 1; }
log() { echo "control-plane: $*" >&2; }
# shellcheck source=scripts/script-lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/script-lib.sh"


have_binaries() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/kubectl" ]
}

install_packages() {
  install_missing etcd-server golang-1.19-go rsync golang-github-modern-go-reflect2-dev dpkg-dev openssl curl
  # etcd-server's package starts a system etcd on :2379; we run our own on free ports, so stop it.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    as_root systemctl stop etcd || true
  fi
}

# apt-get source needs a deb-src entry; derive it from the machine's own Debian entry.
ensure_deb_src() {
  local src=/etc/apt/sources.list.d/debian.sources
  local out=/etc/apt/sources.list.d/wasmloop-deb-src.sources
  [ -f "$out" ] && return 0
  [ -f "$src" ] || die "no $src to derive a deb-src entry from"
  sed -e 's/^Types:.*/Types: deb-src/' "$src" | as_root tee "$out" >/dev/null
  as_root apt-get update -qq
}

build() {
  install_packages
  if have_binaries; then log "binaries cached in $BIN"; return 0; fi
  ensure_deb_src
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/wasmloop-k8s-build.XXXXXX")
  trap 'rm -rf "$work"' RETURN
  log "fetching Debian source kubernetes=$DEB_VERSION into $work"
  (cd "$work" && apt-get source --download-only -qq "kubernetes=$DEB_VERSION" >/dev/null)
  local orig; orig=$(ls "$work"/kubernetes_*.orig.tar.* | head -n1)
  [ -f "$orig" ] || die "orig tarball not found in $work"
  mkdir -p "$work/src"
  tar -xf "$orig" -C "$work/src" --strip-components=1
  local root=$work/src
  [ -d "$root/vendor" ] || die "orig tarball has no vendor/ directory"
  # Go >= 1.18 + reflect2 1.0.1 makes the apiserver panic while encoding error responses.
  local r2; r2=$(dpkg -L golang-github-modern-go-reflect2-dev | grep -m1 '/github.com/modern-go/reflect2$')
  [ -d "$r2" ] || die "reflect2 1.0.2 source not found"
  rm -rf "$root/vendor/github.com/modern-go/reflect2"
  cp -r "$r2" "$root/vendor/github.com/modern-go/reflect2"
  sed -i 's#^github.com/modern-go/reflect2 v1.0.1#github.com/modern-go/reflect2 v1.0.2#' "$root/vendor/modules.txt" || true
  mkdir -p "$root/.go/src/k8s.io"
  ln -s "$root" "$root/.go/src/k8s.io/kubernetes"
  log "building kube-apiserver, kube-controller-manager, kubectl (about 7 minutes on 2 cores)"
  (
    cd "$root/.go/src/k8s.io/kubernetes"
    export GOPATH=$root/.go PATH=/usr/lib/go-1.19/bin:$PATH CGO_ENABLED=0 GOFLAGS=-mod=vendor
    export GOCACHE=$CACHE/go-build
    export KUBE_GIT_VERSION=$K8S_VERSION KUBE_GIT_TREE_STATE=clean
    make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kubectl" >"$work/build.log" 2>&1 \
      || { tail -n 40 "$work/build.log" >&2; die "build failed"; }
  )
  mkdir -p "$BIN.tmp"
  for b in kube-apiserver kube-controller-manager kubectl; do
    cp "$root/_output/local/bin/linux/amd64/$b" "$BIN.tmp/$b" 2>/dev/null \
      || cp "$root/_output/bin/$b" "$BIN.tmp/$b"
  done
  rm -rf "$BIN"; mv "$BIN.tmp" "$BIN"
  log "built into $BIN"
}

wait_ready() { # url token ca deadline_s pidfile what
  local url=$1 token=$2 ca=$3 deadline=$4 pidfile=$5 what=$6 i=0
  while :; do
    alive "$pidfile" || return 1
    if curl -sf --max-time 2 --cacert "$ca" -H "Authorization: Bearer $token" "$url" >/dev/null 2>&1; then
      return 0
    fi
    i=$((i + 1)); [ $i -ge $((deadline * 4)) ] && { log "$what not ready after ${deadline}s"; return 1; }
    sleep 0.25
  done
}

start() {
  have_binaries || die "binaries missing in $BIN: run '$0 build' first"
  [ -x "$ETCD" ] || die "etcd not found at $ETCD: run '$0 build' first (installs etcd-server)"
  local dir=${1:-}
  if [ -n "$dir" ]; then
    if alive "$dir/apiserver.pid" || alive "$dir/etcd.pid"; then
      die "a control plane is already running in $dir (stop it first: $0 stop $dir)"
    fi
    mkdir -p "$dir"
  else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/wasmloop-cp.XXXXXX")
  fi
  dir=$(cd "$dir" && pwd)
  mkdir -p "$dir/etcd" "$dir/certs"
  local etcd_port peer_port api_port
  etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
  printf 'etcd_port=%s\npeer_port=%s\napi_port=%s\n' "$etcd_port" "$peer_port" "$api_port" >"$dir/ports"

  launch_etcd "$dir" || { stop "$dir" >/dev/null 2>&1 || true; die "etcd did not start (log above)"; }

  local token; token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
  echo "$token,admin,admin,system:masters" >"$dir/tokens.csv"
  openssl genrsa -out "$dir/certs/sa.key" 2048 >/dev/null 2>&1
  openssl rsa -in "$dir/certs/sa.key" -pubout -out "$dir/certs/sa.pub" >/dev/null 2>&1

  launch_apiserver "$dir" || { stop "$dir" >/dev/null 2>&1 || true; die "kube-apiserver did not start (log above)"; }
  local ca=$dir/certs/apiserver-ca.crt
  [ -f "$ca" ] || ca=$dir/certs/apiserver.crt

  cat >"$dir/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: wasmloop
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $ca
users:
- name: admin
  user:
    token: $token
contexts:
- name: wasmloop
  context: {cluster: wasmloop, user: admin}
current-context: wasmloop
KC
  cat >"$dir/env" <<ENV
export KUBECONFIG=$dir/kubeconfig
export WASMLOOP_CONTROL_PLANE=$dir
export PATH=$BIN:\$PATH
ENV
  log "ready: https://127.0.0.1:$api_port (etcd :$etcd_port) in $dir"
  echo "$dir"
}

# Start DIR's etcd on its ports and data dir; wait until healthy. Returns non-zero on failure.
launch_etcd() {
  local dir=$1 etcd_port peer_port api_port
  # shellcheck disable=SC1091
  . "$dir/ports"
  "$ETCD" --name wasmloop --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "wasmloop=http://127.0.0.1:$peer_port" \
    --quota-backend-bytes 4294967296 --unsafe-no-fsync \
    >>"$dir/etcd.log" 2>&1 &
  echo $! >"$dir/etcd.pid"
  local i=0
  until curl -sf --max-time 1 "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1; do
    alive "$dir/etcd.pid" || { tail -n 20 "$dir/etcd.log" >&2; return 1; }
    i=$((i + 1)); [ $i -ge 120 ] && { log "etcd not healthy after 30s"; return 1; }
    sleep 0.25
  done
}

# Start DIR's kube-apiserver on its port with its certificates; wait until ready.
launch_apiserver() {
  local dir=$1 etcd_port peer_port api_port
  # shellcheck disable=SC1091
  . "$dir/ports"
  "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
    --cert-dir "$dir/certs" --token-auth-file "$dir/tokens.csv" \
    --authorization-mode RBAC \
    --service-account-key-file "$dir/certs/sa.pub" \
    --service-account-signing-key-file "$dir/certs/sa.key" \
    --service-account-issuer https://kubernetes.default.svc \
    --service-cluster-ip-range 10.0.0.0/24 \
    --disable-admission-plugins ServiceAccount \
    --max-requests-inflight 2000 --max-mutating-requests-inflight 1000 \
    >>"$dir/apiserver.log" 2>&1 &
  echo $! >"$dir/apiserver.pid"
  # The apiserver writes its self-signed CA + serving cert into --cert-dir on first start.
  local i=0
  until [ -f "$dir/certs/apiserver.crt" ]; do
    alive "$dir/apiserver.pid" || { tail -n 20 "$dir/apiserver.log" >&2; return 1; }
    i=$((i + 1)); [ $i -ge 240 ] && { log "kube-apiserver wrote no certificate in 60s"; return 1; }
    sleep 0.25
  done
  local ca=$dir/certs/apiserver-ca.crt token
  [ -f "$ca" ] || ca=$dir/certs/apiserver.crt
  token=$(cut -d, -f1 "$dir/tokens.csv")
  wait_ready "https://127.0.0.1:$api_port/readyz" "$token" "$ca" 90 "$dir/apiserver.pid" kube-apiserver \
    || { tail -n 20 "$dir/apiserver.log" >&2; return 1; }
}

# kill -9 one process of DIR (etcd or apiserver): a crash, for the fault tests.
kill_one() {
  local dir=${1:?dir} what=${2:?etcd or apiserver}
  case $what in etcd | apiserver) ;; *) die "kill: $what is not etcd or apiserver" ;; esac
  kill_pid "$dir/$what.pid" "$what of $dir"
}

# Start one process of DIR again (after `kill`, or stopping it first) on the same ports and data.
restart_one() {
  local dir=${1:?dir} what=${2:?etcd or apiserver}
  case $what in etcd | apiserver) ;; *) die "restart: $what is not etcd or apiserver" ;; esac
  [ -f "$dir/ports" ] || die "$dir has no ports file (started by an older control-plane.sh?)"
  stop_pid "$dir/$what.pid" "$what"
  "launch_$what" "$dir" || die "$what did not come back (log above)"
  log "restarted $what of $dir"
}

stop() {
  local dir=${1:-}
  [ -n "$dir" ] || die "usage: $0 stop DIR"
  if [ ! -d "$dir" ]; then log "nothing to stop: $dir does not exist"; return 0; fi
  [ -f "$dir/kubeconfig" ] || [ -f "$dir/etcd.pid" ] || [ -f "$dir/apiserver.pid" ] \
    || die "$dir does not look like a control-plane directory; refusing to remove it"
  stop_pid "$dir/kcm.pid" kube-controller-manager
  stop_pid "$dir/apiserver.pid" kube-apiserver
  stop_pid "$dir/etcd.pid" etcd
  rm -rf "$dir"
  log "stopped and removed $dir"
}

env_of() {
  local dir=${1:-}
  [ -f "$dir/env" ] || die "no control plane in '$dir' (start one: $0 start)"
  alive "$dir/apiserver.pid" || die "the kube-apiserver of $dir is not running"
  alive "$dir/etcd.pid" || die "the etcd of $dir is not running"
  cat "$dir/env"
}

kcm() {
  local dir=${1:-}; shift || true
  env_of "$dir" >/dev/null
  alive "$dir/kcm.pid" && die "kube-controller-manager already running in $dir"
  "$BIN/kube-controller-manager" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
    --bind-address 127.0.0.1 --secure-port 0 --port 0 "$@" >"$dir/kcm.log" 2>&1 &
  echo $! >"$dir/kcm.pid"
  log "kube-controller-manager started (pid $(cat "$dir/kcm.pid"), log $dir/kcm.log)"
}

case "${1:-}" in
  build) build ;;
  start) shift; start "${1:-}" ;;
  stop) shift; stop "${1:-}" ;;
  env) shift; env_of "${1:-}" ;;
  kcm) shift; kcm "$@" ;;
  stop-kcm) shift; stop_pid "${1:?dir}/kcm.pid" kube-controller-manager ;;
  kill) shift; kill_one "$@" ;;
  restart) shift; restart_one "$@" ;;
  bin) shift; have_binaries || die "not built: run '$0 build'"; echo "$BIN/${1:?name}" ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac

#!/usr/bin/env bash
# Soaks: the host under churn for a long while; and the frozen-replica scenario, run repeatedly.
#
#   scripts/soak.sh [MINUTES]        default 30; writes target/soak/samples.csv and prints a summary
#   scripts/soak.sh freeze [RUNS]    default 10: tests/tests/freeze.rs (a replica frozen with SIGSTOP
#                                    during a Lease renewal, in --shard-mode plugin with 3 replicas and
#                                    with --leader-elect with 2; issue #52) RUNS times against one
#                                    control plane; prints how many runs passed, exits 1 if any failed
#                                    (the failed runs' output is kept in target/soak/freeze-N.log)
#
# Starts its own control plane, the host (SOAK_HOST, else the release build if present, else a
# debug build) with the podset plugin, then until the time is up: every few seconds
# creates PodSets, scales others and deletes old ones (their Pods removed as the garbage collector
# would), and every minute reloads the plugin (a manifest change: a new version serves, queued
# keys are kept). Every 30 s it samples the host's RSS (VmRSS), open file descriptors and
# work-queue depth. The goal (issue #16): flat memory after warm-up, ≤ 5 % RSS growth over the
# last 20 minutes of a 30-minute run; the summary says whether it was met and exits 1 if not.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if [ "${1:-}" = freeze ]; then
  runs=${2:-10}
  [[ $runs =~ ^[0-9]+$ ]] && [ "$runs" -ge 1 ] || { echo "usage: $0 freeze [RUNS]" >&2; exit 2; }
  ./scripts/setup.sh >/dev/null
  # The plugins the tests' deploy/ packs (podset is the one they run).
  ./scripts/build-plugins.sh podset replicaset namespace-config webapp >/dev/null
  cargo build -p wasmloop --bin wasmloop --locked >/dev/null
  cargo test -p wasmloop-tests --test freeze --locked --no-run >/dev/null 2>&1
  out=${CARGO_TARGET_DIR:-$root/target}/soak
  mkdir -p "$out"
  cp_dir=$(./scripts/control-plane.sh start)
  trap './scripts/control-plane.sh stop "$cp_dir" >/dev/null 2>&1 || true' EXIT
  export WASMLOOP_TEST_KUBECONFIG=$cp_dir/kubeconfig
  export WASMLOOP_PLUGIN_DIR=${WASMLOOP_PLUGIN_DIR:-$root/target/wasm32-wasip2/plugin}
  passed=0
  for i in $(seq 1 "$runs"); do
    log=$out/freeze-$i.log
    if cargo test -p wasmloop-tests --test freeze --locked -- --test-threads 1 --nocapture >"$log" 2>&1; then
      passed=$((passed + 1)); rm -f "$log"
      echo "soak freeze: run $i passed" >&2
    else
      echo "soak freeze: run $i FAILED (output: $log)" >&2
    fi
  done
  echo "soak freeze: $passed of $runs runs passed (each: the sharded and the leader scenario)"
  [ "$passed" = "$runs" ]
  exit
fi

minutes=${1:-30}
[[ $minutes =~ ^[0-9]+$ ]] && [ "$minutes" -ge 1 ] || { echo "usage: $0 [MINUTES]" >&2; exit 2; }

./scripts/setup.sh >/dev/null
./scripts/build-plugins.sh podset >/dev/null
target_dir=${CARGO_TARGET_DIR:-$root/target}
host=${SOAK_HOST:-$target_dir/release/wasmloop}
[ -x "$host" ] || { cargo build -p wasmloop --bin wasmloop >/dev/null; host=$target_dir/debug/wasmloop; }
echo "soak: host binary $host" >&2
kubectl=$(./scripts/control-plane.sh bin kubectl)
out=$target_dir/soak
mkdir -p "$out"
# A copy: a rebuild of the plugin during the run would be a new version (a compile), not churn.
plugin=$out/podset.wasm
cp "$target_dir/wasm32-wasip2/plugin/podset.wasm" "$plugin"
csv=$out/samples.csv
cp_dir=$(./scripts/control-plane.sh start)
host_pid=""
cleanup() {
  [ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null || true
  ./scripts/control-plane.sh stop "$cp_dir" >/dev/null 2>&1 || true
}
trap cleanup EXIT
export KUBECONFIG=$cp_dir/kubeconfig
k() { "$kubectl" "$@"; }

ns=soak
k create namespace "$ns" >/dev/null
k apply -f deploy/crds/podset.yaml >/dev/null
k wait --for condition=established --timeout=60s crd/podsets.wasmloop.dev >/dev/null
manifest() { # resync value: changing it reloads the plugin (same component, new manifest)
  cat <<EOF
name: podset
namespace: $ns
concurrency: 2
resync: $1
grants:
  - kinds: ["wasmloop.dev/v1alpha1/PodSet"]
    verbs: [read, update-status, event]
  - kinds: ["v1/Pod"]
    verbs: [read, create, delete, patch]
EOF
}
reload() {
  manifest "$1" >"$out/podset.plugin.yaml"
  "$host" pack "$plugin" --manifest "$out/podset.plugin.yaml" --namespace "$ns" 2>/dev/null | k apply -f - >/dev/null
}
reload 10h

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$host" run --plugin-namespace "$ns" --listen "127.0.0.1:$port" --log-format json \
  --precompiled-dir "$out/precompiled" 2>"$out/host.log" &
host_pid=$!
for _ in $(seq 1 120); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.5; done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { tail -20 "$out/host.log" >&2; echo "soak: the host never became ready" >&2; exit 1; }

podset() { # name replicas
  k apply -f - >/dev/null <<EOF
apiVersion: wasmloop.dev/v1alpha1
kind: PodSet
metadata: {name: $1, namespace: $ns}
spec:
  replicas: $2
  template:
    metadata: {labels: {app: $1}}
    spec: {containers: [{name: c, image: registry.invalid/none:1}]}
EOF
}

echo "elapsed_s,rss_kib,fds,queue_depth,podsets,pods" >"$csv"
sample() {
  local rss fds depth sets pods
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$host_pid/status")
  fds=$(find "/proc/$host_pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
  depth=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '$1 ~ /^workqueue_depth\{name="podset"\}/ {print $2}')
  sets=$(k -n "$ns" get podsets -o name | wc -l)
  pods=$(k -n "$ns" get pods -o name | wc -l)
  echo "$1,$rss,$fds,${depth:-0},$sets,$pods" >>"$csv"
  echo "soak: ${1}s rss ${rss} KiB, fds $fds, queue ${depth:-0}, podsets $sets, pods $pods" >&2
}

start=$(date +%s)
end=$((start + minutes * 60))
next_sample=$start
next_reload=$((start + 60))
i=0
resync=10h
while [ "$(date +%s)" -lt "$end" ]; do
  kill -0 "$host_pid" 2>/dev/null || { tail -20 "$out/host.log" >&2; echo "soak: the host exited" >&2; exit 1; }
  now=$(date +%s)
  if [ "$now" -ge "$next_sample" ]; then sample $((now - start)); next_sample=$((next_sample + 30)); fi
  if [ "$now" -ge "$next_reload" ]; then
    resync=$([ "$resync" = 10h ] && echo 9h || echo 10h)
    reload "$resync"
    next_reload=$((next_reload + 60))
  fi
  # Churn: a new PodSet, a scale of a recent one, and the delete of an old one (and its Pods).
  podset "s$i" $((1 + i % 3))
  [ $i -ge 3 ] && podset "s$((i - 3))" $((1 + (i + 1) % 4))
  if [ $i -ge 20 ]; then
    k -n "$ns" delete podset "s$((i - 20))" --wait=false >/dev/null
    k -n "$ns" delete pods -l "app=s$((i - 20))" --wait=false >/dev/null
  fi
  i=$((i + 1))
  sleep 2
done
sample $(($(date +%s) - start))

python3 - "$csv" "$minutes" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]))]
minutes = int(sys.argv[2])
def at(sec):
    return min(rows, key=lambda r: abs(int(r["elapsed_s"]) - sec))
first, last = rows[0], rows[-1]
ten = at(600) if minutes >= 10 else last
warm = at(max(0, (minutes - 20) * 60))
growth = (int(last["rss_kib"]) - int(warm["rss_kib"])) / int(warm["rss_kib"]) * 100
print(f"soak: {minutes} min, {len(rows)} samples")
print(f"soak: RSS first {int(first['rss_kib'])/1024:.1f} MiB, at {int(ten['elapsed_s'])//60} min {int(ten['rss_kib'])/1024:.1f} MiB, "
      f"at the end {int(last['rss_kib'])/1024:.1f} MiB; fds {first['fds']} -> {last['fds']}; queue depth at the end {last['queue_depth']}")
window = "the last 20 minutes" if minutes >= 30 else f"from {warm['elapsed_s']} s"
print(f"soak: RSS growth over {window}: {growth:+.1f} % (goal <= 5 %)")
sys.exit(0 if growth <= 5 else 1)
PY

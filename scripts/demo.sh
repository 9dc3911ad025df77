#!/usr/bin/env bash
# The wasmloop demo, from a clean clone:
#   local control plane up → host built and running → podset plugin loaded from a ConfigMap →
#   example PodSets reconciled → result shown with kubectl → scale, hot-swap, clean up.
#
#   ./scripts/demo.sh          run the demo and stop everything at the end
#   ./scripts/demo.sh --keep   leave the control plane and the host running (prints how to stop)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=0; [ "${1:-}" = "--keep" ] && keep=1
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "setup (toolchain, etcd, kube-apiserver v1.20.2; cached after the first run)"
./scripts/setup.sh

step "building the host and the example plugins"
cargo build -q -p wasmloop --bin wasmloop
./scripts/build-plugins.sh podset >/dev/null
wasm=target/wasm32-wasip2/plugin/podset.wasm
./target/debug/wasmloop inspect "$wasm" | sed -n '1,6p'

step "starting a local control plane"
dir=$(./scripts/control-plane.sh start)
export KUBECONFIG=$dir/kubeconfig
kubectl=$(./scripts/control-plane.sh bin kubectl)
host_pid=
cleanup() {
  [ -n "$host_pid" ] && kill "$host_pid" 2>/dev/null && wait "$host_pid" 2>/dev/null || true
  ./scripts/control-plane.sh stop "$dir" >/dev/null 2>&1 || true
}
if [ "$keep" = 0 ]; then trap cleanup EXIT; fi

step "installing the PodSet CRD and the podset plugin with its RBAC (wasmloop pack --rbac | kubectl apply)"
$kubectl apply -f deploy/crds/podset.yaml
$kubectl wait --for condition=established crd/podsets.wasmloop.dev --timeout=60s >/dev/null
$kubectl create namespace wasmloop
# --rbac: the plugin writes as its own ServiceAccount (impersonated by the host), so its RBAC
# goes in with it; without it the plugin waits (ReadsNotAuthorized) and nothing is reconciled.
./target/debug/wasmloop pack "$wasm" --manifest deploy/plugins/podset.plugin.yaml --namespace wasmloop --rbac | $kubectl apply -f -

step "starting the host"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
./target/debug/wasmloop run --plugin-namespace wasmloop --listen "127.0.0.1:$port" \
  --precompiled-dir "$dir/precompiled" >"$dir/host.log" 2>&1 &
host_pid=$!
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
  kill -0 "$host_pid" 2>/dev/null || { tail -20 "$dir/host.log"; echo "demo: the host exited" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/readyz" >/dev/null || { tail -20 "$dir/host.log"; echo "demo: host not ready" >&2; exit 1; }
echo "host ready on :$port (log: $dir/host.log)"
echo "plugin status: $($kubectl -n wasmloop get configmap podset -o jsonpath='{.metadata.annotations.wasmloop\.dev/status}')"

wait_pods() { # namespace count
  for _ in $(seq 1 120); do
    [ "$($kubectl -n "$1" get pods --no-headers 2>/dev/null | wc -l)" = "$2" ] && return 0
    sleep 0.25
  done
  echo "demo: expected $2 pods in $1" >&2; $kubectl -n "$1" get pods; exit 1
}

step "creating two PodSets (web: 3, worker: 2)"
$kubectl apply -f deploy/examples/podsets.yaml
wait_pods shop 5
$kubectl -n shop get podsets,pods
echo "(Pods stay Pending: there is no kubelet in this control plane; the controller's job is done.)"

step "scaling web to 5 and worker to 1"
$kubectl -n shop patch podset web --type merge -p '{"spec":{"replicas":5}}'
$kubectl -n shop patch podset worker --type merge -p '{"spec":{"replicas":1}}'
wait_pods shop 6
sleep 1
$kubectl -n shop get podsets,pods

step "a broken plugin version is refused; the working one keeps serving"
{ printf '\0asm\r\0\1\0'; head -c 4096 /dev/urandom; } > "$dir/broken.wasm"   # a component header, then garbage
$kubectl -n wasmloop create configmap podset --from-file=plugin.wasm="$dir/broken.wasm" \
  --from-file=plugin.yaml=deploy/plugins/podset.plugin.yaml --dry-run=client -o yaml \
  | $kubectl label --local -f - wasmloop.dev/plugin=true -o yaml | $kubectl apply -f -
sleep 2
echo "plugin status: $($kubectl -n wasmloop get configmap podset -o jsonpath='{.metadata.annotations.wasmloop\.dev/status}')"
$kubectl -n wasmloop get events --field-selector reason=PluginRejected -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers 2>/dev/null | tail -1 \
  || $kubectl -n wasmloop get events | tail -2
$kubectl -n shop patch podset worker --type merge -p '{"spec":{"replicas":3}}'
wait_pods shop 8
echo "still reconciling with the last good version:"; $kubectl -n shop get podsets

step "metrics"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^(controller_runtime_reconcile_total|wasmloop_plugin_info|wasmloop_plugin_loads_total)' | head -8

if [ "$keep" = 1 ]; then
  step "left running"
  echo "export KUBECONFIG=$dir/kubeconfig   # kubectl: $kubectl"
  echo "stop: kill $host_pid; ./scripts/control-plane.sh stop $dir"
else
  step "done; stopping the host and the control plane"
fi

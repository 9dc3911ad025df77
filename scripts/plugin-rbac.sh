#!/usr/bin/env bash
# Regenerate deploy/rbac/plugins.yaml: the example plugins' RBAC, exactly what
#   wasmloop pack <plugin>.wasm --manifest deploy/plugins/<plugin>.plugin.yaml --name <plugin> \
#       --namespace wasmloop --rbac-only
# prints (tests/tests/cluster.rs checks the committed file is that). Run it after changing a
# manifest in deploy/plugins/. Builds the plugins and the host if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
plugins=(podset replicaset deployment namespace-config webapp)
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
plugin_dir=${WASMLOOP_PLUGIN_DIR:-$target_dir/wasm32-wasip2/plugin}
bin=${WASMLOOP_BIN:-$target_dir/debug/wasmloop}
for p in "${plugins[@]}"; do
  [ -f "$plugin_dir/${p//-/_}.wasm" ] || ./scripts/build-plugins.sh "$p" >&2
done
[ -x "$bin" ] || cargo build -q -p wasmloop >&2
out=deploy/rbac/plugins.yaml
tmp=$(mktemp)
sed -n '/^# podset$/q;p' "$out" >"$tmp"   # the header, kept as written
for p in "${plugins[@]}"; do
  echo "# $p" >>"$tmp"
  "$bin" pack "$plugin_dir/${p//-/_}.wasm" --manifest "deploy/plugins/$p.plugin.yaml" --name "$p" \
    --namespace wasmloop --rbac-only >>"$tmp"
done
mv "$tmp" "$out"
echo "plugin-rbac: wrote $out" >&2

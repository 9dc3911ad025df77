#!/usr/bin/env bash
# Build the misbehaving (and one well-behaved) test plugins the sandbox tests load
# (tests/tests/sandbox.rs). Output: $CARGO_TARGET_DIR (default <workspace>/target)
# /wasm32-wasip2/plugin/<name>.wasm, where the tests look unless WASMLOOP_PLUGIN_DIR is set.
#
#   scripts/build-test-plugins.sh            # all test plugins
#   scripts/build-test-plugins.sh echo panic # some of them
set -euo pipefail

cd "$(dirname "$0")/.."
ALL=(echo spin-loop memory-bomb panic bad-action read-outside-grant write-outside-grant wrong-version sandbox-probe hostile contract-v0-1 widget greedy role-binder)
PLUGINS=("${@:-${ALL[@]}}")

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi

args=()
for p in "${PLUGINS[@]}"; do args+=(-p "$p"); done
cargo build --target wasm32-wasip2 --profile plugin "${args[@]}"

out="${CARGO_TARGET_DIR:-target}/wasm32-wasip2/plugin"
for p in "${PLUGINS[@]}"; do
  f="$out/${p//-/_}.wasm"
  [ -f "$f" ] || { echo "build-test-plugins: $f was not produced" >&2; exit 1; }
  echo "$f $(stat -c %s "$f") bytes"
done

# podset v2 (feature `v2`): a visibly different version for the hot-reload tests. Cargo writes
# every build to podset.wasm, so build the variants first, keep copies, then restore the normal build.
cargo build --target wasm32-wasip2 --profile plugin -p podset --features v2
cp "$out/podset.wasm" "$out/podset_v2.wasm"
echo "$out/podset_v2.wasm $(stat -c %s "$out/podset_v2.wasm") bytes"
# podset off-by-one (feature `off-by-one`): a faulty candidate for the shadow-version tests.
cargo build --target wasm32-wasip2 --profile plugin -p podset --features off-by-one
cp "$out/podset.wasm" "$out/podset_off_by_one.wasm"
cargo build --target wasm32-wasip2 --profile plugin -p podset
echo "$out/podset_off_by_one.wasm $(stat -c %s "$out/podset_off_by_one.wasm") bytes"

# widget v2 (feature `v2`): reconciles the CRD's second version, for the upgrade in
# tests/tests/lifecycle.rs. Built only when widget is (all test plugins, or widget named).
if [[ " ${PLUGINS[*]} " == *" widget "* ]]; then
  cargo build --target wasm32-wasip2 --profile plugin -p widget --features v2
  cp "$out/widget.wasm" "$out/widget_v2.wasm"
  cargo build --target wasm32-wasip2 --profile plugin -p widget
  echo "$out/widget_v2.wasm $(stat -c %s "$out/widget_v2.wasm") bytes"
fi

# greedy's variants (features `huge-selector`, `indexes`): each declares another kind of excess,
# for tests/tests/budgets.rs. Built only when greedy is.
if [[ " ${PLUGINS[*]} " == *" greedy "* ]]; then
  for feature in huge-selector indexes; do
    cargo build --target wasm32-wasip2 --profile plugin -p greedy --features "$feature"
    cp "$out/greedy.wasm" "$out/greedy_${feature//-/_}.wasm"
    echo "$out/greedy_${feature//-/_}.wasm $(stat -c %s "$out/greedy_${feature//-/_}.wasm") bytes"
  done
  cargo build --target wasm32-wasip2 --profile plugin -p greedy
fi

#!/usr/bin/env bash
# Build the example plugins as WebAssembly components (wasm32-wasip2, profile `plugin`) and
# print each one's path and size (raw, and zstd -19 when the zstd CLI is installed).
#
#   scripts/build-plugins.sh [PLUGIN...]
#       default: podset replicaset deployment namespace-config webapp cronjob namespace-config-ts namespace-config-py
#
# A plugin whose directory has a package.json is TypeScript/JavaScript (`npm run build` with the
# SDK's wasmloop-js: QuickJS), one with a pyproject.toml and src/plugin.py is Python
# (`python -m wasmloop_sdk.build`: componentize-py); both with the toolchains that
# scripts/polyglot-env.sh installs. Their components go next to the Rust ones
# (<target>/wasm32-wasip2/plugin/<name with _>.wasm).
#
# The size-first Rust plugins are then made smaller by `wasmloop optimize` (Binaryen's wasm-opt
# on their core modules, checked to be the same plugin to the host) when wasm-opt is installed
# (scripts/setup.sh installs it); the wasmloop binary is $WASMLOOP_BIN, else built with cargo.
# WASMLOOP_OPTIMIZE=0 skips the step.
#
# Honours CARGO_TARGET_DIR. Extra cargo flags go in CARGO_FLAGS (e.g. CARGO_FLAGS=--locked).
set -euo pipefail

cd "$(dirname "$0")/.."
TARGET=wasm32-wasip2
PROFILE=plugin
plugins=("$@")
[ ${#plugins[@]} -gt 0 ] || plugins=(podset replicaset deployment namespace-config webapp cronjob namespace-config-ts namespace-config-py)
rust=(); other=()
for p in "${plugins[@]}"; do
  if [ -f "plugins/$p/package.json" ] || [ -f "plugins/$p/pyproject.toml" ]; then other+=("$p"); else rust+=("$p"); fi
done

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  echo "build-plugins: adding the $TARGET target" >&2
  rustup target add "$TARGET"
fi

# The profile optimises for size (opt-level "z"); the plugins the benchmarks race against
# kube-controller-manager and native Rust are built for speed (opt-level 3) in a second
# invocation: replicaset's reconciles take 25-37% less CPU than at "s" (BENCHMARKS.md section 2's
# criterion bench, alternating builds in one session) for 346 KB instead of 314 KB. deployment is
# raced the same way (BENCHMARKS.md's rollout race).
speed=" replicaset deployment "
small=(); fast=()
for p in "${rust[@]}"; do
  if [[ $speed == *" $p "* ]]; then fast+=(-p "$p"); else small+=(-p "$p"); fi
done
# shellcheck disable=SC2086
[ ${#small[@]} -eq 0 ] || cargo build --target "$TARGET" --profile "$PROFILE" "${small[@]}" ${CARGO_FLAGS:-}
# shellcheck disable=SC2086
[ ${#fast[@]} -eq 0 ] || CARGO_PROFILE_PLUGIN_OPT_LEVEL=3 cargo build --target "$TARGET" --profile "$PROFILE" "${fast[@]}" ${CARGO_FLAGS:-}

target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')}
out_dir=$target_dir/$TARGET/$PROFILE
mkdir -p "$out_dir"

if [ ${#small[@]} -gt 0 ] && [ "${WASMLOOP_OPTIMIZE:-1}" != 0 ]; then
  if command -v wasm-opt >/dev/null 2>&1; then
    wasmloop=${WASMLOOP_BIN:-}
    if [ -z "$wasmloop" ]; then
      # shellcheck disable=SC2086
      cargo build -q -p wasmloop --bin wasmloop ${CARGO_FLAGS:-}
      wasmloop=$target_dir/debug/wasmloop
    fi
    for ((i = 1; i < ${#small[@]}; i += 2)); do
      "$wasmloop" optimize "$out_dir/${small[i]//-/_}.wasm" >&2
    done
  else
    echo "build-plugins: wasm-opt not found (scripts/setup.sh installs Binaryen): the plugins are not optimised" >&2
  fi
fi

if [ ${#other[@]} -gt 0 ]; then
  # shellcheck source=scripts/polyglot-env.sh
  source scripts/polyglot-env.sh
  polyglot_setup
  for p in "${other[@]}"; do
    wasm=$out_dir/${p//-/_}.wasm
    if [ -f "plugins/$p/package.json" ]; then
      (cd "plugins/$p" && { [ ! -f tsconfig.json ] || npx --no-install tsc -p .; } && node ../../sdk/js/bin/wasmloop-js.mjs build -o "$wasm") >&2
    else
      (cd "plugins/$p" && PYTHONPATH="$PWD/../../sdk/python" "$WASMLOOP_PY" -m wasmloop_sdk.build --src src -o "$wasm") >&2
    fi
  done
fi

have_zstd=0
command -v zstd >/dev/null 2>&1 && have_zstd=1
printf '%-60s %10s %10s\n' "plugin" "bytes" "zstd-19"
for p in "${plugins[@]}"; do
  wasm=$out_dir/${p//-/_}.wasm
  [ -f "$wasm" ] || { echo "build-plugins: $wasm was not produced" >&2; exit 1; }
  raw=$(wc -c <"$wasm")
  if [ "$have_zstd" = 1 ]; then
    z=$(zstd -19 -q -c "$wasm" | wc -c)
  else
    z="-"
  fi
  printf '%-60s %10s %10s\n' "$wasm" "$raw" "$z"
done

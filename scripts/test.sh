#!/usr/bin/env bash
# Every test: unit tests, plugin builds, sandbox tests and end-to-end tests against a real
# kube-apiserver + etcd that this script starts (and stops) for the run.
# Works from a clean clone on a fresh machine: installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# A clean clone builds everything once: incremental caches (4 GB here) would only fill the disk.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
say() { echo "== test.sh [$(( $(date +%s) - start ))s] $*" >&2; }

say "setting up toolchain and control plane (cached after the first run)"
./scripts/setup.sh

say "style gates: rustfmt, clippy"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

say "monitoring rules: promtool check and unit tests (deploy/monitoring)"
promtool check rules deploy/monitoring/rules.yaml
promtool test rules deploy/monitoring/rules.test.yaml

# One rulebook (docs/architecture.md): the corpus of model/conformance is what wasmloop-model
# computes (checked here first, it is quick); the JavaScript and Python fakes run it in their unit
# tests below (test/conformance.test.js, tests/test_conformance.py), the host and the Rust fake in
# `cargo test --workspace` (admission::result::conformance, controller::conformance_tests,
# testing::conformance).
say "conformance corpus: the model's own check (model/conformance)"
cargo test --locked -p wasmloop-model --lib conformance

say "JavaScript/TypeScript and Python SDKs: unit tests (the conformance corpus too), types"
# shellcheck source=scripts/polyglot-env.sh
source ./scripts/polyglot-env.sh
(cd sdk/js && node --test test/ && npx --no-install tsc -p tsconfig.json)
for dir in plugins/*/; do
  if [ -f "$dir/package.json" ]; then (cd "$dir" && npm test); fi
done
PYTHONPATH="$PWD/sdk/python" "$WASMLOOP_PY" -m pytest -q sdk/python/tests plugins/*-py/tests

say "building plugins (wasm32-wasip2, and the TypeScript and Python ports)"
# Test plugins first: they rebuild podset with features, and build-plugins.sh leaves the
# optimised podset last.
./scripts/build-test-plugins.sh >/dev/null
./scripts/build-plugins.sh >/dev/null

say "building the host binary"
cargo build -p wasmloop --bin wasmloop --locked

# A static release build, assembled with umoci into target/image/oci; tests/tests/image.rs checks
# the layout. Its target dir is under ~/.cache (as the toolchains and control plane are): the
# static musl build of every dependency (~20 min cold on 2 cores) is reused by the next clone's run.
say "building the container image (scripts/image.sh)"
CARGO_TARGET_DIR="${WASMLOOP_IMAGE_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wasmloop/image-target}" ./scripts/image.sh

say "starting a control plane for this run"
dir=$(./scripts/control-plane.sh start)
trap './scripts/control-plane.sh stop "$dir" >/dev/null 2>&1 || true' EXIT
export WASMLOOP_TEST_KUBECONFIG="$dir/kubeconfig"
export WASMLOOP_PLUGIN_DIR="${WASMLOOP_PLUGIN_DIR:-$PWD/target/wasm32-wasip2/plugin}"

say "cargo test --workspace"
cargo test --workspace --locked "$@"

if [ -x scripts/bench.sh ]; then
  say "benchmark smoke pass (bench.sh --quick)"
  ./scripts/bench.sh --quick
fi
say "all tests passed"

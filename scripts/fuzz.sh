#!/usr/bin/env bash
# The longer fuzz run: every `fuzz_*` harness (the decoders of untrusted input: plugin
# manifests, packed ConfigMaps, plugin outcomes and metadata, label selectors, index paths,
# durations) in release mode, with a large budget per target. `./scripts/test.sh` runs the same
# harnesses with 256 cases each as part of `cargo test`.
#
#   scripts/fuzz.sh            100 000 cases per target
#   scripts/fuzz.sh 20000      that many cases per target
#   scripts/fuzz.sh 120s       each target for that many seconds (two run at once)
#
# Prints `fuzz <target>: N cases (A accepted) in T` per target. A failure is shrunk to a
# minimal input, printed, and its seed saved under <crate>/proptest-regressions/: commit that
# file, fix the decoder, and keep the input as a named regression test beside the harness.
set -euo pipefail
cd "$(dirname "$0")/.."
budget="${1:-100000}"
case "$budget" in
  *s) export WASMLOOP_FUZZ_SECONDS="${budget%s}"; unset WASMLOOP_FUZZ_CASES ;;
  *) export WASMLOOP_FUZZ_CASES="$budget"; unset WASMLOOP_FUZZ_SECONDS ;;
esac
[[ "${WASMLOOP_FUZZ_SECONDS:-$budget}" =~ ^[0-9]+$ ]] || { echo "usage: $0 [CASES | SECONDSs]" >&2; exit 2; }
log="${TMPDIR:-/tmp}/wasmloop-fuzz.log"
# Niced: the run is long and shares the machine.
set +e
nice -n 10 cargo test --release --locked -p wasmloop-model -p wasmloop --lib fuzz_ -- --nocapture --test-threads=2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
echo "== fuzz.sh: executions per target (budget $budget; log $log)"
grep -E '^fuzz [a-z-]+: ' "$log" | sort || true
exit "$status"

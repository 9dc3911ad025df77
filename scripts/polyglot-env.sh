#!/usr/bin/env bash
# The JavaScript/TypeScript and Python toolchains of the SDKs (sdk/js, sdk/python), pinned and
# cached under ~/.cache/wasmloop. Sourced by scripts/setup.sh, scripts/build-plugins.sh and
# scripts/test.sh; `polyglot_setup` installs what is missing (idempotent, quick when present):
#
#   - npm ci of sdk/js (componentize-qjs, typescript: sdk/js/package-lock.json) and of each
#     TypeScript plugin with a lockfile, npm's cache in ~/.cache/wasmloop/npm;
#   - a virtualenv with componentize-py, PyYAML and pytest at the versions sdk/python pins,
#     in ~/.cache/wasmloop/py-<hash of the pins>, pip's cache in ~/.cache/wasmloop/pip.
#
# After sourcing: WASMLOOP_PY (the venv's python), WASMLOOP_PY_BIN (its bin directory).

WASMLOOP_CACHE=${WASMLOOP_CACHE:-$HOME/.cache/wasmloop}
_polyglot_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The pins: sdk/python/pyproject.toml's build and testing extras.
_py_pins=$(sed -n 's/^\(build\|testing\) = \[\(.*\)\]$/\2/p' "$_polyglot_root/sdk/python/pyproject.toml" | tr -d '" ' | tr ',\n' '  ')
_py_hash=$(printf '%s' "$_py_pins" | sha256sum | cut -c1-12)
WASMLOOP_PY_VENV="$WASMLOOP_CACHE/py-$_py_hash"
WASMLOOP_PY_BIN="$WASMLOOP_PY_VENV/bin"
WASMLOOP_PY="$WASMLOOP_PY_BIN/python"
export WASMLOOP_CACHE WASMLOOP_PY_VENV WASMLOOP_PY_BIN WASMLOOP_PY

# npm ci in DIR unless its node_modules matches its lockfile already.
_npm_ci() {
  local dir=$1 stamp="$1/node_modules/.wasmloop-lock"
  if [ -f "$stamp" ] && cmp -s "$dir/package-lock.json" "$stamp"; then
    return 0
  fi
  (cd "$dir" && npm ci --no-audit --no-fund --cache "$WASMLOOP_CACHE/npm" --prefer-offline >/dev/null)
  cp "$dir/package-lock.json" "$stamp"
}

polyglot_setup() {
  local started=$SECONDS
  command -v node >/dev/null 2>&1 || { echo "polyglot-env: node (>= 20) and npm are needed for the JavaScript SDK" >&2; return 1; }
  command -v python3 >/dev/null 2>&1 || { echo "polyglot-env: python3 (>= 3.11) is needed for the Python SDK" >&2; return 1; }
  mkdir -p "$WASMLOOP_CACHE"
  _npm_ci "$_polyglot_root/sdk/js"
  local lock
  for lock in "$_polyglot_root"/plugins/*/package-lock.json; do
    [ -f "$lock" ] && _npm_ci "$(dirname "$lock")"
  done
  if [ ! -x "$WASMLOOP_PY_BIN/componentize-py" ]; then
    rm -rf "$WASMLOOP_PY_VENV"
    python3 -m venv "$WASMLOOP_PY_VENV"
    # shellcheck disable=SC2086
    "$WASMLOOP_PY_BIN/pip" install -q --cache-dir "$WASMLOOP_CACHE/pip" $_py_pins
  fi
  echo "polyglot-env: JavaScript and Python toolchains ready ($((SECONDS - started)) s)" >&2
}

#!/usr/bin/env bash
# Installs what building and testing wasmloop needs on a fresh machine (idempotent, quick when
# everything is there): the wasm32-wasip2 Rust target, rustfmt and clippy, zstd, and the test control plane
# (etcd + kube-apiserver/kube-controller-manager/kubectl v1.20.2, built once and cached).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
# The style gates of scripts/test.sh.
for component in rustfmt clippy; do
  rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done
if ! command -v zstd >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zstd >/dev/null; fi
fi
./scripts/control-plane.sh build

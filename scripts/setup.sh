#!/usr/bin/env bash
# Installs what building and testing wasmloop needs on a fresh machine (idempotent, quick when
# everything is there): the wasm32-wasip2 and musl Rust targets, rustfmt and clippy, zstd,
# Binaryen's wasm-opt (scripts/build-plugins.sh shrinks the plugins with `wasmloop optimize`), what
# scripts/image.sh needs (umoci, musl-tools, binutils, jq), Debian's prometheus (promtool for the
# monitoring rules' tests, prometheus for tests/tests/monitoring.rs), and the test control plane
# (etcd + kube-apiserver/kube-controller-manager/kubectl v1.20.2, built once and cached), and the
# JavaScript and Python SDKs' toolchains (scripts/polyglot-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
# The style gates of scripts/test.sh.
for component in rustfmt clippy; do
  rustup component list --installed | grep -q "^$component" || rustup component add "$component"
done
# Debian packages, by the command each provides: zstd; wasm-opt; for scripts/image.sh (the container image,
# built without a container engine) umoci, musl-gcc for the static binary's C parts, readelf, jq;
# promtool and prometheus (deploy/monitoring: the rules' unit tests, and tests/tests/monitoring.rs);
# docker-registry and htpasswd (scripts/registry.sh: the OCI tests' registry, TLS + basic auth).
missing=()
for pair in zstd:zstd wasm-opt:binaryen umoci:umoci musl-gcc:musl-tools readelf:binutils jq:jq promtool:prometheus docker-registry:docker-registry htpasswd:apache2-utils; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The image's static binary (scripts/image.sh).
case "$(uname -m)" in
  x86_64) musl=x86_64-unknown-linux-musl ;;
  aarch64) musl=aarch64-unknown-linux-musl ;;
  *) musl= ;;
esac
if [ -n "$musl" ] && ! rustup target list --installed | grep -qx "$musl"; then
  rustup target add "$musl"
fi
# The JavaScript/TypeScript and Python SDKs' toolchains (componentize-qjs, typescript,
# componentize-py, pytest: pinned by sdk/js/package-lock.json and sdk/python/pyproject.toml),
# cached under ~/.cache/wasmloop.
# shellcheck source=scripts/polyglot-env.sh
source ./scripts/polyglot-env.sh
polyglot_setup
./scripts/control-plane.sh build

#!/usr/bin/env bash
# Builds the host's container image without a container engine or daemon:
#
#   ./scripts/image.sh [OUT_DIR]      # default OUT_DIR: target/image/oci
#
# 1. a static (musl) release binary of `wasmloop`, built like the Dockerfile builds it
#    (musl-gcc for the C parts, symbols stripped, 4 codegen units; no LTO), in target/image;
# 2. an OCI image layout at OUT_DIR, tagged with the host's version (host/Cargo.toml), assembled
#    with umoci: one layer (written here with GNU tar: fixed mtime, numeric owners) holding
#    /usr/local/bin/wasmloop and the empty directories /tmp and /var/cache/wasmloop (owned by
#    65532), and the Dockerfile's config: ENTRYPOINT /usr/local/bin/wasmloop, CMD run, USER
#    65532:65532, its environment and port.
#
# Unlike the Dockerfile's distroless base, the image has no CA bundle and no /etc/passwd: the
# in-cluster client trusts the ServiceAccount's ca.crt, and the user is numeric.
# Needs: umoci, musl-tools, binutils, jq (apt-get install umoci musl-tools binutils jq) and the musl Rust
# target (added here). Load the result somewhere with e.g.
#   skopeo copy oci:target/image/oci:0.1.0 docker://<registry>/wasmloop:0.1.0
# tests/tests/image.rs checks the layout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=${1:-target/image/oci}
case "$out" in /*) ;; *) out="$root/$out" ;; esac
say() { echo "== image.sh: $*" >&2; }
die() { echo "image.sh: $*" >&2; exit 1; }

case "$(uname -m)" in
  x86_64) target=x86_64-unknown-linux-musl arch=amd64 ;;
  aarch64) target=aarch64-unknown-linux-musl arch=arm64 ;;
  *) die "unsupported machine $(uname -m) (x86_64 and aarch64 are)" ;;
esac
command -v umoci >/dev/null || die "umoci is missing: install it (Debian/Ubuntu: apt-get install umoci; or https://github.com/opencontainers/umoci/releases)"
command -v musl-gcc >/dev/null || die "musl-gcc is missing (it compiles the C parts: ring, zstd): apt-get install musl-tools"
command -v readelf >/dev/null || die "readelf is missing: apt-get install binutils"
command -v jq >/dev/null || die "jq is missing: apt-get install jq"
if ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi

version=$(cargo pkgid -p wasmloop)
version=${version##*[#@]}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || die "could not read the version of the wasmloop crate (got '$version')"
# Timestamps in the layer and the config come from the last commit, so that a rebuild of the
# same sources gives the same layer.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)

say "building wasmloop $version for $target (release, static)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/image}"
env_cc="CC_${target//-/_}"
export "$env_cc=musl-gcc"
export CARGO_PROFILE_RELEASE_STRIP=symbols CARGO_PROFILE_RELEASE_CODEGEN_UNITS=4
build_start=$(date +%s)
cargo build --release --locked -p wasmloop --bin wasmloop --target "$target"
bin="$CARGO_TARGET_DIR/$target/release/wasmloop"
say "binary built in $(( $(date +%s) - build_start ))s"
# The image has no libc and no loader: a NEEDED entry or an interpreter would not run there.
# (`ldd` is no check: it calls a static-pie binary "statically linked" and exits 0.)
if readelf -dW "$bin" | grep -q '(NEEDED)' || readelf -lW "$bin" | grep -q INTERP; then
  readelf -lW -dW "$bin" >&2
  die "$bin is not statically linked"
fi
if [ "$(uname -m)" = "${target%%-*}" ]; then
  "$bin" --version >/dev/null || die "$bin --version failed"
fi

say "assembling the OCI layout $out:$version (umoci $(umoci --version | awk '{print $3}'))"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
install -d -m 0755 "$rootfs/usr/local/bin" "$rootfs/var/cache/wasmloop"
install -d -m 1777 "$rootfs/tmp"
install -m 0755 "$bin" "$rootfs/usr/local/bin/wasmloop"
# ustar, sorted, fixed mtime, numeric owners: root for everything but the cache directory.
tar_opts=(--format=ustar --numeric-owner --no-recursion --mtime="@$epoch" -C "$rootfs")
tar --create --file="$work/layer.tar" --owner=0 --group=0 "${tar_opts[@]}" \
  tmp usr usr/local usr/local/bin usr/local/bin/wasmloop var var/cache
tar --append --file="$work/layer.tar" --owner=65532 --group=65532 "${tar_opts[@]}" var/cache/wasmloop

image="$out:$version"
if [ ! -e "$out/oci-layout" ]; then
  mkdir -p "$(dirname "$out")"
  umoci init --layout "$out"
elif umoci ls --layout "$out" | grep -qxF "$version"; then
  umoci rm --image "$image"
fi
umoci new --image "$image"
umoci raw add-layer --image "$image" --history.created "$created" \
  --history.created_by "scripts/image.sh: /usr/local/bin/wasmloop (static, $target)" "$work/layer.tar"
umoci config --image "$image" --created "$created" --history.created "$created" \
  --history.created_by "scripts/image.sh: entrypoint, user, environment" \
  --os linux --architecture "$arch" \
  --config.entrypoint /usr/local/bin/wasmloop --config.cmd run \
  --config.user 65532:65532 \
  --config.env PATH=/usr/local/bin \
  --config.env WASMLOOP_PRECOMPILED_DIR=/var/cache/wasmloop \
  --config.env WASMLOOP_LOG_FORMAT=json \
  --config.env WASMLOOP_LISTEN=0.0.0.0:8080 \
  --config.exposedports 8080/tcp \
  --config.label org.opencontainers.image.title=wasmloop \
  --config.label "org.opencontainers.image.description=Kubernetes controller host that runs reconcile logic as sandboxed WebAssembly plugins" \
  --config.label org.opencontainers.image.licenses=Apache-2.0 \
  --config.label org.opencontainers.image.source=https://github.com/wasmloop/wasmloop \
  --config.label "org.opencontainers.image.version=$version" \
  --config.label "org.opencontainers.image.revision=$revision"
# Blobs of earlier builds of this tag.
umoci gc --layout "$out"

# Sizes: the binary; the image as a registry stores it and a node pulls it (manifest + config +
# gzip layer), and uncompressed.
manifest=$(jq -r --arg tag "$version" \
  '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $tag) | .digest' "$out/index.json")
blob() { echo "$out/blobs/${1/://}"; }
image_size=$(jq --arg m "$(stat -c %s "$(blob "$manifest")")" '($m | tonumber) + .config.size + ([.layers[].size] | add)' "$(blob "$manifest")")
layer_size=$(stat -c %s "$work/layer.tar")
bin_size=$(stat -c %s "$bin")
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
echo "wasmloop $version ($target): binary $bin_size bytes ($(mb "$bin_size")); image $image: $image_size bytes ($(mb "$image_size")) compressed, $(mb "$layer_size") unpacked; built in $(( $(date +%s) - build_start ))s"

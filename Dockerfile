# syntax=docker/dockerfile:1.7
#
# The wasmloop host: a static (musl) binary on distroless/static, running as non-root (65532).
#
#   docker build -t ghcr.io/wasmloop/wasmloop:0.1.0 .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/wasmloop/wasmloop:0.1.0 --push .
#
# Each platform is compiled natively (under emulation for a foreign one): the C parts (ring,
# zstd) are compiled with the platform's musl-gcc, which keeps the Dockerfile free of cross
# toolchains. The image holds no plugins: they arrive in ConfigMaps (deploy/, docs/operations.md).
# For production pin both base images by digest (`FROM image@sha256:...`).

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl ;; \
      arm64) echo aarch64-unknown-linux-musl ;; \
      *) echo "unsupported TARGETARCH ${TARGETARCH}" >&2; exit 1 ;; \
    esac >/rust-target \
 && rustup target add "$(cat /rust-target)"
# musl targets link statically (crt-static is their default); the C dependencies must be built
# against musl too.
ENV CC_x86_64_unknown_linux_musl=musl-gcc \
    CC_aarch64_unknown_linux_musl=musl-gcc \
    CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=4
WORKDIR /src
# The whole workspace (cargo needs every member's manifest); .dockerignore keeps target/ out.
COPY . .
# target/ is a cache mount, so the binary is copied out in the same step. A dynamically linked
# result (a NEEDED entry) is refused: the runtime image has no libc.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    target="$(cat /rust-target)" \
 && cargo build --release --locked -p wasmloop --target "$target" \
 && mkdir -p /out/cache \
 && cp "target/$target/release/wasmloop" /out/wasmloop \
 && if readelf -d /out/wasmloop | grep -q NEEDED; then readelf -d /out/wasmloop; echo "wasmloop is not static" >&2; exit 1; fi \
 && /out/wasmloop --version

# distroless/static: no shell, no package manager, no libc; CA certificates and /etc/passwd with
# the "nonroot" user (65532) only.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="wasmloop" \
      org.opencontainers.image.description="Kubernetes controller host that runs reconcile logic as sandboxed WebAssembly plugins" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/wasmloop/wasmloop"
COPY --from=build /out/wasmloop /usr/local/bin/wasmloop
# Precompiled plugins (native code) are cached here; in the Deployment an emptyDir is mounted
# on it, because the root filesystem is read-only.
COPY --from=build --chown=65532:65532 /out/cache /var/cache/wasmloop
ENV WASMLOOP_PRECOMPILED_DIR=/var/cache/wasmloop \
    WASMLOOP_LOG_FORMAT=json \
    WASMLOOP_LISTEN=0.0.0.0:8080
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/wasmloop"]
CMD ["run"]

# syntax=docker/dockerfile:1
#
# The hyperplug manager image: one static (musl) binary, the bundled Proxmox plugin at
# /plugins/proxmox.wasm, nothing else; runs as the distroless `nonroot` user (65532).
#
#   docker build -t ghcr.io/hyperplug/hyperplug:v0.1.0 .
#
# The Deployment in deploy/manager.yaml runs
#   /hyperplug run --plugin=/plugins/proxmox.wasm --plugin-cache=/var/cache/hyperplug ...
# with a writable emptyDir at /var/cache/hyperplug (the root filesystem is read-only).
# Builds for the platform it runs on (amd64 or arm64); use buildx per platform.

ARG RUST_VERSION=1.95

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-wasip2 "$(uname -m)-unknown-linux-musl"
WORKDIR /src
# Only what the workspace needs to build (every member's manifest must be present).
COPY Cargo.toml Cargo.lock ./
COPY wit wit
COPY host host
COPY guest-kit guest-kit
COPY guest-proxmox guest-proxmox
COPY guest-redfish guest-redfish
COPY guest-nocloud guest-nocloud
COPY tests tests
COPY scripts scripts
COPY plugins/README.md plugins/README.md
ENV CARGO_TARGET_DIR=/src/target
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    target="$(uname -m)-unknown-linux-musl"; \
    bash scripts/build-plugins.sh; \
    cargo build --release --locked -p hyperplug --bin hyperplug --target "$target"; \
    install -D -m 0755 "target/$target/release/hyperplug" /out/hyperplug; \
    install -D -m 0644 plugins/proxmox.wasm /out/plugins/proxmox.wasm; \
    # Refuse a dynamically linked binary: the runtime image has no libc.
    if readelf -d /out/hyperplug | grep -q '(NEEDED)'; then readelf -d /out/hyperplug; exit 1; fi; \
    # The binary loads the plugin it ships with.
    /out/hyperplug inspect --no-plugin-cache /out/plugins/proxmox.wasm; \
    mkdir -p /out/cache

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="hyperplug" \
      org.opencontainers.image.description="Cluster API infrastructure provider with sandboxed WebAssembly plugins (bundled: Proxmox VE)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/hyperplug /hyperplug
COPY --from=build /out/plugins/proxmox.wasm /plugins/proxmox.wasm
COPY --from=build --chown=65532:65532 /out/cache /var/cache/hyperplug
ENV HYPERPLUG_PLUGIN_CACHE=/var/cache/hyperplug
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/hyperplug"]
CMD ["run", "--plugin=/plugins/proxmox.wasm"]

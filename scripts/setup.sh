#!/usr/bin/env bash
# Installs what building and testing hyperplug needs on a fresh machine that has Rust
# (rustup) and Go: the wasm32-wasip2 target, then the Go-built test world (etcd,
# kube-apiserver, Cluster API, IPAM, cert-manager; cached under ~/.cache/hyperplug).
# Idempotent and quick when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '[setup] %s\n' "$*" >&2; }

if ! rustc --print target-list >/dev/null 2>&1; then
  echo "Rust is not installed: see https://rustup.rs" >&2; exit 1
fi
sysroot=$(rustc --print sysroot)
if [ ! -d "$sysroot/lib/rustlib/wasm32-wasip2/lib" ]; then
  log "installing the wasm32-wasip2 target"
  if ! rustup target add wasm32-wasip2; then
    # rustup's server may be out of reach: fall back to the copy in ../shared.
    log "rustup could not install it; trying ../shared/toolchain"
    bash ../shared/toolchain/install-wasm32-wasip2.sh
  fi
fi
for component in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component" || true
done

command -v go >/dev/null || { echo "Go is not installed: see https://go.dev/dl" >&2; exit 1; }
log "building the test world from Go modules (first run: ~25 min on 2 cores; then seconds)"
bash scripts/build-tools.sh >/dev/null

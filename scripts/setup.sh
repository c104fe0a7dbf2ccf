#!/usr/bin/env bash
# Installs what building and testing hyperplug needs on a fresh machine that has Rust
# (rustup) and Go: the wasm32-wasip2 target, then the Go-built test world (etcd,
# kube-apiserver, Cluster API, IPAM, cert-manager; cached under ~/.cache/hyperplug), and
# sushy-tools (the Redfish BMC emulator) in a virtualenv there, and the fuzzing tools (a
# pinned nightly toolchain and cargo-fuzz). Idempotent and quick when everything is there.
#
# `--go-beside`: the Go builds go on in the background (see below).
# `--demo`: only what scripts/demo.sh needs before it builds (the wasm32-wasip2 target,
# and a check that Go is there): demo.sh builds the Go-built management cluster itself,
# beside its Rust builds. CAPMOX's manager, the OCI tools, sushy-tools and the fuzzing
# tools are for the tests, and scripts/test.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
demo=false beside=false
[ "${1:-}" = "--demo" ] && demo=true
[ "${1:-}" = "--go-beside" ] && beside=true

log() { printf '[setup] %s\n' "$*" >&2; }

if ! rustc --print target-list >/dev/null 2>&1; then
  echo "Rust is not installed: see https://rustup.rs" >&2; exit 1
fi
sysroot=$(rustc --print sysroot)
if [ ! -d "$sysroot/lib/rustlib/wasm32-wasip2/lib" ]; then
  log "installing the wasm32-wasip2 target"
  if ! rustup target add wasm32-wasip2; then
    # rustup's server may be out of reach: fall back to a copy beside the checkout
    # (../shared/toolchain, where this project's machines keep one), if there is one.
    fallback=../shared/toolchain/install-wasm32-wasip2.sh
    if [ ! -f "$fallback" ]; then
      echo "rustup could not install the wasm32-wasip2 target (see its error above): install it with 'rustup target add wasm32-wasip2' once rustup's server is reachable" >&2
      exit 1
    fi
    log "rustup could not install it; trying $fallback"
    bash "$fallback"
  fi
fi
command -v go >/dev/null || { echo "Go is not installed: see https://go.dev/dl" >&2; exit 1; }
if $demo; then
  exit 0
fi
for component in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$component" || rustup component add "$component" || true
done
# The test world from Go modules: the management cluster's programs, CAPMOX's manager
# (the takeover walk, tests/e2e), an OCI registry, oras and cosign (plugins pulled as
# signed OCI artifacts, host tests). First run: about 15 min on 2 cores; then seconds.
# `--go-beside`: in the background, so that the Rust builds that follow run beside it
# (scripts/test.sh); whatever needs the tools next runs build-tools.sh, which waits on
# its lock for this build and then finds everything built. Its output goes to
# $CACHE/build-tools.out.
if $beside; then
  cache="${HYPERPLUG_CACHE:-$HOME/.cache/hyperplug}"
  mkdir -p "$cache"
  log "building the test world from Go modules in the background (log: $cache/build-tools.out)"
  nohup bash scripts/build-tools.sh --all >/dev/null 2>"$cache/build-tools.out" &
  go_pid=$!
  # Let it take the lock first, so that a later run waits for it instead of racing it
  # (when everything is built it is done at once).
  for _ in $(seq 50); do
    kill -0 "$go_pid" 2>/dev/null || break
    flock -n "$cache/.build-tools.lock" true || break
    sleep 0.1
  done
else
  log "building the test world from Go modules (first run: about 15 min on 2 cores; then seconds)"
  bash scripts/build-tools.sh --all >/dev/null
fi

# The Redfish plugin's tests run the real sushy-tools emulator (`sushy-emulator --fake`).
# shellcheck source=tools.env
source scripts/tools.env
venv="$HOME/.cache/hyperplug/sushy-venv"
have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sushy-tools"))' 2>/dev/null || true)
if [ "$have" != "$SUSHY_TOOLS_VERSION" ]; then
  command -v python3 >/dev/null || { echo "Python 3 is not installed (needed for sushy-tools)" >&2; exit 1; }
  log "installing sushy-tools $SUSHY_TOOLS_VERSION into $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "sushy-tools==$SUSHY_TOOLS_VERSION"
fi

# Fuzzing (scripts/fuzz.sh, a short run in scripts/test.sh): cargo-fuzz builds libFuzzer
# targets with nightly-only flags, so a dated nightly (minimal profile, ~15 s to fetch)
# and cargo-fuzz itself, both kept under ~/.rustup and ~/.cargo. cargo-fuzz only starts
# cargo: built unoptimized (--debug), it takes half the CPU (37 s, 67 s optimized).
if ! rustup run "$FUZZ_TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  log "installing the $FUZZ_TOOLCHAIN toolchain (for cargo fuzz)"
  rustup toolchain install "$FUZZ_TOOLCHAIN" --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null | awk '{print $2}')" != "$CARGO_FUZZ_VERSION" ]; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked --quiet --debug
fi

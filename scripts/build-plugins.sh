#!/usr/bin/env bash
# Builds the plugin components (wasm32-wasip2) and puts them in plugins/.
# Test plugins (tests/*-plugin) are built too, into $CARGO_TARGET_DIR/wasm32-wasip2/release.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
guests=(guest-proxmox)
[ -d guest-redfish ] && guests+=(guest-redfish)
test_guests=(hostile-plugin wrong-wit-plugin sockets-plugin)
args=()
for g in "${guests[@]}" "${test_guests[@]}"; do args+=(-p "$g"); done
cargo build --quiet --release --target wasm32-wasip2 "${args[@]}"
mkdir -p plugins
for g in "${guests[@]}"; do
  name=${g#guest-}
  cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/${g//-/_}.wasm" "plugins/$name.wasm"
  echo "plugins/$name.wasm"
done

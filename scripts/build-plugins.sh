#!/usr/bin/env bash
# Builds the plugin components (wasm32-wasip2, and the Python plugin with
# componentize-py) and puts them in plugins/.
# The test plugins (tests/*-plugin) are built too; with `--test-out DIR` they are
# copied there as DIR/<name>.wasm (hostile, wrong-wit, sockets), with the hostile
# plugin's impersonating build as DIR/impostor.wasm.
# `--demo` builds only what scripts/demo.sh runs: plugins/proxmox.wasm.
set -euo pipefail
test_out=""
demo=false
if [ "${1:-}" = "--test-out" ]; then test_out=$2; fi
if [ "${1:-}" = "--demo" ]; then demo=true; fi
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
guests=(guest-proxmox)
test_guests=(hostile-plugin wrong-wit-plugin sockets-plugin)
if $demo; then
  test_guests=()
else
  [ -d guest-redfish ] && guests+=(guest-redfish)
fi
args=()
for g in "${guests[@]}" "${test_guests[@]}"; do args+=(-p "$g"); done
cargo build --quiet --release --target wasm32-wasip2 "${args[@]}"
mkdir -p plugins
for g in "${guests[@]}"; do
  name=${g#guest-}
  cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/${g//-/_}.wasm" "plugins/$name.wasm"
  echo "plugins/$name.wasm"
done
$demo && exit 0
# The Python Proxmox plugin (guest-proxmox-py), built with componentize-py.
bash scripts/build-python-plugin.sh
if [ -n "$test_out" ]; then
  mkdir -p "$test_out"
  for g in "${test_guests[@]}"; do
    cp "$CARGO_TARGET_DIR/wasm32-wasip2/release/${g//-/_}.wasm" "$test_out/${g%-plugin}.wasm"
  done
  # Its own target directory, so the two builds of the hostile plugin do not rebuild
  # each other every time.
  CARGO_TARGET_DIR="$CARGO_TARGET_DIR/impostor" \
    cargo build --quiet --release --target wasm32-wasip2 -p hostile-plugin --features impostor
  cp "$CARGO_TARGET_DIR/impostor/wasm32-wasip2/release/hostile_plugin.wasm" "$test_out/impostor.wasm"
fi

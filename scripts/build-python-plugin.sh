#!/usr/bin/env bash
# Builds the Python Proxmox plugin (guest-proxmox-py) into plugins/proxmox-py.wasm with
# componentize-py from PyPI (installed into a virtualenv under ~/.cache/hyperplug on
# first use). A no-op when the component is newer than its sources.
#
# The WIT it builds against is assembled here, not committed twice: hyperplug's 0.2
# package from wit/v0.2, and the WASI 0.2 packages (wasi:http and what it uses) from the
# `wasip2` crate the Rust plugins build with (cargo has it once they are built).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=tools.env
source scripts/tools.env
out=plugins/proxmox-py.wasm
sources=(guest-proxmox-py/app/*.py guest-proxmox-py/wit/world.wit wit/v0.2/provider.wit scripts/tools.env "$0")
fresh=1
[ -f "$out" ] || fresh=0
for s in "${sources[@]}"; do [ "$fresh" = 1 ] && [ "$s" -nt "$out" ] && fresh=0; done
if [ "$fresh" = 1 ]; then echo "$out"; exit 0; fi

venv="$HOME/.cache/hyperplug/componentize-py-venv"
have=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("componentize-py"))' 2>/dev/null || true)
if [ "$have" != "$COMPONENTIZE_PY_VERSION" ]; then
  command -v python3 >/dev/null || { echo "Python 3 is not installed (needed for componentize-py)" >&2; exit 1; }
  echo "[build-python-plugin] installing componentize-py $COMPONENTIZE_PY_VERSION into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION"
fi

wasip2=$(cargo metadata --format-version 1 --filter-platform wasm32-wasip2 2>/dev/null \
  | python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "wasip2"))')
wit=$(mktemp -d)
trap 'rm -rf "$wit"' EXIT
mkdir -p "$wit/deps/hyperplug"
cp guest-proxmox-py/wit/world.wit "$wit/"
cp wit/v0.2/provider.wit "$wit/deps/hyperplug/"
cp -r "$(dirname "$wasip2")/wit/deps/." "$wit/deps/"
mkdir -p plugins
"$venv/bin/componentize-py" -d "$wit" -w plugin componentize -p guest-proxmox-py/app app -o "$out.tmp" >/dev/null
mv "$out.tmp" "$out"
echo "$out"

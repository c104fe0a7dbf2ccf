#!/usr/bin/env bash
# Runs every test of hyperplug: installs what is missing (scripts/setup.sh), builds the
# plugins, then `cargo test` over the workspace (unit, runtime, hostile-plugin, simulator
# and real-API-server integration tests).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
bash scripts/setup.sh
bash scripts/build-plugins.sh
# The root's default-members are the native crates; plugins are tested through the host.
cargo test "$@"

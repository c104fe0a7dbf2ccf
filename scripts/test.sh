#!/usr/bin/env bash
# Runs every test of hyperplug: installs what is missing (scripts/setup.sh), builds the
# plugins, then `cargo test` over the workspace (unit, runtime, hostile-plugin, simulator
# and real-API-server integration tests, and the chaos run at CI size: tests/chaos, about
# a minute, its table of invariants in the log), then a smoke run of the scale benchmark
# and a short fuzz run (about 90 s).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
# Each step prints how long it took (CI's time is read from these lines).
timed() { local t=$SECONDS; "$@"; echo "== $* took $((SECONDS - t)) s" >&2; }
timed bash scripts/setup.sh
timed bash scripts/build-plugins.sh
# The root's default-members: the host and the test world, and natively the plugin kit
# and the bundled plugins' unit tests; the plugins' components are tested through the
# host (its integration tests load plugins/*.wasm).
if [ $# -gt 0 ]; then
    cargo test "$@"
else
    timed bash scripts/test-parallel.sh
fi
# The scale benchmark at its smallest (1 cluster × 2 machines, tiny task durations, debug
# build): asserts nothing about speed, only that it runs to the end and prints its table.
timed bash scripts/bench.sh --smoke
# A short fuzz run: the seed corpora's tests, then each cargo-fuzz target for 25 s from
# its seeds (fuzz/README.md; scripts/fuzz.sh --long for the longer run).
timed bash scripts/fuzz.sh --ci

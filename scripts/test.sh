#!/usr/bin/env bash
# Runs every test of hyperplug: installs what is missing (scripts/setup.sh), builds the
# plugins, then `cargo test` over the workspace (unit, runtime, hostile-plugin, simulator
# and real-API-server integration tests, and the chaos run at CI size: tests/chaos, about
# a minute, its table of invariants in the log) and a smoke run of the scale benchmark,
# with a short fuzz run beside them. Clippy lints the native crates as they are built for
# the tests: a warning fails the build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
# Each step prints how long it took (CI's time is read from these lines).
timed() {
    local t=$SECONDS status=0
    "$@" || status=$?
    echo "== $* took $((SECONDS - t)) s" >&2
    return "$status"
}
# The Go-built test world builds in the background, beside the Rust builds below;
# scripts/test-parallel.sh waits for it once the test executables are built.
timed bash scripts/setup.sh --go-beside
timed bash scripts/build-plugins.sh
# A short fuzz run (the seed corpora's tests, then every cargo-fuzz target for 25 s from
# its seeds; fuzz/README.md, scripts/fuzz.sh --long for the longer run) builds with its
# own toolchain into its own target directory and then runs for fixed times at the
# lowest priority: it goes on beside the tests.
fuzz_log="$(mktemp)"
export FAILURE_DIGEST="$(mktemp)"
trap 'rm -f "$fuzz_log" "$FAILURE_DIGEST"' EXIT
timed bash scripts/fuzz.sh --ci >"$fuzz_log" 2>&1 &
fuzz_pid=$!
# The root's default-members: the host and the test world, and natively the plugin kit
# and the bundled plugins' unit tests; the plugins' components are tested through the
# host (its integration tests load plugins/*.wasm). Among them the scale benchmark at its
# smallest (tests/scale-bench/tests/smoke.rs: 1 cluster × 2 machines, tiny task
# durations, debug build), which asserts nothing about speed, only that it runs to the
# end and prints its table.
status=0
if [ $# -gt 0 ]; then
    cargo test "$@" || status=$?
else
    timed bash scripts/test-parallel.sh || status=$?
fi
fuzz=0
wait "$fuzz_pid" || fuzz=$?
echo "== the fuzz run (beside the tests)"
cat "$fuzz_log"
# What the failed tests printed, last, where a log's tail shows it.
cat "$FAILURE_DIGEST"
if [ "$status" -ne 0 ] || [ "$fuzz" -ne 0 ]; then
    echo "failed:$([ "$status" -eq 0 ] || echo " tests")$([ "$fuzz" -eq 0 ] || echo " fuzzing")" >&2
    exit 1
fi

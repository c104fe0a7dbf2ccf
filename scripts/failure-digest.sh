#!/usr/bin/env bash
# The output of every failed test in the given `cargo test` logs, each cut to its first
# 30 lines: libtest prints it between "---- name stdout ----" and the "failures:" list.
set -euo pipefail
echo "== what the failed tests printed (first 30 lines each)"
awk '
    /^---- .* stdout ----$/ { inside = 1; lines = 0; print; next }
    /^failures:$/ || /^test result:/ { inside = 0 }
    inside && lines < 30 { print; lines++ }
' "$@"

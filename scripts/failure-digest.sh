#!/usr/bin/env bash
# What each failed test in the given `cargo test` logs printed, short: libtest prints it
# between "---- name stdout ----" and the "failures:" list. Of each, its first 10 lines
# and every panic's message (up to 15 lines, without the backtrace).
set -euo pipefail
echo "== what the failed tests printed (short)"
awk '
    /^---- .* stdout ----$/ { inside = 1; lines = 0; panic = 0; print; next }
    /^failures:$/ || /^test result:/ { inside = 0 }
    !inside { next }
    /^thread .* panicked at / { panic = 15; if (lines >= 10) print "[...]" }
    /^stack backtrace:$/ { panic = 0 }
    lines < 10 { print; lines++; if (panic) panic--; next }
    panic > 0 { print; panic-- }
' "$@"

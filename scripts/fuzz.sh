#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ (cargo fuzz, libFuzzer; fuzz/README.md describes them).
#
#   scripts/fuzz.sh --ci                  # what CI runs: the seeds' tests, then every target
#                                         # for 25 s at once from its seeds (fresh corpus
#                                         # every run)
#   scripts/fuzz.sh --long                # each target for 30 min, growing the corpus kept in
#                                         # ~/.cache/hyperplug/fuzz/corpus (minimized at the end)
#   scripts/fuzz.sh --seconds 600 pve_replies   # one target, any duration (kept corpus)
#   scripts/fuzz.sh --record              # write the committed seeds (fuzz/seeds) again:
#                                         # the same files on every run (stable Rust)
#
# Needs what scripts/setup.sh installs: a nightly toolchain (FUZZ_TOOLCHAIN) and cargo-fuzz
# (CARGO_FUZZ_VERSION), both pinned in scripts/tools.env. Builds with optimizations,
# debug assertions and overflow checks, without a sanitizer (the code under test is safe
# Rust; ASan made runs 10x slower): `FUZZ_SANITIZER=address` for a run with it.
# A crash fails the script, with the input saved under
# ~/.cache/hyperplug/fuzz/artifacts/<target>/ and the command that replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
# shellcheck source=tools.env
source scripts/tools.env

mode=custom seconds="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ci) mode=ci; seconds=${seconds:-25} ;;
    --long) mode=long; seconds=${seconds:-1800} ;;
    --record) mode=record ;;
    --seconds) seconds=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
seconds=${seconds:-300}
given=(${targets[@]+"${targets[@]}"})
all_targets=(pve_replies specs nocloud_iso)
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

log() { printf '[fuzz] %s\n' "$*" >&2; }

if [ "$mode" = record ]; then
  # pve-sim in-process, deterministic (fixed seed, times made canonical): recording again
  # changes the seeds only where a plugin's API calls or pve-sim's replies changed.
  log "recording the seeds (fuzz/record)"
  cargo run --quiet --manifest-path fuzz/Cargo.toml -p hyperplug-fuzz-seeds -- ${given[@]+"${given[@]}"}
  log "seed tests"
  cargo test --quiet --manifest-path fuzz/Cargo.toml --lib
  git status --short -- fuzz/seeds fuzz/specs.dict >&2
  exit 0
fi
cache="$HOME/.cache/hyperplug/fuzz"
toolchain=${FUZZ_TOOLCHAIN:-nightly}
sanitizer=${FUZZ_SANITIZER:-none}
# Instrumented builds share nothing with normal ones: their own target directory.
export CARGO_TARGET_DIR="$CARGO_TARGET_DIR/fuzz"

if ! rustup run "$toolchain" rustc --version >/dev/null 2>&1 || ! cargo fuzz --version >/dev/null 2>&1; then
  echo "the $toolchain toolchain or cargo-fuzz is missing: scripts/setup.sh installs both" >&2
  exit 1
fi

if [ "$mode" = ci ]; then
  # The seeds still do what they were made for (the recorded lifecycles run through):
  # stable Rust, no instrumentation.
  log "seed tests"
  cargo test --quiet --manifest-path fuzz/Cargo.toml --lib
fi

log "building ${targets[*]} ($toolchain, sanitizer $sanitizer)"
build_started=$SECONDS
for t in "${targets[@]}"; do
  cargo "+$toolchain" fuzz build -O -a --sanitizer "$sanitizer" "$t"
done
log "built in $((SECONDS - build_started)) s"
bin_dir="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"

# One target's run; says what it found on stderr, fails on a crash.
fuzz_one() {
  local t=$1 corpus artifacts out crash
  if [ "$mode" = ci ]; then
    corpus=$(mktemp -d)
  else
    corpus="$cache/corpus/$t"
    mkdir -p "$corpus"
  fi
  artifacts="$cache/artifacts/$t"
  mkdir -p "$artifacts"
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$artifacts/")
  [ -f "fuzz/$t.dict" ] && args+=(-dict="fuzz/$t.dict")
  log "$t: ${seconds} s"
  out="$cache/$t.log"
  local status=0
  if nice -n 19 "$bin_dir/$t" "${args[@]}" "$corpus" "fuzz/seeds/$t" >"$out" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done' "$out" | tr '\n' ' ' >&2; echo >&2
  else
    status=1
    grep -v -E '^#[0-9]+\s+(NEW|REDUCE|pulse|RELOAD)' "$out" | tail -40 >&2
    crash=$(grep -o "Test unit written to .*" "$out" | tail -1 | sed 's/Test unit written to //')
    log "$t FAILED; input: $crash"
    log "replay: cargo +$toolchain fuzz run -O -a --sanitizer $sanitizer $t $crash"
  fi
  if [ "$mode" = ci ]; then
    rm -rf "$corpus"
  elif [ "$mode" = long ]; then
    log "$t: minimizing the kept corpus"
    local min
    min=$(mktemp -d)
    nice -n 19 "$bin_dir/$t" -merge=1 "$min" "$corpus" >/dev/null 2>&1 && rm -rf "$corpus" && mv "$min" "$corpus"
  fi
  return "$status"
}

failed=()
if [ "$mode" = ci ]; then
  # The short runs are fixed times, not fixed work: all targets at once, each report
  # printed whole when it ends.
  pids=() reports=()
  for t in "${targets[@]}"; do
    reports+=("$(mktemp)")
    fuzz_one "$t" 2>"${reports[-1]}" &
    pids+=($!)
  done
  for i in "${!targets[@]}"; do
    wait "${pids[$i]}" || failed+=("${targets[$i]}")
    cat "${reports[$i]}" >&2
    rm -f "${reports[$i]}"
  done
else
  for t in "${targets[@]}"; do
    fuzz_one "$t" || failed+=("$t")
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  log "crashes in: ${failed[*]}"
  exit 1
fi
log "no crash in ${targets[*]}"

#!/usr/bin/env bash
# `cargo test` over the default members, with the end-to-end suites beside the rest.
# Those suites (real clusterctl, Cluster API managers, API servers) spend most of their
# time waiting on processes and timers, so they run next to the other test binaries
# (which `cargo test` runs one after the other) rather than after them.
#
# Cargo holds its artifact directory while it runs tests, and a `cargo test -p` of a
# subset unifies dependency features differently (a rebuild), so this builds the test
# executables once, as `cargo test` would, and runs them itself (from their package's
# directory, as cargo does); the doctests run through `cargo test --doc`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
# Packages (by directory name) whose test executables run in the background (the chaos
# run at CI size, the end-to-end suites, the benchmark's smoke run, and the test world's
# and the release's own tests against real API servers), each beside the others. The
# rest run one after another beside them, the host's integration tests the longest: run
# in that chain, the kube-world and packaging tests (46 s and 25 s in CI) made it end
# 76 s after the end-to-end suites.
SLOW="chaos e2e scale-bench kube-world packaging"

# "directory name<TAB>directory<TAB>executable<TAB>world" of every test executable of the
# default members (the directory name is what SLOW names; world: whether the package
# depends, through any of its dependencies, dev ones too, on kube-world, the only reader
# of the Go-built test world).
artifacts="$(mktemp)"
trap 'rm -f "$artifacts"' EXIT
start=$SECONDS
# Clippy holds our crates to its lints (warnings denied) as they are built for the tests:
# its driver compiles the workspace's crates, as `cargo clippy` has it do
# (RUSTC_WORKSPACE_WRAPPER, and CLIPPY_ARGS for `-D warnings`), and still produces the
# code. A separate `cargo clippy` checked every dependency a second time, a build that
# shares nothing with the tests' (about 150 s in an empty cache). --all-targets lints
# what `cargo clippy --all-targets` did, the benchmarks and examples too (built as tests,
# never run here).
# The same variables reach the doctests' build below, so it reuses these libraries.
driver="$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)"
if [ -z "$driver" ]; then
    echo "clippy is missing: rustup component add clippy (scripts/setup.sh does)" >&2
    exit 1
fi
clippy=(env RUSTC_WORKSPACE_WRAPPER="$driver" CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__")
"${clippy[@]}" cargo test --no-run --all-targets --message-format=json-render-diagnostics >"$artifacts"
echo "== test executables built in $((SECONDS - start)) s" >&2
metadata="$(mktemp)"
# This machine's platform only: the packages of others (android_system_properties, ...)
# were never downloaded, and --offline then fails in an empty cache.
cargo metadata --format-version 1 --offline \
    --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" >"$metadata"
mapfile -t BINS < <(python3 -c '
import json, os, sys
meta = json.load(open(sys.argv[2]))
deps = {n["id"]: n["deps"] for n in meta["resolve"]["nodes"]}
names = {p["id"]: p["name"] for p in meta["packages"]}
def needs_world(pid, seen):
    if names[pid] == "kube-world":
        return True
    seen.add(pid)
    return any(needs_world(d["pkg"], seen) for d in deps[pid] if d["pkg"] not in seen)
for line in open(sys.argv[1]):
    m = json.loads(line)
    if (m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]
            and not {"bench", "example"} & set(m["target"]["kind"])):
        d = os.path.dirname(m["manifest_path"])
        world = "world" if needs_world(m["package_id"], set()) else "-"
        print(os.path.basename(d), d, m["executable"], world, sep="\t")
' "$artifacts" "$metadata")
rm -f "$metadata"
if [ "${#BINS[@]}" -eq 0 ]; then
    echo "no test executables found" >&2
    exit 1
fi
# The end-to-end tests run the manager binary that `cargo test` built for the host's tests.
export HYPERPLUG_BIN="$CARGO_TARGET_DIR/debug/hyperplug"

# Each test's time is printed after its result (libtest's --report-time, an unstable
# option that RUSTC_BOOTSTRAP lets a stable-built harness take): what to balance next.
run() { # executable directory
    echo "     Running $1"
    (cd "$2" && CARGO_MANIFEST_DIR="$2" RUSTC_BOOTSTRAP=1 "$1" -Z unstable-options --report-time)
}

# The packages whose tests need none of the Go-built test world (the runtime, the plugins
# and their kit, the simulator, the conformance kit's crate): one after another in a job
# of their own, started at once. In an empty cache the world is still building when the
# test executables are; these tests then use the CPU its build leaves idle (linking, one
# package at a time at its end).
early_log="$(mktemp)" early_failed="$(mktemp)"
trap 'rm -f "$artifacts" "$early_log" "$early_failed"' EXIT
(
    for entry in "${BINS[@]}"; do
        IFS=$'\t' read -r pkg dir exe world <<<"$entry"
        if [ "$world" = - ] && [[ " $SLOW " != *" $pkg "* ]]; then
            RUST_TEST_THREADS=${RUST_TEST_THREADS:-3} run "$exe" "$dir" >>"$early_log" 2>&1 ||
                echo "$exe" >>"$early_failed"
        fi
    done
) &
early_pid=$!

# The Go-built test world (scripts/setup.sh --go-beside builds it in the background):
# build-tools.sh waits on its lock for that build, then finds everything built (or
# builds what is missing, when nothing ran beside).
if ! bash scripts/build-tools.sh --all >/dev/null; then
    echo "the Go-built test world did not build; the background build's log:" >&2
    cat "$HYPERPLUG_CACHE/build-tools.out" >&2 2>/dev/null || true
    wait "$early_pid" || true
    exit 1
fi
echo "== the Go-built test world ready at $((SECONDS - start)) s" >&2

# Each slow executable in a job of its own, its output kept until the end. The machine
# this runs on has 2 cores; the tests mostly wait, so they run 4 at a time, and the host's
# integration tests (the longest of the others) 3 at a time.
slow_pids=() slow_logs=() slow_names=()
for entry in "${BINS[@]}"; do
    IFS=$'\t' read -r pkg dir exe world <<<"$entry"
    if [[ " $SLOW " == *" $pkg "* ]]; then
        slow_logs+=("$(mktemp)")
        slow_names+=("$pkg")
        RUST_TEST_THREADS=4 run "$exe" "$dir" >"${slow_logs[-1]}" 2>&1 &
        slow_pids+=($!)
    fi
done

# The others' output is shown as it comes and kept for the digest of failures below.
chain_log="$(mktemp)"
trap 'rm -f "$artifacts" "$early_log" "$early_failed" "$chain_log" ${slow_logs[@]+"${slow_logs[@]}"}' EXIT
failed=()
for entry in "${BINS[@]}"; do
    IFS=$'\t' read -r pkg dir exe world <<<"$entry"
    if [[ " $SLOW " != *" $pkg "* ]] && [ "$world" = world ]; then
        RUST_TEST_THREADS=${RUST_TEST_THREADS:-3} run "$exe" "$dir" 2>&1 | tee -a "$chain_log" ||
            failed+=("$exe")
    fi
done
wait "$early_pid" || true
echo "== the tests that need no Go-built world (ran from the start), done by $((SECONDS - start)) s"
cat "$early_log"
mapfile -t -O "${#failed[@]}" failed <"$early_failed"
"${clippy[@]}" cargo test --doc || failed+=("doctests")
echo "== other tests and doctests done at $((SECONDS - start)) s" >&2
for i in "${!slow_pids[@]}"; do
    status=0
    wait "${slow_pids[$i]}" || status=$?
    echo "== ${slow_names[$i]} (ran beside the other tests), done by $((SECONDS - start)) s"
    cat "${slow_logs[$i]}"
    if [ "$status" -ne 0 ]; then
        failed+=("${slow_names[$i]}")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    # What each failed test printed, short (its first lines and its panic's message), in
    # one place (a long log's excerpt otherwise shows that a test failed but not why): to
    # $FAILURE_DIGEST when set (scripts/test.sh prints it last), else here.
    bash scripts/failure-digest.sh "$early_log" "$chain_log" ${slow_logs[@]+"${slow_logs[@]}"} \
        >>"${FAILURE_DIGEST:-/dev/stdout}"
    echo "tests failed: ${failed[*]}" >&2
    exit 1
fi

# Sourced by every script that runs cargo. The target directory lives outside the
# checkout (a fresh clone, CI's included, reuses it); source-mtimes.py keeps the record
# that lets a fresh clone's unchanged files count as built, and forgets it when another
# checkout builds here. Once per process tree.
# The build caches' root (build-tools.sh's binaries and logs, the venvs) is exported
# too, so the scripts that source this name it once.
# Cargo counts RUSTC_BOOTSTRAP in what a build depends on: set (scripts/test-parallel.sh
# sets it for the test executables, which run scripts/build-plugins.sh), every crate was
# built again, and again without it at the next build (40 s of wall clock each time).
unset RUSTC_BOOTSTRAP
export HYPERPLUG_CACHE="${HYPERPLUG_CACHE:-$HOME/.cache/hyperplug}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
if [ -z "${HYPERPLUG_MTIMES_KEPT:-}" ]; then
    (cd "$(dirname "${BASH_SOURCE[0]}")/.." && python3 scripts/source-mtimes.py "$CARGO_TARGET_DIR")
    export HYPERPLUG_MTIMES_KEPT=1
fi

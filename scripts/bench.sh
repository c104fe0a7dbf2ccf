#!/usr/bin/env bash
# Provisioning at scale: starts the real management plane (etcd, kube-apiserver,
# kube-controller-manager, the Cluster API core manager), pve-sim with realistic task
# durations, and `hyperplug run` with the bundled plugin as its own process; creates
# machines across clusters the way Cluster API does, waits until all are provisioned,
# deletes them, and prints one table (tests/scale-bench). Asserts nothing about speed.
#
#   scripts/bench.sh                                 # 10 clusters × 10 machines
#   scripts/bench.sh --clusters 20 --machines 50     # 1,000 machines
#   scripts/bench.sh --smoke                         # 1 × 2, tiny durations, debug build
#                                                    # (CI runs it as scale-bench's test)
#   scripts/bench.sh --slow-tenant                   # issue 40's fair slots: one tenant's
#                                                    # 10 machines alone, then beside a
#                                                    # tenant whose endpoint hangs (32
#                                                    # machines); one row, goal ≤ 1.5×
#   scripts/bench.sh --release ...                   # the host with the release profile
#                                                    # the image ships (LTO, one codegen
#                                                    # unit; a few minutes' more build;
#                                                    # glibc here, musl in the image)
#
# Other flags go to scale-bench (`--help`): --nodes, --node-task-concurrency,
# --time-scale, --host-arg=--reconcile-concurrency=32, ...
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
profile=scale
build="profile scale (release, opt-level s, no LTO, 16 codegen units)"
args=()
for a in "$@"; do
  if [ "$a" = "--smoke" ]; then
    profile=dev
    build="debug (smoke run)"
    args+=(--smoke)
  elif [ "$a" = "--release" ]; then
    profile=release
    build="profile release (as the image: opt-level s, LTO, one codegen unit; glibc)"
  else
    args+=("$a")
  fi
done
bash scripts/setup.sh
bash scripts/build-plugins.sh >/dev/null
echo "[bench] building hyperplug and scale-bench ($build)" >&2
# The benchmark itself (and pve-sim in it) never needs the release profile's long link.
bench_profile=$([ "$profile" = release ] && echo scale || echo "$profile")
if [ "$profile" = release ]; then
  cargo build --quiet --release -p hyperplug --bins
fi
cargo build --quiet --profile "$bench_profile" -p hyperplug -p scale-bench --bins
out() { echo "$CARGO_TARGET_DIR/$([ "$1" = dev ] && echo debug || echo "$1")"; }
"$(out "$bench_profile")/scale-bench" --hyperplug "$(out "$profile")/hyperplug" --plugin plugins/proxmox.wasm --build "$build" "${args[@]}"

#!/usr/bin/env bash
# The chaos run (tests/chaos): creates and deletes machines in waves across clusters
# through the real management plane, pve-sim and two leader-elected `hyperplug run`
# replicas, while pve-sim fails the way PVE fails (10 % 500/595 replies, some after the
# request was carried out; 5 % failed tasks; slow tasks; lock timeouts; clones losing
# their VMID inside the task; VMs migrating), the leader is SIGKILLed and restarted,
# other clients write the same objects, and an administrator destroys one VM, powers
# one off and plants a foreign VM in the managed VMID range. Prints the table of
# invariants (orphan VMs, double VMs, VMs destroyed without ownership, stuck finalizers,
# machines not provisioned, foreign VM untouched, drift reported) and exits 1 unless
# every row reads 0 or yes.
#
#   scripts/chaos.sh                  # full size: 500 machines, 10 clusters, 3 kills
#   scripts/chaos.sh --ci             # the CI size: 50 machines, 5 clusters, 1 kill
#   scripts/chaos.sh --seed 42        # repeat a run's choices (the seed is printed)
#
# Other flags go to chaos (`--help`): --machines, --clusters, --kills, --waves, --nodes,
# --time-scale, --resync-seconds, --host-arg=..., --timeout-secs. KUBE_WORLD_KEEP=1
# keeps the plane's and the replicas' logs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
profile=scale
args=()
for a in "$@"; do
  if [ "$a" = "--ci" ]; then
    profile=dev
  fi
  args+=("$a")
done
bash scripts/setup.sh
bash scripts/build-plugins.sh >/dev/null
echo "[chaos] building hyperplug and chaos (profile $profile)" >&2
cargo build --quiet --profile "$profile" -p hyperplug -p chaos --bins
dir=$CARGO_TARGET_DIR/$([ "$profile" = dev ] && echo debug || echo "$profile")
"$dir/chaos" --hyperplug "$dir/hyperplug" --plugin plugins/proxmox.wasm "${args[@]}"

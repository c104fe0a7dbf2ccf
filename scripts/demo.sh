#!/usr/bin/env bash
# The local demo on the embedded default, the seed article's flow on one machine:
#   1. pve-sim in place of Proxmox VE (three nodes, cloud-init template VM 9000);
#   2. a management cluster: etcd + kube-apiserver, then
#      `clusterctl init --infrastructure proxmox --ipam in-cluster` from an offline
#      repository rendered from the providers' Go modules; the Cluster API core, kubeadm
#      and in-cluster IPAM managers and the hyperplug manager (bundled Proxmox plugin)
#      run as processes beside it;
#   3. `clusterctl generate cluster capi-quickstart ... --control-plane-machine-count=1
#      --worker-machine-count=1` from capmox.env, applied;
# then it shows progress until the Machines are provisioned and prints how to look
# around. Ctrl-C stops everything. Arguments go to the quickstart binary
# (e.g. `--workers 3`, `--fast`; `--help`).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/target-dir.sh
# Only what the demo runs: the test-only tools (CAPMOX's manager, the OCI tools, the
# Redfish emulator, fuzzing) and plugins are left to scripts/test.sh.
bash scripts/setup.sh --demo
# The management cluster's Go programs build beside the Rust builds: on 2 cores each
# leaves gaps (linking, one crate waiting on another) that the other fills. Of its output
# only its progress lines ([build-tools]) are shown; all of it is kept in the log below.
mkdir -p "$HYPERPLUG_CACHE"
world_log="$HYPERPLUG_CACHE/build-tools.out"
bash scripts/build-tools.sh >/dev/null 2> >(tee "$world_log" | grep --line-buffered '^\[build-tools\]' >&2) &
world=$!
echo "[demo] building hyperplug, the plugin and the quickstart driver, and beside them the management cluster's Go programs (about 13 min the first time on 2 cores, then seconds)"
bash scripts/build-plugins.sh --demo >/dev/null
# The demo profile (Cargo.toml): unoptimized, no debug info, the quickest to build.
cargo build --quiet --profile demo -p hyperplug -p e2e --bins
if ! wait "$world"; then
  echo "[demo] building the management cluster's programs failed (scripts/build-tools.sh); the end of its log, $world_log:" >&2
  tail -n 30 "$world_log" >&2
  exit 1
fi
exec "$CARGO_TARGET_DIR/demo/quickstart" "$@"

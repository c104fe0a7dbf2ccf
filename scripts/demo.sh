#!/usr/bin/env bash
# The local demo on the embedded default: a real management plane (etcd +
# kube-apiserver + Cluster API), pve-sim with its default world (three nodes, a
# cloud-init template), and the hyperplug manager with the bundled Proxmox plugin.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
bash scripts/setup.sh
bash scripts/build-plugins.sh >/dev/null
cargo build --quiet -p hyperplug -p pve-sim -p kube-world --bins
bin="$CARGO_TARGET_DIR/debug"
work=$(mktemp -d -t hyperplug-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

"$bin/hyperplug" inspect plugins/proxmox.wasm
"$bin/hyperplug" crds plugins/proxmox.wasm > "$work/crds.yaml"

"$bin/pve-sim" --listen 127.0.0.1:8006 > "$work/pve-sim.log" 2>&1 &
pids+=($!)
"$bin/kube-world-up" --controller-manager --capi --crds "$work/crds.yaml" > "$work/plane.log" 2>&1 &
pids+=($!)
printf 'starting the management plane'
until grep -q '^export KUBECONFIG=' "$work/plane.log" 2>/dev/null; do
  kill -0 "${pids[1]}" 2>/dev/null || { echo; cat "$work/plane.log"; exit 1; }
  printf '.'; sleep 1
done
echo
eval "$(grep '^export KUBECONFIG=' "$work/plane.log")"
cat "$work/plane.log"
echo "pve-sim: $(grep -m1 -i 'serving\|listening' "$work/pve-sim.log" || true)"
echo
echo "Look around (another shell):"
echo "  export KUBECONFIG=$KUBECONFIG"
echo "  kubectl get crds | grep proxmox;  curl -sk https://127.0.0.1:8006/_sim/vms"
echo "Stop: Ctrl-C"
"$bin/hyperplug" run --plugin plugins/proxmox.wasm

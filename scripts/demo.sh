#!/usr/bin/env bash
# The local demo on the embedded default: a real management plane (etcd, kube-apiserver,
# kube-controller-manager, the Cluster API core manager and the in-cluster IPAM
# provider), pve-sim with its default world (three nodes, a cloud-init template VM
# 9000), and the hyperplug manager with the bundled Proxmox plugin. It applies a
# Cluster with one Machine the way Cluster API lays them out, shows progress until the
# VM is provisioned, then tells you how to look around. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/hyperplug/target}"
bash scripts/setup.sh
echo "[demo] building hyperplug, the plugin, pve-sim and the plane launcher"
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

"$bin/hyperplug" crds plugins/proxmox.wasm > "$work/crds.yaml"
"$bin/pve-sim" --listen 127.0.0.1:8006 > "$work/pve-sim.log" 2>&1 &
pids+=($!)
"$bin/kube-world-up" --controller-manager --capi --ipam --crds "$work/crds.yaml" > "$work/plane.log" 2>&1 &
pids+=($!)
printf '[demo] starting the management plane'
until grep -q '^export KUBECONFIG=' "$work/plane.log" 2>/dev/null; do
  kill -0 "${pids[1]}" 2>/dev/null || { echo; cat "$work/plane.log"; exit 1; }
  printf '.'; sleep 1
done
echo
eval "$(grep '^export KUBECONFIG=' "$work/plane.log")"
kubectl=$(sed -n 's/^kubectl: //p' "$work/plane.log")
fingerprint=$(grep -oE '([0-9A-F]{2}:){31}[0-9A-F]{2}' "$work/pve-sim.log" | head -1)

# The credentials, as clusterctl's capmox.env would give them (pve-sim's documented token).
"$kubectl" create secret generic pve-credentials -n default \
  --from-literal=url=https://127.0.0.1:8006 --from-literal=token='capmox@pve!capi' \
  --from-literal=secret=REDACTED-SIM-SECRET --from-literal=fingerprint="$fingerprint" >/dev/null

"$bin/hyperplug" run --plugin plugins/proxmox.wasm --health-addr 127.0.0.1:9441 \
  --metrics-addr 127.0.0.1:9440 > "$work/hyperplug.log" 2>&1 &
pids+=($!)

# The Cluster and its Machine first; the ProxmoxMachine is owned by the Machine.
fixture=host/tests/fixtures/cluster-and-machine.yaml
awk 'BEGIN{RS="---\n"; ORS="---\n"} NR<5' "$fixture" | "$kubectl" apply -n default -f - >/dev/null
uid=$("$kubectl" get machine.cluster.x-k8s.io m-0 -n default -o jsonpath='{.metadata.uid}')
awk 'BEGIN{RS="---\n"} NR==5' "$fixture" | sed "s/MACHINE_UID/$uid/" | "$kubectl" apply -n default -f - >/dev/null

echo "[demo] applied Cluster demo with Machine m-0; watching the ProxmoxMachine"
last=""
for _ in $(seq 1 300); do
  phase=$("$kubectl" get proxmoxmachine m-0 -n default -o jsonpath='{.status.phase}' 2>/dev/null || true)
  if [ -n "$phase" ] && [ "$phase" != "$last" ]; then echo "  phase: $phase"; last=$phase; fi
  done=$("$kubectl" get proxmoxmachine m-0 -n default -o jsonpath='{.status.initialization.provisioned}' 2>/dev/null || true)
  [ "$done" = "true" ] && break
  sleep 1
done
echo
"$kubectl" get proxmoxclusters,proxmoxmachines -n default
echo
cat <<MSG
Look around (in another shell):
  export KUBECONFIG=$KUBECONFIG
  $kubectl get proxmoxmachines -A -o wide
  $kubectl describe proxmoxmachine m-0            # conditions and events
  curl -sk https://127.0.0.1:8006/_sim/vms         # the simulator's VMs
  curl -s http://127.0.0.1:9440/metrics | grep hyperplug_
Logs: $work (hyperplug.log, pve-sim.log, plane.log)
Stop: Ctrl-C
MSG
wait "${pids[2]}"

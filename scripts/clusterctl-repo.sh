#!/usr/bin/env bash
# Renders an offline clusterctl repository for `clusterctl init --infrastructure proxmox
# --ipam in-cluster`: every provider clusterctl installs, at the versions pinned in
# scripts/tools.env, rendered from the sources their Go modules carry (the same
# `config/default` kustomizations upstream releases are built from, through kubectl's
# built-in kustomize), plus our own release folder (scripts/release.sh).
#
#   OUT/cluster-api/<v>/{core-components.yaml,metadata.yaml}
#   OUT/bootstrap-kubeadm/<v>/{bootstrap-components.yaml,metadata.yaml}
#   OUT/control-plane-kubeadm/<v>/{control-plane-components.yaml,metadata.yaml}
#   OUT/ipam-in-cluster/<v>/{ipam-components.yaml,metadata.yaml}
#   OUT/cert-manager/<v>/cert-manager.yaml   (namespace + CRDs: the controller runs as a
#                                             process beside the API server, see below)
#   OUT/infrastructure-proxmox/<v>/...       (scripts/release.sh; CRDS=file required)
#   OUT/clusterctl.yaml                      (providers: and cert-manager: overrides)
#
# Without a kubelet, Deployments never run: the test world runs the managers and the
# cert-manager controller as processes instead. The cert-manager file therefore carries
# no webhook or cainjector, which could only block the API with nothing behind them.
#
# Usage: CRDS=crds.yaml scripts/clusterctl-repo.sh OUT
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: CRDS=crds.yaml $0 OUT}"
: "${CRDS:?CRDS must name the CRDs file of the bundled plugin (hyperplug crds plugins/proxmox.wasm)}"
# shellcheck disable=SC1091
source "$(bash "$here/build-tools.sh" 2>/dev/null | tail -1)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# kustomize <module dir>/<config dir> <provider label> <version> <components file>
kustomize() {
    local src="$1" label="$2" version="$3" file="$4" meta="$5"
    local dir="$out/$label/$version"
    mkdir -p "$dir"
    "$KUBECTL" kustomize "$src" >"$dir/$file.tmp" 2>"$dir/kustomize.log" || {
        cat "$dir/kustomize.log" >&2
        return 1
    }
    mv "$dir/$file.tmp" "$dir/$file"
    rm -f "$dir/kustomize.log"
    cp "$meta" "$dir/metadata.yaml"
    chmod u+w "$dir/metadata.yaml"
}

kustomize "$CAPI_DIR/core/config/default" cluster-api "$CAPI_VERSION" core-components.yaml "$CAPI_DIR/metadata.yaml"
kustomize "$CAPI_DIR/bootstrap/kubeadm/config/default" bootstrap-kubeadm "$CAPI_VERSION" bootstrap-components.yaml "$CAPI_DIR/metadata.yaml"
kustomize "$CAPI_DIR/controlplane/kubeadm/config/default" control-plane-kubeadm "$CAPI_VERSION" control-plane-components.yaml "$CAPI_DIR/metadata.yaml"
kustomize "$IPAM_DIR/config/default" ipam-in-cluster "$IPAM_VERSION" ipam-components.yaml "$IPAM_DIR/metadata.yaml"

cm="$out/cert-manager/$CERT_MANAGER_VERSION"
mkdir -p "$cm"
{
    printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: cert-manager\n'
    for f in "$CERT_MANAGER_DIR"/deploy/crds/*.yaml; do
        printf -- '---\n'
        sed '/^---$/d' "$f"
    done
} >"$cm/cert-manager.yaml"

release="$(CRDS="$CRDS" bash "$here/release.sh" "$out" | tail -1)"
infra_version="$(basename "$release")"

cat >"$out/clusterctl.yaml" <<EOF
# Offline provider repository rendered by scripts/clusterctl-repo.sh.
providers:
  - name: cluster-api
    type: CoreProvider
    url: $out/cluster-api/$CAPI_VERSION/core-components.yaml
  - name: kubeadm
    type: BootstrapProvider
    url: $out/bootstrap-kubeadm/$CAPI_VERSION/bootstrap-components.yaml
  - name: kubeadm
    type: ControlPlaneProvider
    url: $out/control-plane-kubeadm/$CAPI_VERSION/control-plane-components.yaml
  - name: in-cluster
    type: IPAMProvider
    url: $out/ipam-in-cluster/$IPAM_VERSION/ipam-components.yaml
  - name: proxmox
    type: InfrastructureProvider
    url: $out/infrastructure-proxmox/$infra_version/infrastructure-components.yaml
cert-manager:
  url: $cm/cert-manager.yaml
  version: $CERT_MANAGER_VERSION
EOF
echo "$out/clusterctl.yaml"

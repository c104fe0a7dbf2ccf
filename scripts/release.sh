#!/usr/bin/env bash
# Renders the clusterctl release folder of the Proxmox provider:
#
#   OUT/infrastructure-proxmox/VERSION/
#     infrastructure-components.yaml   Namespace, CRDs (from the bundled plugin), RBAC,
#                                      credentials Secret, webhook Service and certificate,
#                                      manager Deployment
#     metadata.yaml
#     cluster-template*.yaml, clusterclass-*.yaml
#
# That is the layout clusterctl expects of a local repository, so a clusterctl.yaml
# `providers:` entry with `url: OUT/infrastructure-proxmox/VERSION/infrastructure-components.yaml`
# works as is (see deploy/README.md).
#
# Usage: scripts/release.sh [OUT]          (default OUT: out/release)
# Environment:
#   VERSION    release version (default: v + the workspace version in Cargo.toml)
#   IMAGE      manager image (default: ghcr.io/hyperplug/hyperplug:VERSION)
#   HYPERPLUG  the hyperplug binary (default: `cargo run -p hyperplug`)
#   PLUGIN     the bundled plugin (default: plugins/proxmox.wasm, built if missing)
#   CRDS       a file holding `hyperplug crds PLUGIN` output, used instead of running
#              hyperplug (tests render the CRDs in process)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
source scripts/target-dir.sh

out="${1:-out/release}"
version="${VERSION:-v$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)}"
case "$version" in v[0-9]*.[0-9]*.[0-9]*) ;; *) echo "release.sh: VERSION must look like v1.2.3, got '$version'" >&2; exit 2 ;; esac
image="${IMAGE:-ghcr.io/hyperplug/hyperplug:$version}"
plugin="${PLUGIN:-plugins/proxmox.wasm}"

# metadata.yaml must announce this release's series (major.minor).
series="${version#v}"; major="${series%%.*}"; rest="${series#*.}"; minor="${rest%%.*}"
if ! awk -v ma="$major" -v mi="$minor" '
    /- major:/ {m=$3} /minor:/ {if (m==ma && $2==mi) found=1} END {exit !found}' metadata.yaml; then
  echo "release.sh: metadata.yaml has no releaseSeries entry for $major.$minor" >&2
  exit 2
fi

if [ -z "${CRDS:-}" ]; then
  if [ ! -f "$plugin" ]; then
    bash scripts/build-plugins.sh >/dev/null
  fi
  if [ -n "${HYPERPLUG:-}" ]; then
    hyperplug=("$HYPERPLUG")
  else
    hyperplug=(cargo run --quiet -p hyperplug --)
  fi
fi

dir="$out/infrastructure-proxmox/$version"
rm -rf "$dir"
mkdir -p "$dir"

crds="$(mktemp)"
trap 'rm -f "$crds"' EXIT
if [ -n "${CRDS:-}" ]; then
  cp "$CRDS" "$crds"
else
  "${hyperplug[@]}" crds "$plugin" >"$crds"
fi
grep -q 'cluster.x-k8s.io/v1beta2:' "$crds" || { echo "release.sh: CRDs lack the contract label" >&2; exit 1; }

{
  echo "# hyperplug $version: infrastructure provider \"proxmox\" for Cluster API (contract v1beta2)."
  echo "# Rendered by scripts/release.sh from deploy/ and the CRDs of $(basename "$plugin")."
  for part in deploy/namespace.yaml "$crds" deploy/rbac.yaml deploy/credentials.yaml deploy/webhook.yaml deploy/manager.yaml; do
    echo "---"
    # Drop comment-only lines and a leading separator; parts are joined by one `---`.
    sed -e '/^#/d' "$part" | sed -e '1{/^---$/d}'
  done
} | sed "s#image: ghcr.io/hyperplug/hyperplug:dev#image: $image#" >"$dir/infrastructure-components.yaml"

grep -q "image: $image" "$dir/infrastructure-components.yaml" || { echo "release.sh: image not set" >&2; exit 1; }
cp metadata.yaml "$dir/metadata.yaml"
cp templates/cluster-template*.yaml templates/clusterclass-*.yaml "$dir/"
echo "$dir"

#!/usr/bin/env bash
# Builds the "test world" (etcd, kube-apiserver, kube-controller-manager, kubectl,
# clusterctl, the Cluster API managers, the in-cluster IPAM provider, the cert-manager
# controller, CAPMOX's manager, an OCI registry, oras and cosign) from their Go modules,
# at the versions pinned in scripts/tools.env, in two modules: the world's (Kubernetes,
# etcd, Cluster API, cert-manager and the OCI tools) and the providers' (IPAM, CAPMOX).
#
# Binaries and wrapper modules live outside the checkout, keyed by a digest of each
# module's versions (the world's also of its sources and flags):
#   ${HYPERPLUG_CACHE:-$HOME/.cache/hyperplug}/bin/<module>-<key>/<name>
#   ${HYPERPLUG_CACHE:-$HOME/.cache/hyperplug}/src/<module>-<key>/go.mod
# Idempotent: a binary that exists is not rebuilt. Concurrent runs serialise on a lock.
# At the end it writes $CACHE/world.env (paths of every binary and manifest source dir,
# read by tests/kube-world) and prints the path of that file on stdout. Progress and build
# timings go to stderr (timings also to $CACHE/build-times.log).
#
# Usage: scripts/build-tools.sh [tool...]   (default: all; names: etcd kube-apiserver
#        kube-controller-manager kubectl clusterctl capi-manager kubeadm-bootstrap-manager
#        kubeadm-control-plane-manager ipam-manager cert-manager-controller; and, only when
#        named, capmox-manager, oci-registry, oras, cosign; `--all`: all of them)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tools.env
source "$here/tools.env"

CACHE="${HYPERPLUG_CACHE:-${HOME:-/root}/.cache/hyperplug}"
mkdir -p "$CACHE/bin" "$CACHE/src"
export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:-} -mod=mod"
export CGO_ENABLED=0

log() { printf '[build-tools] %s\n' "$*" >&2; }

# One build at a time across processes (tests running in parallel call this too).
exec 9>"$CACHE/.build-tools.lock"
if ! flock -n 9; then
    log "another build-tools run holds $CACHE/.build-tools.lock; waiting"
    flock 9
fi

# Directory of a module version in the module cache (downloads it if needed).
mod_dir() {
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p'
}
mod_gomod() {
    go mod download -json "$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p'
}

build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

# The name `go build` gives a main package's binary: its last path element, or the one
# before a major version suffix (go.etcd.io/etcd/server/v3 -> server).
go_bin_name() {
    local p="${1%/}"
    [[ "$p" =~ /v[0-9]+$ ]] && p="${p%/v*}"
    printf '%s' "${p##*/}"
}

# build_many <module dir> <output dir> <ldflags> <name>=<package>...: one `go build` of
# several main packages, each binary moved to <output dir>/<name> once the whole build
# has succeeded. `go build -o dir/` names a binary after its package's last path element,
# so packages sharing one (Cluster API's two `kubeadm` managers) go in separate rounds.
# At the Rust builds' priority: the tests that need this world (the end-to-end suites,
# the longest) wait for both. Niced, it got a tenth of the CPU beside cargo and the
# world-free tests, and finished 350 s after the test executables (cold CI, stop 50).
build_many() {
    local wdir="$1" outdir="$2" ldflags="$3"
    shift 3
    local rest=("$@")
    mkdir -p "$outdir"
    while [[ ${#rest[@]} -gt 0 ]]; do
        local round=() later=() seen=" " t base tmp start
        for t in "${rest[@]}"; do
            base="$(go_bin_name "${t#*=}")"
            if [[ "$seen" == *" $base "* ]]; then later+=("$t"); else round+=("$t"); seen+="$base "; fi
        done
        tmp="$outdir/.tmp.$$"
        rm -rf "$tmp" && mkdir -p "$tmp"
        log "build   ${round[*]%%=*} (one go build; minutes on a cold cache)"
        start=$(date +%s)
        # -dwarf=false: the linker drops debug info anyway (-w), so the compiler need not
        # make it (11% less CPU for clusterctl's packages from an empty cache); the
        # binaries are the same, so it is not part of the cache keys.
        if ! (cd "$wdir" && go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w $ldflags" -o "$tmp/" "${round[@]#*=}"); then
            rm -rf "$tmp"
            log "FAILED  ${round[*]%%=*} (see the go output above)"
            return 1
        fi
        for t in "${round[@]}"; do
            mv -f "$tmp/$(go_bin_name "${t#*=}")" "$outdir/${t%%=*}"
        done
        rm -rf "$tmp"
        log "built   ${round[*]%%=*} in $(($(date +%s) - start))s"
        printf '%s\t%s\t%ss\n' "$(date -u +%FT%TZ)" "$outdir/{${round[*]%%=*}}" "$(($(date +%s) - start))" >>"$CACHE/build-times.log"
        rest=(${later[@]+"${later[@]}"})
    done
}

# A wrapper module: go.mod with a go directive, requires and replaces; go.sum is filled
# by the first build (-mod=mod).
write_wrapper() {
    local wdir="$1" content="$2"
    mkdir -p "$wdir"
    # go build -mod=mod adds requirements to go.mod, so compare with the spec we wrote.
    if [[ ! -f "$wdir/go.mod" ]] || [[ "$(cat "$wdir/.spec" 2>/dev/null)" != "$content" ]]; then
        printf '%s\n' "$content" >"$wdir/go.mod"
        printf '%s\n' "$content" >"$wdir/.spec"
        rm -f "$wdir/go.sum"
    fi
    # One package so that the directory is a buildable module.
    [[ -f "$wdir/doc.go" ]] || printf '// Package wrapper only pins module versions.\npackage wrapper\n' >"$wdir/doc.go"
}

# Whether the tool was named on the command line (the tools built only when named).
named() {
    local t
    for t in ${selected[@]+"${selected[@]}"}; do [[ "$t" == "$1" ]] && return 0; done
    return 1
}
# Whether the tool is wanted: named, or nothing was named (the default tools).
want() {
    [[ ${#selected[@]} -eq 0 ]] || named "$1"
}
selected=("$@")
# --all: the default tools and those built only when named.
if [[ "${1:-}" == "--all" ]]; then
    selected=(etcd kube-apiserver kube-controller-manager kubectl clusterctl capi-manager
        kubeadm-bootstrap-manager kubeadm-control-plane-manager ipam-manager
        cert-manager-controller capmox-manager oci-registry oras cosign)
fi

# ---------------------------------------------------------------- the world's one module
# Kubernetes (kube-apiserver, kube-controller-manager, kubectl), etcd, Cluster API
# (clusterctl and its three managers) and cert-manager's controller are built from one
# wrapper module, so their shared dependencies (k8s.io/* at one version, grpc, etcd's
# client, controller-runtime, ...) are one module graph and compile once, and one
# `go build` compiles them all. tools.env pins versions that fit one graph: the
# k8s.io/* release of Kubernetes is the one Cluster API and cert-manager build with.
# (On 2 cores, cold: about 6 min; one module per tool, each with its own k8s.io/*
# release, took about 16.)
k8s_minor="${KUBERNETES_VERSION#v1.}"
k8s_minor="${k8s_minor%%.*}"
k8s_staging="v0.${KUBERNETES_VERSION#v1.}"
capi_minor="${CAPI_VERSION#v1.}"
capi_minor="${capi_minor%%.*}"
# -X flags for a version package's gitVersion and friends.
version_ld() {
    local p="$1" v="$2" minor="$3"
    printf -- "-X %s.gitVersion=%s -X %s.gitMajor=1 -X %s.gitMinor=%s -X %s.gitTreeState=clean -X %s.buildDate=%s" \
        "$p" "$v" "$p" "$p" "$minor" "$p" "$p" "$build_date"
}
CM_MOD=github.com/cert-manager/cert-manager
DIST_MOD=github.com/distribution/distribution/v3
ORAS_MOD=oras.land/oras
COSIGN_MOD=github.com/sigstore/cosign/v2
# Every binary's version variables: each binary links only its own, and -X of a package
# a binary does not link is ignored, so the one build takes them all.
world_ld() {
    printf '%s ' \
        "$(version_ld k8s.io/component-base/version "$KUBERNETES_VERSION" "$k8s_minor") -X k8s.io/component-base/version.gitCommit=" \
        "$(version_ld k8s.io/client-go/pkg/version "$KUBERNETES_VERSION" "$k8s_minor") -X k8s.io/client-go/pkg/version.gitCommit=" \
        "-X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
        "$(version_ld sigs.k8s.io/cluster-api/version "$CAPI_VERSION" "$capi_minor")" \
        "-X $CM_MOD/pkg/util.AppVersion=$CERT_MANAGER_VERSION -X $CM_MOD/pkg/util.AppGitCommit=" \
        "-X $DIST_MOD/version.version=$DISTRIBUTION_VERSION" \
        "-X oras.land/oras/internal/version.Version=${ORAS_VERSION#v} -X oras.land/oras/internal/version.BuildMetadata=" \
        "-X sigs.k8s.io/release-utils/version.gitVersion=$COSIGN_VERSION"
}
# name=package of each binary of the world module. cert-manager's main is ours
# (scripts/tools/cert-manager-controller): upstream's lives in a nested module (cmd/controller)
# that is not published, so ours runs the published root module's controllers.
WORLD_TOOLS=(
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
    kubectl=k8s.io/kubernetes/cmd/kubectl
    etcd=go.etcd.io/etcd/server/v3
    clusterctl=sigs.k8s.io/cluster-api/cmd/clusterctl
    capi-manager=sigs.k8s.io/cluster-api/core
    kubeadm-bootstrap-manager=sigs.k8s.io/cluster-api/bootstrap/kubeadm
    kubeadm-control-plane-manager=sigs.k8s.io/cluster-api/controlplane/kubeadm
    cert-manager-controller=./cert-manager-controller
)
# Plugins pulled by reference (`--plugin oci://…`) are tested against a real registry,
# pushed with oras and signed with cosign, as users do. They are in the world's module
# graph, so the dependencies they share with it (gRPC, OpenTelemetry, client-go, the
# container-registry libraries) compile once: alone, one module each, the three took
# about 690 s on 2 cores. Built only when named (setup.sh names them; the demo does not).
WORLD_NAMED_TOOLS=(
    oci-registry=./oci-registry
    oras=$ORAS_MOD/cmd/oras
    cosign=$COSIGN_MOD/cmd/cosign
)
world_spec() {
    local gomod replaces
    gomod="$(mod_gomod "k8s.io/kubernetes@$KUBERNETES_VERSION")"
    # k8s.io/kubernetes replaces every staging module with ./staging/src/k8s.io/<m>;
    # outside its repository those are the published v0.<minor>.<patch> modules. From
    # v1.14 Cluster API's root module replaces sigs.k8s.io/cluster-api/api => ./api.
    replaces="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/.*#\t\1 => \1 '"$k8s_staging"'#p' "$gomod")"
    printf '%s\n' "module hyperplug.local/tools/world

go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")

require (
	k8s.io/kubernetes $KUBERNETES_VERSION
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	sigs.k8s.io/cluster-api $CAPI_VERSION
	sigs.k8s.io/cluster-api/api $CAPI_VERSION
	$CM_MOD $CERT_MANAGER_VERSION
	$DIST_MOD $DISTRIBUTION_VERSION
	$ORAS_MOD $ORAS_VERSION
	$COSIGN_MOD $COSIGN_VERSION
)

replace (
$replaces
	sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api $CAPI_VERSION
)"
}
# The key of the world's binaries: the module, our cert-manager main, the binaries' list
# and their flags (without the build date). A change to any of them builds anew.
world_spec_text="$(world_spec)"
world_key="$(
    {
        printf '%s\n' "$world_spec_text" "${WORLD_TOOLS[@]}" "${WORLD_NAMED_TOOLS[@]}"
        build_date=- world_ld
        cat "$here/tools/cert-manager-controller/"*.go "$here/tools/oci-registry/"*.go
    } | sha256sum | cut -c1-12
)"
WORLD_BIN="$CACHE/bin/world-$world_key"

# The world's binaries that are asked for and not built yet, as name=package.
missing=()
for t in "${WORLD_TOOLS[@]}"; do
    name="${t%%=*}"
    want "$name" && [[ ! -x "$WORLD_BIN/$name" ]] && missing+=("$t")
done
for t in "${WORLD_NAMED_TOOLS[@]}"; do
    name="${t%%=*}"
    named "$name" && [[ ! -x "$WORLD_BIN/$name" ]] && missing+=("$t")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    wdir="$CACHE/src/world-$world_key"
    write_wrapper "$wdir" "$world_spec_text"
    for main in cert-manager-controller oci-registry; do
        mkdir -p "$wdir/$main"
        cp "$here/tools/$main/"*.go "$wdir/$main/"
    done
    build_many "$wdir" "$WORLD_BIN" "$(world_ld)" "${missing[@]}"
fi

# ---------------------------------------------------------------- the providers' module
# The in-cluster IPAM provider and CAPMOX's manager (the provider teams switch from; the
# e2e takeover walk runs it against pve-sim) cannot share the world's graph: IPAM v1.1.0,
# the newest release the module proxy here serves, builds with controller-runtime v0.21,
# whose webhook builder Cluster API v1.14's v0.24 changed; CAPMOX v0.9.0 pins Cluster
# API v1.12. They share one module of their own: CAPMOX's graph (Cluster API v1.12,
# controller-runtime v0.22, which IPAM builds with), so their common dependencies
# compile once (alone, one module each, they took about 420 s and 250 s on 2 cores).
# CAPMOX's go.mod replaces modules, which a module requiring it must repeat: its replace
# lines, except cluster-api, whose pinned patch release the module proxy here does not
# serve (CAPMOX_CAPI_VERSION, a patch release of the same minor). IPAM is built by
# default; CAPMOX only when named.
IPAM_MOD=sigs.k8s.io/cluster-api-ipam-provider-in-cluster
CAPMOX_MOD=github.com/ionos-cloud/cluster-api-provider-proxmox
providers_spec() {
    local gomod replaces
    gomod="$(mod_gomod "$CAPMOX_MOD@$CAPMOX_VERSION")"
    replaces="$(sed -n '/^replace (/,/^)/p' "$gomod" | sed '1d;$d' | sed 's#//.*$##' |
        sed "s#^\([[:space:]]*sigs.k8s.io/cluster-api => sigs.k8s.io/cluster-api\) v.*#\1 $CAPMOX_CAPI_VERSION#")"
    printf '%s\n' "module hyperplug.local/tools/providers

go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod")

require (
	$CAPMOX_MOD $CAPMOX_VERSION
	$IPAM_MOD $IPAM_VERSION
)

replace (
$replaces
)"
}
providers_spec_text="$(providers_spec)"
providers_key="$(printf '%s\n' "$providers_spec_text" | sha256sum | cut -c1-12)"
PROVIDERS_BIN="$CACHE/bin/providers-$providers_key"
ipam_minor="${IPAM_VERSION#v1.}"
ipam_minor="${ipam_minor%%.*}"
# The providers asked for and not built yet, as name=package; one `go build` for them.
missing=()
want ipam-manager && [[ ! -x "$PROVIDERS_BIN/ipam-manager" ]] && missing+=("ipam-manager=$IPAM_MOD")
named capmox-manager && [[ ! -x "$PROVIDERS_BIN/capmox-manager" ]] && missing+=("capmox-manager=$CAPMOX_MOD/cmd")
if [[ ${#missing[@]} -gt 0 ]]; then
    wdir="$CACHE/src/providers-$providers_key"
    write_wrapper "$wdir" "$providers_spec_text"
    build_many "$wdir" "$PROVIDERS_BIN" "$(version_ld "$IPAM_MOD/version" "$IPAM_VERSION" "$ipam_minor")" "${missing[@]}"
fi
IPAM_BIN="$PROVIDERS_BIN"
CAPMOX_BIN="$PROVIDERS_BIN"
OCI_REGISTRY="$WORLD_BIN/oci-registry"
ORAS="$WORLD_BIN/oras"
COSIGN="$WORLD_BIN/cosign"

# ---------------------------------------------------------------- manifest sources
CAPI_DIR="$(mod_dir "sigs.k8s.io/cluster-api@$CAPI_VERSION")"
IPAM_DIR="$(mod_dir "$IPAM_MOD@$IPAM_VERSION")"
CM_DIR="$(mod_dir "$CM_MOD@$CERT_MANAGER_VERSION")"
CAPMOX_DIR="$(mod_dir "github.com/ionos-cloud/cluster-api-provider-proxmox@$CAPMOX_VERSION")"

envf="$CACHE/world.env"
cat >"$envf.tmp.$$" <<EOF
# Written by scripts/build-tools.sh; read by tests/kube-world.
KUBERNETES_VERSION=$KUBERNETES_VERSION
ETCD_VERSION=$ETCD_VERSION
CAPI_VERSION=$CAPI_VERSION
IPAM_VERSION=$IPAM_VERSION
CERT_MANAGER_VERSION=$CERT_MANAGER_VERSION
ETCD=$WORLD_BIN/etcd
KUBE_APISERVER=$WORLD_BIN/kube-apiserver
KUBE_CONTROLLER_MANAGER=$WORLD_BIN/kube-controller-manager
KUBECTL=$WORLD_BIN/kubectl
CLUSTERCTL=$WORLD_BIN/clusterctl
CAPI_MANAGER=$WORLD_BIN/capi-manager
KUBEADM_BOOTSTRAP_MANAGER=$WORLD_BIN/kubeadm-bootstrap-manager
KUBEADM_CONTROL_PLANE_MANAGER=$WORLD_BIN/kubeadm-control-plane-manager
IPAM_MANAGER=$IPAM_BIN/ipam-manager
CERT_MANAGER_CONTROLLER=$WORLD_BIN/cert-manager-controller
CAPMOX_MANAGER=$CAPMOX_BIN/capmox-manager
OCI_REGISTRY=$OCI_REGISTRY
ORAS=$ORAS
COSIGN=$COSIGN
CAPI_DIR=$CAPI_DIR
IPAM_DIR=$IPAM_DIR
CERT_MANAGER_DIR=$CM_DIR
CAPMOX_VERSION=$CAPMOX_VERSION
CAPMOX_DIR=$CAPMOX_DIR
EOF
mv -f "$envf.tmp.$$" "$envf"
log "world env: $envf"
echo "$envf"

#!/usr/bin/env bash
# Builds the dev cluster's real node into bin/ (the kubelet and kube-proxy come from hack/tools/k8s, with the control
# plane): containerd, its runc shim and ctr; runc; the CNI plugins; CoreDNS. One Go module per upstream under
# hack/tools/node, because each is built with the dependency versions it was released with (containerd and CoreDNS
# require other versions of the k8s.io libraries, gRPC and OpenTelemetry than k8s.io/kubernetes v1.37.2; in one
# module either side would be built with versions it was never tested with). Each module's go.mod is the one place
# its version is pinned: the version linked into the binaries is read from it. A group is rebuilt only when its
# go.mod/go.sum or this script change, or an output is missing (a stamp per group under bin/.stamps).
#
#   build-node-tools.sh [GROUP...]    build the groups (all by default) that are not up to date
#   build-node-tools.sh --stale       print the groups that are not up to date, one a line
#   build-node-tools.sh --outputs G   print group G's outputs, paths under bin/
#
# Cold builds (an empty Go build cache): containerd about 2 minutes on 2 cores, runc about half a minute, the CNI
# plugins about 1 minute, CoreDNS about 2 minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
export GOFLAGS=-buildvcs=false

groups="containerd runc cni coredns"

# define GROUP sets what GROUP builds: dir (its module), out (the directory under bin/), packages (named like the
# binaries they build), tags, cgo, and the version of mod (the upstream module, whose version is linked in).
define() {
	dir="$root/hack/tools/node/$1" out="" tags="" cgo=0 ldflags="-s -w"
	case $1 in
	containerd)
		mod=github.com/containerd/containerd/v2
		packages=("$mod/cmd/containerd" "$mod/cmd/containerd-shim-runc-v2" "$mod/cmd/ctr")
		# The btrfs, devmapper and zfs snapshotters need C libraries the machine lacks; the node uses overlayfs.
		tags="no_btrfs no_devmapper no_zfs urfave_cli_no_docs"
		version_var="$mod/version.Version"
		;;
	runc)
		mod=github.com/opencontainers/runc
		packages=("$mod")
		# nsenter is C, so runc needs cgo. seccomp: RuntimeDefault profiles (ImagePullJob's puller pods ask for one)
		# fail to start under a runc built without it; libseccomp-dev comes from hack/node-packages.sh.
		tags="seccomp urfave_cli_no_docs" cgo=1
		version_var="" # runc embeds its VERSION file
		;;
	cni)
		mod=github.com/containernetworking/plugins
		packages=("$mod/plugins/main/bridge" "$mod/plugins/ipam/host-local" "$mod/plugins/main/loopback"
			"$mod/plugins/meta/portmap")
		out=cni/
		version_var="$mod/pkg/utils/buildversion.BuildVersion"
		;;
	coredns)
		mod=github.com/coredns/coredns
		# Our own main with the plugins a cluster DNS uses (hack/tools/node/coredns/coredns/main.go).
		packages=(./coredns)
		version_var="" # CoreDNS's version is a constant of its source
		;;
	*)
		echo "build-node-tools.sh: no group $1 (groups: $groups)" >&2
		return 1
		;;
	esac
}

outputs() {
	local p o=""
	for p in "${packages[@]}"; do o+=" $out${p##*/}"; done
	echo "${o# }"
}

# A group's Go files count too: CoreDNS is built from a main of ours.
want() { cat "$dir/go.mod" "$dir/go.sum" "$0" $(find "$dir" -name '*.go' | sort) | sha256sum | cut -d' ' -f1; }

fresh() {
	local o
	for o in $(outputs); do [ -x "$bin/$o" ] || return 1; done
	[ -f "$bin/.stamps/node-$1" ] && [ "$(cat "$bin/.stamps/node-$1")" = "$(want)" ]
}

build() {
	define "$1"
	fresh "$1" && return 0
	if [ -n "$version_var" ]; then
		ldflags+=" -X $version_var=$(cd "$dir" && go list -m -f '{{.Version}}' "$mod")"
	fi
	mkdir -p "$bin/.stamps" "$bin/$out"
	(cd "$dir" && CGO_ENABLED=$cgo go build -tags "$tags" -ldflags "$ldflags" -o "$bin/$out" "${packages[@]}")
	want >"$bin/.stamps/node-$1"
}

case ${1:-} in
--stale)
	for g in $groups; do
		define "$g"
		fresh "$g" || echo "$g"
	done
	;;
--outputs)
	define "${2:?--outputs needs a group}"
	outputs
	;;
*)
	for g in ${@:-$groups}; do build "$g"; done
	;;
esac

#!/usr/bin/env bash
# Builds the control-plane binaries and code generators into bin/ from the Go modules pinned under hack/tools.
# Each module is rebuilt only when its go.mod/go.sum (or this script) change: a stamp under bin/.stamps records
# the hash of what was built last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin/.stamps"
export GOFLAGS=-buildvcs=false

kube_version=v1.37.2
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"

# build MODULE_DIR "OUTPUTS" LDFLAGS PACKAGES...
build() {
	local dir=$1 outputs=$2 ldflags=$3
	shift 3
	local stamp="$bin/.stamps/$(basename "$dir")"
	local want
	want=$(cat "$dir/go.mod" "$dir/go.sum" "$0" | sha256sum | cut -d' ' -f1)
	local missing=0
	for o in $outputs; do [ -x "$bin/$o" ] || missing=1; done
	if [ "$missing" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
		return 0
	fi
	echo "building $outputs (from $(basename "$dir"))" >&2
	(cd "$dir" && go build -ldflags "$ldflags" -o "$bin/" "$@")
	echo "$want" >"$stamp"
}

build "$root/hack/tools/controller-gen" "controller-gen" "-s -w" sigs.k8s.io/controller-tools/cmd/controller-gen
build "$root/hack/tools/kwok" "kwok" "-s -w" sigs.k8s.io/kwok/cmd/kwok
build "$root/hack/tools/k8s" "etcd kube-apiserver kube-scheduler kube-controller-manager kubectl" "$kube_ldflags" \
	./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl

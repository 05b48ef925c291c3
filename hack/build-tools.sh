#!/usr/bin/env bash
# Builds the control-plane binaries, kubectl, the real node's kubelet and kube-proxy, kwok, controller-gen and helm
# into bin/ from the one Go module pinned under hack/tools/k8s. One module and one `go build` on purpose: the tools
# share most of their dependencies (client-go, apimachinery, the API types), and built together each shared package
# is compiled once; as separate modules with their own versions, kwok, helm and controller-gen each compiled their
# own copy. Rebuilt only when the module's go.mod/go.sum (or this script) change: a stamp under bin/.stamps records
# the hash of what was built last.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin/.stamps"
export GOFLAGS=-buildvcs=false

dir="$root/hack/tools/k8s"
# The binaries, in the order hack/tools.sh reports them; the packages that build them follow.
outputs="etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kube-proxy kwok controller-gen helm"
packages=(./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler
	k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet
	k8s.io/kubernetes/cmd/kube-proxy sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/controller-tools/cmd/controller-gen
	helm.sh/helm/v4/cmd/helm)

stamp="$bin/.stamps/k8s"
want=$(cat "$dir/go.mod" "$dir/go.sum" "$0" | sha256sum | cut -d' ' -f1)
missing=0
for o in $outputs; do [ -x "$bin/$o" ] || missing=1; done
if [ "$missing" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
echo "building $outputs (from hack/tools/k8s)" >&2
# Built with plain `go build`, the components would say v0.0.0-master; the version is go.mod's, the one place it is
# pinned.
kube_version=$(cd "$dir" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${kube_version#v*.} minor=${minor%%.*} major=${kube_version#v} major=${major%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${kube_version} -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/client-go/pkg/version.gitVersion=${kube_version}"
(cd "$dir" && go build -ldflags "$ldflags" -o "$bin/" "${packages[@]}")
echo "$want" >"$stamp"

#!/usr/bin/env bash
# `make tools`: builds everything under hack/tools into bin/ and says what it is doing. First the Debian packages the
# real node needs (node-packages.sh; runc is built against libseccomp-dev). Then, each from its own module, only when
# out of date:
#   hack/tools/k8s              the control plane, kubectl, the kubelet, kube-proxy, kwok, controller-gen and helm
#                               (build-tools.sh: one module, one build): about 10 minutes on 2 cores
#   hack/tools/node/containerd  containerd, containerd-shim-runc-v2, ctr: about 2 minutes on 2 cores
#   hack/tools/node/runc        runc: about half a minute on 2 cores
#   hack/tools/node/cni         the CNI plugins bridge, host-local, loopback, portmap: about 1 minute on 2 cores
#   hack/tools/node/coredns     CoreDNS (the plugins a cluster DNS uses): about 2 minutes on 2 cores
# (cold: an empty Go build cache). For each build it says what it builds, downloads the module's dependencies first,
# so Go's download lines do not stand for progress, reports every 30 seconds how many of the binaries are built and
# how long it has been (MANTA_TOOLS_PROGRESS_SECONDS changes the period; hack/tools_test.go uses it), and says how
# long it took. It only reads the build scripts' stamps, so it never forces a rebuild.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
export GOFLAGS=-buildvcs=false

ticker=""
trap '[ -z "$ticker" ] || kill "$ticker" 2>/dev/null || true; rm -f "$bin"/.tools-build-started.*' EXIT

# with_progress WHAT DIR OUTPUTS COMMAND...: runs COMMAND, which builds OUTPUTS (paths under bin/) from the module in
# hack/tools/DIR, and reports on it; WHAT names the outputs in the last line.
with_progress() {
	local what=$1 dir=$2 outputs=$3 start=$SECONDS
	shift 3
	local marker="$bin/.tools-build-started.${dir//\//-}" total
	mkdir -p "$bin"
	touch "$marker"
	total=$(wc -w <<<"$outputs")
	echo "make tools: building $outputs from hack/tools/$dir into bin/" >&2
	echo "make tools: downloading the modules hack/tools/$dir needs..." >&2
	(cd "$root/hack/tools/$dir" && go mod download)
	(
		while sleep "${MANTA_TOOLS_PROGRESS_SECONDS:-30}"; do
			built=0
			for o in $outputs; do [ "$bin/$o" -nt "$marker" ] && built=$((built + 1)); done
			el=$((SECONDS - start))
			echo "make tools: ${built}/${total} binaries built from hack/tools/$dir ($((el / 60))m$((el % 60))s elapsed)" >&2
		done
	) &
	ticker=$!
	"$@"
	kill "$ticker" 2>/dev/null || true
	ticker=""
	rm -f "$marker"
	local el=$((SECONDS - start))
	echo "make tools: $what built in $((el / 60))m$((el % 60))s" >&2
}

"$root/hack/node-packages.sh"

k8s="$root/hack/tools/k8s"
k8s_fresh() {
	local want
	want=$(cat "$k8s/go.mod" "$k8s/go.sum" "$root/hack/build-tools.sh" | sha256sum | cut -d' ' -f1)
	[ -f "$bin/.stamps/k8s" ] && [ "$(cat "$bin/.stamps/k8s")" = "$want" ]
}
if ! k8s_fresh; then
	with_progress "control-plane binaries, kubectl, kubelet, kube-proxy, kwok, controller-gen and helm" k8s \
		"$(sed -n 's/^outputs="\(.*\)"$/\1/p' "$root/hack/build-tools.sh")" "$root/hack/build-tools.sh"
else
	"$root/hack/build-tools.sh" # still checks that every output exists
fi

node="$root/hack/build-node-tools.sh"
for group in $("$node" --stale); do
	outputs=$("$node" --outputs "$group")
	with_progress "$outputs" "node/$group" "$outputs" "$node" "$group"
done

"$root/hack/build-extra-tools.sh"

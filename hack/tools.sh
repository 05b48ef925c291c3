#!/usr/bin/env bash
# `make tools`: builds everything under hack/tools into bin/ and says what it is doing. The control-plane binaries,
# kwok, controller-gen and helm come from build-tools.sh (one module, one build; cold, 7-10 minutes on 2 cores);
# this wrapper downloads the module's dependencies first, so Go's download lines do not stand for progress, then
# reports every 30 seconds how many of the binaries are built and how long it has been
# (MANTA_TOOLS_PROGRESS_SECONDS changes the period; hack/tools_test.go uses it). It only reads build-tools.sh's stamp
# (same hash), so it never forces a rebuild.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
export GOFLAGS=-buildvcs=false

dir="$root/hack/tools/k8s"
outputs=$(sed -n 's/^outputs="\(.*\)"$/\1/p' "$root/hack/build-tools.sh")
fresh() {
	local want
	want=$(cat "$dir/go.mod" "$dir/go.sum" "$root/hack/build-tools.sh" | sha256sum | cut -d' ' -f1)
	[ -f "$bin/.stamps/k8s" ] && [ "$(cat "$bin/.stamps/k8s")" = "$want" ]
}

if ! fresh; then
	start=$SECONDS
	mkdir -p "$bin"
	marker="$bin/.tools-build-started"
	touch "$marker"
	total=$(wc -w <<<"$outputs")
	echo "make tools: building $outputs from hack/tools/k8s into bin/ (a cold build takes 7-10 minutes on 2 cores)" >&2
	echo "make tools: downloading the modules hack/tools/k8s needs..." >&2
	(cd "$dir" && go mod download)
	(
		while sleep "${MANTA_TOOLS_PROGRESS_SECONDS:-30}"; do
			built=0
			for o in $outputs; do [ "$bin/$o" -nt "$marker" ] && built=$((built + 1)); done
			el=$((SECONDS - start))
			echo "make tools: ${built}/${total} binaries built ($((el / 60))m$((el % 60))s elapsed)" >&2
		done
	) &
	ticker=$!
	trap 'kill "$ticker" 2>/dev/null || true; rm -f "$marker"' EXIT
	"$root/hack/build-tools.sh"
	kill "$ticker" 2>/dev/null || true
	el=$((SECONDS - start))
	echo "make tools: control-plane binaries, kwok, controller-gen and helm built in $((el / 60))m$((el % 60))s" >&2
else
	"$root/hack/build-tools.sh" # still checks that every output exists
fi
"$root/hack/build-extra-tools.sh"

#!/usr/bin/env bash
# `make tools`: builds everything under hack/tools into bin/ and says what it is doing. The control-plane binaries
# come from build-tools.sh (a cold build takes 10-15 minutes on 2 cores); this wrapper downloads their modules
# first, so Go's download lines do not stand for progress, then reports every 30 seconds how many modules are done
# and how long it has been (MANTA_TOOLS_PROGRESS_SECONDS changes the period; hack/tools_test.go uses it). It only
# reads build-tools.sh's stamps (same hash), so it never forces a rebuild.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
export GOFLAGS=-buildvcs=false

modules=(controller-gen kwok k8s)
fresh() {
	local m=$1 want
	want=$(cat "$root/hack/tools/$m/go.mod" "$root/hack/tools/$m/go.sum" "$root/hack/build-tools.sh" | sha256sum | cut -d' ' -f1)
	[ -f "$bin/.stamps/$m" ] && [ "$(cat "$bin/.stamps/$m")" = "$want" ]
}
stale=()
for m in "${modules[@]}"; do fresh "$m" || stale+=("$m"); done

if [ ${#stale[@]} -gt 0 ]; then
	start=$SECONDS
	echo "make tools: building ${stale[*]} from hack/tools into bin/ (a cold build takes 10-15 minutes on 2 cores)" >&2
	for m in "${stale[@]}"; do
		echo "make tools: downloading the modules hack/tools/$m needs..." >&2
		(cd "$root/hack/tools/$m" && go mod download)
	done
	(
		while sleep "${MANTA_TOOLS_PROGRESS_SECONDS:-30}"; do
			done_n=0 current=""
			for m in "${stale[@]}"; do
				if fresh "$m"; then done_n=$((done_n + 1)); elif [ -z "$current" ]; then current=$m; fi
			done
			el=$((SECONDS - start))
			echo "make tools: ${done_n}/${#stale[@]} modules built, now ${current:-finishing} ($((el / 60))m$((el % 60))s elapsed)" >&2
		done
	) &
	ticker=$!
	trap 'kill "$ticker" 2>/dev/null || true' EXIT
	"$root/hack/build-tools.sh"
	kill "$ticker" 2>/dev/null || true
	el=$((SECONDS - start))
	echo "make tools: control-plane binaries built in $((el / 60))m$((el % 60))s" >&2
else
	"$root/hack/build-tools.sh" # still checks that every output exists
fi
"$root/hack/build-extra-tools.sh"

#!/usr/bin/env bash
# Builds the developer tools that share no dependencies with the control plane into bin/: staticcheck (the linter
# .ci/run runs). Each comes from its own module under hack/tools and is rebuilt only when that module's
# go.mod/go.sum or this script change (a stamp under bin/.stamps). Kept apart from build-tools.sh, whose hash is in
# the control-plane stamp, so adding a tool here rebuilds nothing else. (helm, which shares client-go and the API
# types with the control plane, is built with it by build-tools.sh.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
mkdir -p "$bin/.stamps"
export GOFLAGS=-buildvcs=false

# build NAME PACKAGE: builds bin/NAME from hack/tools/NAME.
build() {
	local name=$1 pkg=$2 dir="$root/hack/tools/$1"
	local stamp="$bin/.stamps/$name" want
	want=$(cat "$dir/go.mod" "$dir/go.sum" "$0" | sha256sum | cut -d' ' -f1)
	if [ -x "$bin/$name" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
		return 0
	fi
	local start=$SECONDS
	echo "make tools: building $name (from hack/tools/$name)..." >&2
	(cd "$dir" && go mod download && go build -ldflags "-s -w" -o "$bin/$name" "$pkg")
	echo "$want" >"$stamp"
	echo "make tools: built bin/$name in $((SECONDS - start))s" >&2
}

build staticcheck honnef.co/go/tools/cmd/staticcheck

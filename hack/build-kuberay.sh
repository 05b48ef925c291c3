#!/usr/bin/env bash
# Builds KubeRay's operator, the test oracle of test/oracle, into bin/kuberay-operator from the module pinned in
# hack/tools/kuberay. It is a test tool: never shipped, never linked into Manta. Rebuilt only when that module's
# go.mod/go.sum or this script change (a stamp under bin/.stamps records the hash of what was built last). Kept apart
# from build-tools.sh so that changing it does not rebuild the control plane.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/bin"
dir="$root/hack/tools/kuberay"
stamp="$bin/.stamps/kuberay"
mkdir -p "$bin/.stamps"
export GOFLAGS=-buildvcs=false

want=$(cat "$dir/go.mod" "$dir/go.sum" "$0" | sha256sum | cut -d' ' -f1)
if [ -x "$bin/kuberay-operator" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
echo "building kuberay-operator (from hack/tools/kuberay)" >&2
(cd "$dir" && go build -ldflags "-s -w" -o "$bin/kuberay-operator" github.com/ray-project/kuberay/ray-operator)
echo "$want" >"$stamp"

#!/usr/bin/env bash
# Creates bin/ray-venv: a Python virtual environment with the pinned Ray used by the Ray conformance tests
# (test/ray). Idempotent: a stamp records the hash of this script, so a second run returns at once.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# A venv's scripts name its absolute path: it is made at bin/'s physical path (bin/ may be a link that checkouts
# share), and the stamp records that path, so a venv made at another path is rebuilt rather than run broken.
mkdir -p "$root/bin"
venv="$(cd "$root/bin" && pwd -P)/ray-venv"
# ray[serve] brings the HTTP proxy dependencies (fastapi, uvicorn, starlette) that Serve needs;
# ray[default] brings the dashboard and the Jobs API.
ray_spec='ray[default,serve]==2.52.0'
# Ray 2.52's Serve reads FieldDescriptor.label, which protobuf 7 removed.
extra_pins=('protobuf>=4.25,<7')
python=${PYTHON:-python3}

stamp="$venv/.manta-stamp"
want="$(sha256sum "$0" | cut -d' ' -f1) $venv"
if [ -x "$venv/bin/ray" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi

echo "creating $venv with $ray_spec" >&2
# Serialise concurrent callers (make test and a test binary may both call this).
mkdir -p "$root/bin"
exec 9>"$root/bin/.ray-venv.lock"
flock 9
if [ -x "$venv/bin/ray" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$ray_spec" "${extra_pins[@]}"
"$venv/bin/ray" --version >&2
echo "$want" >"$stamp"

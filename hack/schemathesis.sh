#!/usr/bin/env bash
# Creates bin/schemathesis-venv: a Python virtual environment with the pinned Schemathesis that
# internal/apiserver's tests run against the REST API's /openapi.json. Idempotent: a stamp records the hash of
# this script, so a second run returns at once. Prints the path of the st executable.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# A venv's scripts name its absolute path: it is made at bin/'s physical path (bin/ may be a link that checkouts
# share), and the stamp records that path, so a venv made at another path is rebuilt rather than run broken.
mkdir -p "$root/bin"
venv="$(cd "$root/bin" && pwd -P)/schemathesis-venv"
spec='schemathesis==4.32.5'
python=${PYTHON:-python3}

stamp="$venv/.manta-stamp"
want="$(sha256sum "$0" | cut -d' ' -f1) $venv"
ready() { [ -x "$venv/bin/st" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; }
if ready; then
	echo "$venv/bin/st"
	exit 0
fi
mkdir -p "$root/bin"
# Serialise concurrent callers (make test and a test binary may both call this).
exec 9>"$root/bin/.schemathesis-venv.lock"
flock 9
if ready; then
	echo "$venv/bin/st"
	exit 0
fi
echo "creating $venv with $spec" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" >&2
"$venv/bin/st" --version >&2
echo "$want" >"$stamp"
echo "$venv/bin/st"

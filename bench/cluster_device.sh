#!/usr/bin/env bash
# bench/cluster_device.sh: on a GPU machine with two GPUs (the device tool's nvidia-h200-x2 or
# nvidia-h100-x2), after `../shared/device/stage.sh` and with these Debian packages copied into
# .device/debs/ (apt-get download etcd-server libcjson1 libcjson-dev libcurl4-openssl-dev):
#   source .device/env.sh && bench/cluster_device.sh
# Points the carried curl/cJSON pkg-config files at /opt/deps, links the machine's own libcurl
# behind Debian's headers, builds Release with CUDA, runs ctest -L gpu and the two-node bench.
set -uo pipefail
out=${OUT:-/tmp}
lib=/opt/deps/usr/lib/x86_64-linux-gnu
sed -i 's#=/usr/#=/opt/deps/usr/#' "$lib/pkgconfig/libcjson.pc"
sed -i 's#=/usr/include#=/opt/deps/usr/include#' "$lib/pkgconfig/libcurl.pc"
sys=$(ls /usr/lib/x86_64-linux-gnu/libcurl.so.4 /usr/lib/x86_64-linux-gnu/libcurl-gnutls.so.4 2>/dev/null | head -1)
[ -n "$sys" ] && ln -sf "$sys" "$lib/libcurl.so.4" && ln -sf libcurl.so.4 "$lib/libcurl.so"
site=/tmp/gkv-site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$site" \
    ./client/python >"$out/python-install.log" 2>&1 || echo "python install failed"
export PYTHONPATH=$site
cmake -S . -B /tmp/after -G Ninja -DGKV_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DGKV_BUILD_TESTS=ON -DGKV_PYTHON="$(command -v python3)" >"$out/configure.log" 2>&1 &&
    cmake --build /tmp/after -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
(cd /tmp/after && timeout 480 ctest -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1)
grep -E "tests passed|tests failed" "$out/ctest-gpu.log"
timeout 400 python3 bench/cluster_bench.py /tmp/after/server/gpukvd --gpus 0,1 --rounds 3000 \
    --large 4K,1M,64M,1G --one-node | tee "$out/cluster_bench.md"

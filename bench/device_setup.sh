# bench/device_setup.sh: sourced by the GPU-machine scripts (cluster_device.sh, nixl_device.sh)
# after `source .device/env.sh`: points the carried curl/cJSON pkg-config files at /opt/deps,
# links the machine's own libcurl behind Debian's headers, installs the Python package into
# /tmp/gkv-site (PYTHONPATH) and builds Release with CUDA and the tests into /tmp/after.
# Logs go to $out.
out=${OUT:-/tmp}
lib=/opt/deps/usr/lib/x86_64-linux-gnu
sed -i 's#=/usr/#=/opt/deps/usr/#' "$lib/pkgconfig/libcjson.pc"
sed -i 's#=/usr/include#=/opt/deps/usr/include#' "$lib/pkgconfig/libcurl.pc"
# liburing (the disk tier's io_uring), when carried: `apt-get download liburing-dev liburing2`
# into .device/ after stage.sh.
[ -f "$lib/pkgconfig/liburing.pc" ] && sed -i 's#=/usr/#=/opt/deps/usr/#' "$lib/pkgconfig/liburing.pc"
sys=$(ls /usr/lib/x86_64-linux-gnu/libcurl.so.4 /usr/lib/x86_64-linux-gnu/libcurl-gnutls.so.4 2>/dev/null | head -1)
[ -n "$sys" ] && ln -sf "$sys" "$lib/libcurl.so.4" && ln -sf libcurl.so.4 "$lib/libcurl.so"
site=/tmp/gkv-site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$site" \
    ./client/python >"$out/python-install.log" 2>&1 || echo "python install failed"
export PYTHONPATH=$site
cmake -S . -B /tmp/after -G Ninja -DGKV_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DGKV_BUILD_TESTS=ON -DGKV_PYTHON="$(command -v python3)" >"$out/configure.log" 2>&1 &&
    cmake --build /tmp/after -j "$(nproc)" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; return 1; }

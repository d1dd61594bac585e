#!/usr/bin/env bash
# test_install.sh: a Release build of gpukv installed the way the README says (configured
# without a prefix, then `cmake --install build --prefix P`), then used the ways the README shows:
# the C example built against P with pkg-config (PKG_CONFIG_PATH=P/lib/pkgconfig) and with
# find_package, shared and static, and run against the installed gpukvd. Then what a packaged
# daemon brings: man pages that render, bash completion, the systemd unit (systemd-analyze verify
# and security), the logrotate snippet, the .deb (cpack), and the Release daemon's resident size
# under floods of wrong tokens. Also checks that libgpukv.so exports every function gpukv.h
# declares and calls nothing that prints or exits. The build links the CUDA runtime statically,
# as the .deb is built (cmake/packaging.cmake).
# Usage: test_install.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/gkv-install-XXXXXX)
prefix=$tmp/prefix
pid= cfgpid= authpid=
# Every daemon this script started is stopped, also when a check fails half-way (a bare wait
# would otherwise wait for one still running).
cleanup() {
    for p in $pid $cfgpid $authpid; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"

# No prefix at configure time: `--prefix` at install time is what the README tells users.
cmake -S "$src" -B "$tmp/build" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DGKV_BUILD_TESTS=OFF \
    -DGKV_CUDART=cudart_static >"$tmp/configure.log" || { cat "$tmp/configure.log"; fail configure; }
cmake --build "$tmp/build" -j "$(nproc)" >"$tmp/build.log" || { cat "$tmp/build.log"; fail build; }
cmake --install "$tmp/build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name libgpukv.so -print -quit)")
[ -f "$libdir/libgpukv.a" ] || fail "libgpukv.a not installed"

# Every function the header declares is exported; nothing in the library prints or exits.
want=$(grep -oE 'GKV_EXPORT [^(]*gkv_[a-z_]+\(' "$prefix/include/gpukv/gpukv.h" |
    grep -oE 'gkv_[a-z_]+\($' | tr -d '(' | sort -u)
have=$(nm -D --defined-only "$libdir/libgpukv.so" | awk '$2 == "T" {print $3}' | sort -u)
missing=$(comm -23 <(echo "$want") <(echo "$have"))
[ -z "$missing" ] || fail "declared in gpukv.h but not exported: $missing"
[ "$(echo "$want" | wc -l)" -ge 30 ] || fail "found too few declarations in gpukv.h"
bad=$(nm -D --undefined-only "$libdir/libgpukv.so" |
    grep -wE 'exit|_exit|abort|printf|fprintf|vfprintf|puts|fputs|perror' || true)
[ -z "$bad" ] || fail "libgpukv.so calls what a library must not: $bad"
# The static library is complete: linking it needs no object of this build tree.
archive=$(nm --defined-only "$libdir/libgpukv.a" 2>/dev/null)
for sym in gkv_strerror gkv_wr_begin gkv_resp_decode gkv_default_socket; do
    grep -qw "$sym" <<<"$archive" || fail "libgpukv.a lacks $sym"
done

# The README's example and build lines, as the README shows them.
mkdir -p "$tmp/hello"
awk '/<!-- example hello.c/ {on = 1; next} on && /^```c/ {inside = 1; next}
     inside && /^```/ {exit} inside {print}' "$src/README.md" >"$tmp/hello/hello.c"
grep -q 'gkv_client_connect' "$tmp/hello/hello.c" || fail "no example found in README.md"
pc_line=$(grep -m1 -E '^cc hello.c .*pkg-config' "$src/README.md" | sed 's/ *#.*//')
cmake_lines=$(awk '/^```cmake/ {on = 1; next} on && /^```/ {exit} on {print}' "$src/README.md")
grep -q 'find_package(gpukv' <<<"$cmake_lines" || fail "no find_package lines in README.md"

# pkg-config as the README says (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig), and seeing nothing but
# gpukv.pc (its users need no other package's .pc file). gpukv.pc finds its prefix from where
# it lies: it names P, not the prefix the build was configured with.
grep -q 'PKG_CONFIG_PATH=PREFIX/lib/pkgconfig' "$src/README.md" || fail "README names no PKG_CONFIG_PATH"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig PKG_CONFIG_LIBDIR=$tmp/empty
mkdir -p "$tmp/empty"
[ "$(realpath "$(pkg-config --variable=prefix gpukv)")" = "$(realpath "$prefix")" ] ||
    fail "gpukv.pc's prefix is $(pkg-config --variable=prefix gpukv), not $prefix"
inc=$(pkg-config --cflags-only-I gpukv | sed 's/^ *-I//; s/ *$//')
[ "$(realpath "$inc")" = "$(realpath "$prefix/include")" ] || fail "pkg-config --cflags: $inc"
# Libs.private's -L names the directory the CUDA runtime is in.
# (Only each word's leading -L goes: a temporary directory's name may hold "-L" itself.)
for d in $(pkg-config --static --libs-only-L gpukv); do
    d=${d#-L}
    [ -d "$d" ] || fail "pkg-config --static names a directory that does not exist: $d"
done
if grep -q cudart <<<"$(pkg-config --static --libs gpukv)"; then
    cudart_dir=$(pkg-config --static --libs-only-L gpukv | tr ' ' '\n' | sed -n 's/^-L//p' | tail -1)
    ls "$cudart_dir"/libcudart_static.a >/dev/null 2>&1 || fail "no libcudart_static.a in $cudart_dir"
fi
(cd "$tmp/hello" && eval "$pc_line") || fail "pkg-config build: $pc_line"
static_libs=$(pkg-config --static --libs gpukv)
(cd "$tmp/hello" && cc hello.c $(pkg-config --cflags gpukv) ${static_libs/-lgpukv/-l:libgpukv.a} \
    -o hello_pc_static) || fail "pkg-config --static build"
grep -q libgpukv <<<"$(ldd "$tmp/hello/hello_pc_static")" &&
    fail "static build still needs libgpukv.so"

# find_package, with pkg-config unable to find anything.
unset PKG_CONFIG_PATH
mkdir -p "$tmp/cm"
cat >"$tmp/cm/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(hello C)
add_executable(hello $tmp/hello/hello.c)
$cmake_lines
add_executable(hello_static $tmp/hello/hello.c)
target_link_libraries(hello_static PRIVATE gpukv::gpukv_static)
CMAKE
PKG_CONFIG_LIBDIR=$tmp/empty cmake -S "$tmp/cm" -B "$tmp/cm/build" -G "$gen" \
    -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "find_package configure"; }
cmake --build "$tmp/cm/build" >>"$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "find_package build"; }
unset PKG_CONFIG_LIBDIR

# Against the installed daemon.
sock=$tmp/gpukv.sock
"$prefix/bin/gpukvd" --socket "$sock" --backend host --maxmemory 64M 2>"$tmp/gpukvd.log" &
pid=$!
for _ in $(seq 100); do "$prefix/bin/gpukv" -s "$sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
expect='read 4096 of 16384 bytes, meta dtype=u1;shape=16384'
for exe in "$tmp/hello/hello" "$tmp/hello/hello_pc_static" "$tmp/cm/build/hello" \
    "$tmp/cm/build/hello_static"; do
    out=$(LD_LIBRARY_PATH=$libdir "$exe" "unix:$sock") || fail "$exe exited $?"
    [ "$out" = "$expect" ] || fail "$exe printed '$out'"
    echo "ok $(basename "$exe")"
done
# The shared builds really use the installed library.
grep -q "$libdir/libgpukv.so" <<<"$(LD_LIBRARY_PATH=$libdir ldd "$tmp/cm/build/hello")" ||
    fail "find_package build does not link the installed libgpukv.so"
# A missing server is an error the example reports, not a crash.
out=$(LD_LIBRARY_PATH=$libdir "$tmp/hello/hello" "unix:$tmp/none.sock" 2>&1) && fail "no server: exit 0"
grep -q CONNECT <<<"$out" || fail "no server: '$out'"

# Man pages, made from the --help texts, render; the CLI's has every command's options.
man -l "$prefix/share/man/man8/gpukvd.8" 2>/dev/null | grep -q -- '--maxmemory-policy' ||
    fail "gpukvd(8) does not render"
man -l "$prefix/share/man/man1/gpukv.1" 2>/dev/null | grep -q 'info \[SECTION\]' ||
    fail "gpukv(1) does not render every command"
echo "ok man pages"
# Bash completion: commands, a command's options, and keys from the daemon.
"$prefix/bin/gpukv" -s "$sock" set comp/alpha 1 >/dev/null
"$prefix/bin/gpukv" -s "$sock" set comp/beta 2 >/dev/null
complete_words() { # complete_words WORD... : what completing the last word offers
    PATH=$prefix/bin:$PATH bash -c '. "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1))
        _gpukv; printf "%s\n" "${COMPREPLY[@]}"' _ "$prefix/share/bash-completion/completions/gpukv" "$@"
}
grep -qx get <<<"$(complete_words gpukv g)" || fail "completion of commands: $(complete_words gpukv g)"
grep -qx -- --offset <<<"$(complete_words gpukv get --of)" || fail "completion of options"
[ "$(complete_words gpukv -s "$sock" get comp/a)" = comp/alpha ] ||
    fail "completion of keys: '$(complete_words gpukv -s "$sock" get comp/a)'"
echo "ok bash completion"
# The systemd unit as installed: paths of this prefix, writable state and log directories,
# accepted by systemd-analyze verify, hardened (security exposure at most 3.0).
unit=$prefix/lib/systemd/system/gpukvd.service
grep -q "^ExecStart=$prefix/bin/gpukvd .*--config -$prefix/etc/gpukv/gpukvd.conf" "$unit" ||
    fail "the unit's ExecStart: $(grep ^ExecStart "$unit")"
grep -q '^StateDirectory=gpukv' "$unit" && grep -q '^LogsDirectory=gpukv' "$unit" ||
    fail "the unit makes no state or log directory writable"
[ -f "$prefix/lib/sysusers.d/gpukv.conf" ] && [ -f "$prefix/lib/tmpfiles.d/gpukv.conf" ] &&
    [ -f "$prefix/etc/gpukv/gpukvd.conf" ] && [ -f "$prefix/etc/logrotate.d/gpukv" ] ||
    fail "service files missing: $(cd "$prefix" && find etc lib -type f | sort | tr '\n' ' ')"
# The installed config is the example, every line at its default: the daemon takes it.
"$prefix/bin/gpukvd" --config "$prefix/etc/gpukv/gpukvd.conf" --backend host \
    --socket "$tmp/cfg.sock" --maxmemory 16M >"$tmp/cfg.log" 2>&1 &
cfgpid=$!
for _ in $(seq 100); do "$prefix/bin/gpukv" -s "$tmp/cfg.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$prefix/bin/gpukv" -s "$tmp/cfg.sock" ping >/dev/null || { cat "$tmp/cfg.log"; fail "gpukvd refuses the installed config"; }
kill "$cfgpid"; wait "$cfgpid" || true
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify "$unit" || fail "systemd-analyze verify $unit"
    systemd-analyze security --offline=yes --threshold=30 "$unit" >/dev/null || fail "unit exposure over 3.0"
    echo "ok systemd unit"
fi
if command -v logrotate >/dev/null; then
    logrotate -d "$prefix/etc/logrotate.d/gpukv" >"$tmp/logrotate.log" 2>&1 ||
        { cat "$tmp/logrotate.log"; fail "logrotate refuses the snippet"; }
    echo "ok logrotate snippet"
fi
# The .deb: what it holds, its conffiles and postinst, and its gpukvd runs once unpacked.
if command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null; then
    cpack --config "$tmp/build/CPackConfig.cmake" -G DEB -B "$tmp/deb" >"$tmp/cpack.log" 2>&1 ||
        { cat "$tmp/cpack.log"; fail cpack; }
    deb=$(ls "$tmp"/deb/gpukv_*.deb)
    files=$(dpkg-deb -c "$deb" | awk '{print $6}')
    for f in ./usr/bin/gpukvd ./usr/bin/gpukv ./usr/lib/libgpukv.so.0 ./usr/include/gpukv/gpukv.h \
        ./usr/lib/systemd/system/gpukvd.service ./usr/share/man/man8/gpukvd.8 \
        ./usr/share/bash-completion/completions/gpukv ./etc/gpukv/gpukvd.conf \
        ./etc/logrotate.d/gpukv ./usr/lib/sysusers.d/gpukv.conf; do
        grep -qx -- "$f" <<<"$files" || fail "the .deb lacks $f"
    done
    dpkg-deb -I "$deb" conffiles | grep -qx /etc/gpukv/gpukvd.conf || fail "no conffiles"
    dpkg-deb -I "$deb" postinst | grep -q systemd-sysusers || fail "no postinst"
    grep -q "^ExecStart=/usr/bin/gpukvd .*-/etc/gpukv/gpukvd.conf" \
        <<<"$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/gpukvd.service)" ||
        fail "the .deb's unit does not name /usr/bin/gpukvd and /etc/gpukv"
    dpkg-deb -x "$deb" "$tmp/unpacked"
    LD_LIBRARY_PATH=$tmp/unpacked/usr/lib "$tmp/unpacked/usr/bin/gpukvd" --version | grep -q '^gpukvd ' ||
        fail "the .deb's gpukvd does not run"
    echo "ok $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
fi
# The Release daemon under floods of wrong tokens: its resident size comes back each time
# (AddressSanitizer's allocator, in the other tests, would hide glibc's behaviour).
printf 'install-test-token-0123456789\n' >"$tmp/token"
"$prefix/bin/gpukvd" --socket "$tmp/auth.sock" --backend host --maxmemory 64M \
    --auth-token-file "$tmp/token" 2>"$tmp/auth.log" &
authpid=$!
for _ in $(seq 100); do [ -S "$tmp/auth.sock" ] && break; sleep 0.05; done
python3 "$src/tests/install/auth_flood.py" "$tmp/auth.sock" "$authpid" 3 3000 || fail "auth flood"
kill "$authpid"; wait "$authpid" || true
echo "install test: all passed"

#!/usr/bin/env bash
# test_install.sh: installs a Release build of gpukv into a temporary prefix and builds the
# README's C example against it the ways the README says (pkg-config, find_package; shared and
# static), then runs each build against the installed gpukvd. Also checks that libgpukv.so
# exports every function gpukv.h declares and calls nothing that prints or exits.
# Usage: test_install.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/gkv-install-XXXXXX)
prefix=$tmp/prefix
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"

cmake -S "$src" -B "$tmp/build" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DGKV_BUILD_TESTS=OFF \
    -DCMAKE_INSTALL_PREFIX="$prefix" >"$tmp/configure.log" || { cat "$tmp/configure.log"; fail configure; }
cmake --build "$tmp/build" -j "$(nproc)" >"$tmp/build.log" || { cat "$tmp/build.log"; fail build; }
cmake --install "$tmp/build" >/dev/null
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

# pkg-config, seeing nothing but gpukv.pc (its users need no other package's .pc file).
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig
(cd "$tmp/hello" && eval "$pc_line") || fail "pkg-config build: $pc_line"
static_libs=$(pkg-config --static --libs gpukv)
(cd "$tmp/hello" && cc hello.c $(pkg-config --cflags gpukv) ${static_libs/-lgpukv/-l:libgpukv.a} \
    -o hello_pc_static) || fail "pkg-config --static build"
grep -q libgpukv <<<"$(ldd "$tmp/hello/hello_pc_static")" &&
    fail "static build still needs libgpukv.so"

# find_package, with pkg-config unable to find anything.
mkdir -p "$tmp/empty" "$tmp/cm"
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
echo "install test: all passed"

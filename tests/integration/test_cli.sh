#!/usr/bin/env bash
# test_cli.sh: every gpukv CLI command against a real gpukvd (host backend), with exit codes.
# Usage: test_cli.sh GPUKVD GPUKV
set -u
daemon=$1 cli=$2
dir=$(mktemp -d /tmp/gkv-cli-XXXXXX)
sock=$dir/gpukv.sock
fails=0 passes=0
cleanup() { [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

"$daemon" --socket "$sock" --backend "${GKV_TEST_BACKEND:-host}" --maxmemory 256M --host-zero-copy yes \
    2>"$dir/log" &
pid=$!
for _ in $(seq 100); do "$cli" -s "$sock" ping >/dev/null 2>&1 && break; sleep 0.05; done

g() { "$cli" -s "$sock" "$@"; }
check() { # check NAME EXPECTED_EXIT COMMAND...
    local name=$1 want=$2; shift 2
    "$@" >"$dir/out" 2>"$dir/err"
    local got=$?
    if [ "$got" = "$want" ]; then passes=$((passes + 1))
    else fails=$((fails + 1)); echo "FAIL $name: exit $got, wanted $want"; cat "$dir/err"; fi
}
expect_out() { # expect_out NAME TEXT
    if [ "$(cat "$dir/out")" = "$2" ]; then passes=$((passes + 1))
    else fails=$((fails + 1)); echo "FAIL $1: got '$(cat "$dir/out")', wanted '$2'"; fi
}

check ping 0 g ping;                      expect_out ping PONG
check set 0 g set greeting hello
check get 0 g get greeting;               expect_out get hello
# get writes the exact bytes: no newline added when stdout is not a terminal.
g get greeting >"$dir/raw"; [ "$(stat -c %s "$dir/raw")" = 5 ] && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL exact bytes"; }
head -c 3000000 /dev/urandom >"$dir/blob"
check set-file 0 g set blob -f "$dir/blob"
check get-file 0 g get blob -o "$dir/blob.out"
cmp -s "$dir/blob" "$dir/blob.out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL file round trip"; }
printf 'from\0stdin' | g set piped - && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL set -"; }
g get piped | cmp -s - <(printf 'from\0stdin') && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL stdin bytes"; }
check range 0 g get greeting --offset 1 --length 3; expect_out range ell
check suffix 0 g get greeting --suffix 2;           expect_out suffix lo
check range-past-end 1 g get greeting --offset 99
check nx 1 g set greeting x --nx
check xx 0 g set greeting hi --xx
check size 0 g size greeting;             expect_out size 2
g set a/b/1 x; g set a/b/2 yy; g set a/c zzz
check size-prefix 0 g size --prefix a/;   expect_out size-prefix "6 bytes in 3 keys"
check ls 0 g ls a/;                       expect_out ls "$(printf 'a/b/1\na/b/2\na/c')"
check ls-dir 0 g ls a/ --dir;             expect_out ls-dir "$(printf 'a/b/\na/c')"
check ls-long 0 g ls a/c -l;              expect_out ls-long "           3           -  gpu0   a/c"
# getopt_long conventions: --opt=value, bundled short options, "--" before a key that starts
# with '-', options after operands.
check opt-equals 0 g get --offset=1 --length=1 greeting; expect_out opt-equals i
check ls-bundled 0 g ls -ld a/;           expect_out ls-bundled "$(printf '         DIR                     a/b/\n           3           -  gpu0   a/c')"
check dashdash-set 0 g set -- -odd value
check dashdash-get 0 g get -- -odd;       expect_out dashdash-get value
check meta-equals 0 g set --meta=m1 withmeta v
check get-meta 0 g get withmeta --meta;   expect_out get-meta m1
check cmd-help 0 g get --help
grep -q '^usage: gpukv .*get KEY' "$dir/out" && grep -q -- '--offset N' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL get --help"; cat "$dir/out"; }
check info-prometheus 0 g info --prometheus
grep -q '^gpukv_commands_total{command="set"} [1-9]' "$dir/out" && grep -q '^# TYPE gpukv_command_duration_seconds histogram' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL info --prometheus"; head "$dir/out"; }
# Deadlines: set --ttl, ttl, expire, persist.
check set-ttl 0 g set short v --ttl 60000
check ttl 0 g ttl short
[ "$(cat "$dir/out")" -gt 50000 ] 2>/dev/null && [ "$(cat "$dir/out")" -le 60000 ] && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL ttl value: $(cat "$dir/out")"; }
check ls-ttl 0 g ls short -l
grep -Eq '^ +1  +[0-9]+ms  gpu0   short$' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL ls -l ttl: $(cat "$dir/out")"; }
check persist 0 g persist short;          expect_out persist 1
check ttl-none 0 g ttl short;             expect_out ttl-none none
check expire 0 g expire short 50;         expect_out expire 1
check expire-missing 1 g expire nobody 50
sleep 0.1
check expired 1 g get short
check usage-ttl-zero 2 "$cli" -s "$dir/nobody.sock" set k v --ttl 0
check usage-expire-ms 2 "$cli" -s "$dir/nobody.sock" expire k soon
# del --prefix, and del of more keys than one request takes (split by the CLI).
g set dp/a 1 >/dev/null; g set dp/b 2 >/dev/null; g set dq 3 >/dev/null
check del-prefix 0 g del --prefix dp/;     expect_out del-prefix 2
check del-prefix-left 0 g exists dq;       expect_out del-prefix-left 1
check del-many 0 g del $(seq -f 'many%g' 5000); expect_out del-many 0
check usage-del-both 2 "$cli" -s "$dir/nobody.sock" del k --prefix p
# Usage errors exit 2 before connecting: against a socket nobody listens on they still get 2.
nob() { "$cli" -s "$dir/nobody.sock" "$@"; }
check usage-missing-key 2 nob get
check usage-bad-number 2 nob get k --offset=lots
check usage-unknown-option 2 nob get k --bogus
grep -q -- "unknown option --bogus" "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL unknown option named"; cat "$dir/err"; }
check usage-missing-value 2 nob get k -o
check usage-nx-xx 2 nob set k v --nx --xx
check usage-unreadable-file 2 nob set k -f "$dir/none"
check usage-size-both 2 nob size k --prefix p
check usage-extra-operand 2 nob get a b
check usage-unwritable-output 2 nob get k -o "$dir/no/such/dir"
check usage-bad-global 2 nob --frobnicate ping
check help-without-server 0 nob set --help
check version 0 nob --version
check exists 0 g exists a/c missing;      expect_out exists 1
check exists-missing 1 g exists missing
check del 0 g del a/c missing;            expect_out del 1
check get-missing 1 g get a/c
grep -q NOTFOUND "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL error names its code"; }
check map 0 g map greeting
grep -q '^checksum: ' "$dir/out" && grep -q '^bytes:    2 ' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL map output"; cat "$dir/out"; }
check map-missing 1 g map nothing
check locate-alone 0 g locate greeting;   expect_out "locate-alone" "this daemon (it is in no cluster)"
check locate-missing 1 g locate nothing
check cluster-off 0 g cluster
grep -q '^cluster_enabled:0' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL cluster section off"; }
check info 0 g info
grep -q '^keys:' "$dir/out" && grep -q '^leases:0' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL info keys/leases"; }
ok() { passes=$((passes + 1)); }
bad() { fails=$((fails + 1)); echo "FAIL $*"; }
# Issue 32. info SECTION, as redis-cli takes it: one section; an unknown one lists the others.
check info-section 0 g info memory
head -1 "$dir/out" | grep -q '^# Memory' && grep -q '^used_bytes:' "$dir/out" && ! grep -q '^keys:' "$dir/out" && ok || bad "info memory: $(head -3 "$dir/out")"
check info-section-spaces 0 g info host-copies
head -1 "$dir/out" | grep -q '^# Host copies' && ok || bad "info host-copies"
check info-unknown-section 2 g info nosuch
grep -q "no section 'nosuch'.*Memory" "$dir/err" && ok || bad "info nosuch: $(cat "$dir/err")"
# get -o FILE keeps an existing FILE when the key is missing or the range is bad.
printf 'precious' >"$dir/keep"
check get-o-missing 1 g get nosuchkey -o "$dir/keep"
[ "$(cat "$dir/keep")" = precious ] && ok || bad "get -o of a missing key emptied the file"
check get-o-range 1 g get greeting --offset 99 -o "$dir/keep"
[ "$(cat "$dir/keep")" = precious ] && ok || bad "get -o of a bad range emptied the file"
[ -z "$(ls "$dir" | grep gpukv-)" ] && ok || bad "get -o left a temporary file: $(ls "$dir")"
check get-o-replaces 0 g get greeting -o "$dir/keep"
[ "$(cat "$dir/keep")" = hi ] && ok || bad "get -o did not replace the file"
check get-o-devnull 0 g get greeting -o /dev/null
# --length 0 and --suffix 0 would read the whole value: refused.
# get/map --wait: a key that appears while the CLI waits; one that never does (TIMEDOUT).
( sleep 0.3; g set late "arrived" ) &
check wait-get 0 g get late --wait 5000;     expect_out wait-get arrived
check wait-timeout 1 g get never --wait 200
grep -q 'TIMEDOUT' "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL wait-timeout message"; cat "$dir/err"; }
( sleep 0.3; g set late-map "mapped" ) &
check wait-map 0 g map late-map --wait 5000
grep -q 'bytes:    6 ' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL wait-map"; cat "$dir/out"; }
# watch: a change while the CLI watches (--local: on a daemon alone, the same watch).
( sleep 0.3; g set w/1 "xyz" ) &
check watch-local 0 g watch w/ --local --count 1
grep -q ' set 3 w/1$' "$dir/out" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL watch-local"; cat "$dir/out"; }
check watch-for 0 g watch w/ --for 100
# --after: needs --wait; this daemon keeps no versions (NOTSUP, exit 1).
check usage-after-no-wait 2 nob get k --after 5
check usage-after-bad 2 nob get k --wait 100 --after x
check after-notsup 1 g get late --wait 100 --after 0
grep -q 'NOTSUP' "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL after-notsup"; cat "$dir/err"; }
check usage-wait-zero 2 nob get k --wait 0
check usage-wait-over 2 nob get k --wait 3600001
check usage-length-zero 2 nob get k --length 0
check usage-suffix-zero 2 nob get k --suffix 0
# del --prefix "" deletes everything: it needs --yes, as flush does.
g set keepme v >/dev/null
check usage-del-all 2 g del --prefix ""
check del-all-kept 0 g exists keepme;       expect_out del-all-kept 1
# expire of a missing key says so.
check expire-missing-says 1 g expire nobody 50
grep -q "no key 'nobody'" "$dir/err" && ok || bad "expire of a missing key: '$(cat "$dir/err")'"
# set from streams: a pipe (more than the 64 MiB kept in memory: the rest goes to $TMPDIR),
# -f /dev/stdin, -f <(cmd), -f - .
head -c $((70 << 20)) /dev/urandom >"$dir/big"
cat "$dir/big" | g set big - && g get big | cmp -s - "$dir/big" && ok || bad "set - of 70 MiB"
g set devstdin -f /dev/stdin <"$dir/blob" && g get devstdin | cmp -s - "$dir/blob" && ok || bad "set -f /dev/stdin"
g set procsub -f <(cat "$dir/blob") && g get procsub | cmp -s - "$dir/blob" && ok || bad "set -f <(cmd)"
printf 'dash' | g set dashf -f - && [ "$(g get dashf)" = dash ] && ok || bad "set -f -"
printf '' | g set empty - && [ "$(g size empty)" = 0 ] && ok || bad "set - of nothing"
check usage-set-dir 2 nob set k -f "$dir"
rm -f "$dir/big"
# --help lists only commands the CLI runs: each one's own --help works.
check help 0 "$cli" --help
for cmd in $(sed -n '/^commands:/,/^$/p' "$dir/out" | awk 'NF > 1 {print $1}'); do
    "$cli" "$cmd" --help >/dev/null 2>&1 && ok || bad "gpukv --help lists '$cmd', which the CLI refuses"
done
grep -qE '^  (mget|hello|takeover|list) ' "$dir/out" && bad "gpukv --help lists protocol operations" || ok
check help-all 0 "$cli" --help-all
grep -q -- '--prefix PREFIX' "$dir/out" && grep -q 'usage: gpukv \[GLOBAL OPTIONS\] info \[SECTION\]' "$dir/out" && ok || bad "--help-all"
# map on a daemon that refuses zero-copy gives the daemon's reason, not protocol words.
"$daemon" --socket "$dir/nozc.sock" --backend host --maxmemory 16M 2>>"$dir/log" &
nozc=$!
for _ in $(seq 100); do "$cli" -s "$dir/nozc.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$cli" -s "$dir/nozc.sock" set k v >/dev/null
check map-no-zero-copy 1 "$cli" -s "$dir/nozc.sock" map k
grep -q -- '--host-zero-copy yes' "$dir/err" && ! grep -q 'HELLO' "$dir/err" && ok || bad "map's reason: $(cat "$dir/err")"
kill -TERM "$nozc"; wait "$nozc"
# The default socket's path is named when nothing listens there.
want=$dir/xdg/gpukv/gpukv.sock
[ "$(id -u)" = 0 ] && want=/run/gpukv/gpukv.sock
if [ -S "$want" ]; then ok; else
    check connect-default 3 env -u GPUKV_URL XDG_RUNTIME_DIR="$dir/xdg" "$cli" ping
    grep -q "unix:$want (the default socket)" "$dir/err" && ok || bad "default socket not named: $(cat "$dir/err")"
fi
check flush-unconfirmed 2 g flush
check flush 0 g flush --yes
check empty-after-flush 1 g get greeting
check usage-no-command 2 "$cli" -s "$sock"
check usage-unknown 2 g frobnicate
check usage-set 2 g set onlykey
check connect-fail 3 "$cli" -s "$dir/nobody.sock" ping
grep -q "nobody.sock.*No such file" "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL connect error names URL and errno"; cat "$dir/err"; }
check bad-url 2 "$cli" -u "http://x" ping

kill -TERM "$pid"; wait "$pid"; status=$?; pid=
[ "$status" = 0 ] && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL daemon exit $status"; }

# A daemon with a token: the CLI needs --token-file (or GPUKV_TOKEN / GPUKV_TOKEN_FILE).
printf 'cli-test-token-0123456789\n' >"$dir/token"; chmod 600 "$dir/token"
"$daemon" --socket "$sock" --backend "${GKV_TEST_BACKEND:-host}" --maxmemory 64M \
    --auth-token-file "$dir/token" 2>>"$dir/log" &
pid=$!
for _ in $(seq 100); do GPUKV_TOKEN_FILE=$dir/token "$cli" -s "$sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
check token-file 0 g --token-file "$dir/token" ping
check token-file-eq 0 "$cli" -s "$sock" --token-file="$dir/token" set k v
check token-missing 3 env -u GPUKV_TOKEN -u GPUKV_TOKEN_FILE "$cli" -s "$sock" info
grep -q 'needs its token' "$dir/err" && passes=$((passes+1)) || { fails=$((fails+1)); echo "FAIL token hint"; cat "$dir/err"; }
check token-env 0 env GPUKV_TOKEN=cli-test-token-0123456789 "$cli" -s "$sock" get k
check token-file-unreadable 2 g --token-file "$dir/none" ping
kill -TERM "$pid"; wait "$pid"; pid=
echo "cli: $passes passed, $fails failed"
[ "$fails" = 0 ]

#!/usr/bin/env bash
# test_unit.sh: the systemd files in deploy/ as systemd reads them: the unit's hardening scored
# by `systemd-analyze security` (exposure at most 3.0), sysusers.d and tmpfiles.d entries parsed
# by their tools in dry-run modes. Skipped (77) without systemd-analyze.
#   tests/service/test_unit.sh SOURCE_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
command -v systemd-analyze >/dev/null || { echo "no systemd-analyze: skipped"; exit 77; }
unit=$src/deploy/gpukvd.service
out=$(systemd-analyze security --offline=yes --threshold=30 "$unit" 2>&1)
rc=$?
echo "$out" | tail -1
[ $rc -eq 0 ] || { echo "$out" | grep -E "✗" | head -40; echo "FAIL: exposure over 3.0"; exit 1; }
grep -q '^Type=notify' "$unit" || { echo "FAIL: not Type=notify"; exit 1; }
grep -q '^DeviceAllow=char-nvidia' "$unit" || { echo "FAIL: GPU devices not allowed"; exit 1; }
grep -q "^FileDescriptorStoreMax=" "$unit" || { echo "FAIL: no fd store for --fd-store"; exit 1; }
# Under ProtectSystem=strict only these are writable: the README's --snapshot-dir /var/lib/gpukv
# and the config example's log file under /var/log/gpukv need them.
grep -q '^StateDirectory=gpukv$' "$unit" || { echo "FAIL: no StateDirectory=gpukv"; exit 1; }
grep -q '^LogsDirectory=gpukv$' "$unit" || { echo "FAIL: no LogsDirectory=gpukv"; exit 1; }
grep -q 'snapshot-dir = /var/lib/gpukv' "$src/deploy/gpukvd.conf.example" &&
    grep -q 'log-file = /var/log/gpukv/' "$src/deploy/gpukvd.conf.example" ||
    { echo "FAIL: the config example's paths are not the unit's directories"; exit 1; }
# The unit as systemd loads it: verify needs its ExecStart to exist, so a copy names a real one.
if [ -n "${GPUKVD:-}" ]; then
    tmpunit=$(mktemp -d)/gpukvd.service
    sed "s#/usr/local/bin/gpukvd#$GPUKVD#" "$unit" >"$tmpunit"
    systemd-analyze verify "$tmpunit" || { echo "FAIL: systemd-analyze verify"; exit 1; }
    rm -rf "$(dirname "$tmpunit")"
fi
if command -v systemd-sysusers >/dev/null; then
    systemd-sysusers --dry-run "$src/deploy/gpukv.sysusers" >/dev/null 2>&1 ||
        { systemd-sysusers --dry-run "$src/deploy/gpukv.sysusers"; echo "FAIL: sysusers"; exit 1; }
fi
if command -v systemd-tmpfiles >/dev/null; then
    tmp=$(mktemp -d)
    systemd-tmpfiles --create --root="$tmp" "$src/deploy/gpukv.tmpfiles" 2>&1 | grep -v "Failed to resolve user\|Failed to resolve group" | grep -i "fail\|error" && { echo "FAIL: tmpfiles"; exit 1; }
    rm -rf "$tmp"
fi
echo "ok"

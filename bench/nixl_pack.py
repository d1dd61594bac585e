#!/usr/bin/env python3
"""nixl_pack.py: the part of an installed nixl-cu13 wheel that gpukvd's --nixl needs (its C
library, the UCX plugin, what they link and UCX's transport modules, the dist-info's METADATA),
copied with the wheel's layout kept (the libraries find each other through relative RPATHs)
into OUT/site, for carrying to a machine without a package registry (the device tool: 7 MB
instead of the wheel's 59). Usage: nixl_pack.py SITE_PACKAGES OUT; then --nixl OUT/site."""
import os
import shutil
import subprocess
import sys

site, out = os.path.realpath(sys.argv[1]), os.path.join(sys.argv[2], "site")
libs = os.path.join(site, ".nixl_cu13.mesonpy.libs")
ucx = os.path.join(site, "nixl_cu13.libs", "ucx")
roots = [os.path.join(libs, "libnixl_capi.so"), os.path.join(libs, "plugins", "libplugin_UCX.so")]
roots += [os.path.join(ucx, f) for f in os.listdir(ucx) if f.endswith(".so.0.0.0") and "perftest" not in f]
want = set(roots)
for r in roots:
    for line in subprocess.run(["ldd", r], capture_output=True, text=True).stdout.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].strip().startswith("/"):
            path = os.path.realpath(parts[1].split("(")[0].strip())
            if path.startswith(site + os.sep):
                want.add(path)
want |= {os.path.join(site, d, "METADATA") for d in os.listdir(site)
         if d.startswith("nixl_cu13-") and d.endswith(".dist-info")}
for path in sorted(want):
    dst = os.path.join(out, os.path.relpath(os.path.realpath(path), site))
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(path, dst)
print(f"{len(want)} files in {out}")

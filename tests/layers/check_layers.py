#!/usr/bin/env python3
"""check_layers.py: the daemon's layers call only down (docs/architecture.md).

Two checks, each failing with the offending file and what it reached:
  includes ROOT        every #include "x.h" in server/, common/, proto/ resolves to a header of
                       the file's own folder or of a layer below it; a private header (*_impl.h,
                       and common/mem/backend_cuda.h) only from its own folder.
  symbols NAME=LIB...  every gkv_* symbol a layer's static library leaves undefined is defined
                       by that library or by one of the layers below it (a call up the stack
                       links only through a callback, which is no symbol).
"""
import os
import re
import subprocess
import sys

# Each layer and the layers it may use (directly or not), top to bottom.
BELOW = {
    "daemon": ["net", "cmd", "cluster", "plane", "persist", "xfer", "store", "mem", "proto",
               "common"],
    "net": ["cmd", "cluster", "plane", "persist", "xfer", "store", "mem", "proto", "common"],
    "cmd": ["cluster", "plane", "xfer", "store", "mem", "proto", "common"],
    "cluster": ["plane", "xfer", "store", "mem", "proto", "common"],
    "plane": ["mem", "proto", "common"],
    "persist": ["xfer", "store", "mem", "proto", "common"],
    "xfer": ["store", "mem", "proto", "common"],
    "store": ["mem", "proto", "common"],
    "mem": ["proto", "common"],
    "proto": ["common"],
    "common": [],
}
FOLDER = {
    "daemon": "server/daemon", "net": "server/net", "cmd": "server/cmd",
    "cluster": "server/cluster", "plane": "server/plane", "persist": "server/persist", "xfer": "server/xfer", "store": "server/store",
    "mem": "common/mem", "proto": "proto", "common": "common",
}
PRIVATE = re.compile(r"(_impl\.h|^backend_cuda\.h)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def headers(root):
    """Header name -> the layer whose folder holds it."""
    owner = {}
    for layer, folder in FOLDER.items():
        d = os.path.join(root, folder)
        for f in os.listdir(d):
            if f.endswith(".h"):
                owner.setdefault(f, layer)
    return owner


def check_includes(root):
    owner = headers(root)
    public = os.path.join(root, "include")
    bad = []
    for layer, folder in FOLDER.items():
        d = os.path.join(root, folder)
        for f in sorted(os.listdir(d)):
            if not f.endswith((".c", ".h", ".cu")):
                continue
            text = open(os.path.join(d, f), encoding="utf-8").read()
            for inc in INCLUDE.findall(text):
                name = os.path.basename(inc)
                if os.path.exists(os.path.join(d, inc)):
                    continue  # its own folder
                if os.path.exists(os.path.join(public, inc)):
                    continue  # the public C API (include/gpukv)
                to = owner.get(name)
                if to is None:
                    bad.append(f"{folder}/{f}: includes \"{inc}\", which no layer has")
                elif to not in BELOW[layer]:
                    bad.append(f"{folder}/{f}: includes \"{inc}\" of {FOLDER[to]}/, a layer "
                               f"that is not below {layer}")
                elif PRIVATE.search(name):
                    bad.append(f"{folder}/{f}: includes \"{inc}\", private to {FOLDER[to]}/")
    return bad


def nm(lib):
    out = subprocess.run(["nm", "-g", lib], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRVW":
            defined.add(parts[2])
    return defined, undefined


def check_symbols(pairs):
    libs = dict(p.split("=", 1) for p in pairs)
    syms = {layer: nm(path) for layer, path in libs.items()}
    bad = []
    for layer, (defined, undefined) in syms.items():
        for sym in sorted(undefined):
            if not sym.startswith("gkv") or sym in defined:
                continue
            home = [l for l, (d, _) in syms.items() if sym in d]
            if home and not any(h in BELOW[layer] for h in home):
                bad.append(f"{FOLDER[layer]}: calls {sym}, defined by {FOLDER[home[0]]}/, a "
                           f"layer that is not below {layer}")
    return bad


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("includes", "symbols"):
        print(__doc__)
        return 2
    bad = check_includes(sys.argv[2]) if sys.argv[1] == "includes" else check_symbols(sys.argv[2:])
    for b in bad:
        print(b)
    print(f"{sys.argv[1]}: {'%d violations' % len(bad) if bad else 'every layer calls only down'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

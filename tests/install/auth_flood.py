#!/usr/bin/env python3
"""auth_flood.py: floods a gpukvd (started with --auth-token-file) with HELLOs that carry wrong
tokens and checks that its resident size comes back after each flood instead of creeping up
(issue 32: ~3 MiB more per 1,000 failed HELLOs in a Release build, never returned).
Run against a Release build: AddressSanitizer's allocator hides what glibc's does.
Usage: auth_flood.py SOCKET PID [FLOODS] [PER_FLOOD]"""
import socket
import struct
import sys
import time


def hello(token):
    # A msgpack map {op: 1 (HELLO), id: 1, token (47): bin}.
    body = b"\x83\x00\x01\x01\x01\x2f\xc4" + bytes([len(token)]) + token
    return struct.pack(">I", len(body)) + body


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit("FAIL: no VmRSS for pid %d" % pid)


def flood(path, n):
    open_socks = []
    for i in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(hello(b"wrong-token-%06d" % i))
        open_socks.append(s)
        if len(open_socks) >= 200:
            for x in open_socks:
                x.close()
            open_socks = []
    for x in open_socks:
        x.close()


def main():
    path, pid = sys.argv[1], int(sys.argv[2])
    floods = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    per = int(sys.argv[4]) if len(sys.argv) > 4 else 3000
    settled = []
    for k in range(floods):
        flood(path, per)
        # Failed HELLOs are held up to 5 s, then closed; the heap is trimmed within 5 s more.
        time.sleep(11)
        settled.append(rss_kib(pid))
        print("flood %d: %d failed HELLOs, resident %d KiB after" % (k + 1, per, settled[-1]))
    growth = settled[-1] - settled[0]
    if growth > 2048:
        raise SystemExit("FAIL: resident size grew %d KiB over %d floods" % (growth, floods - 1))
    print("ok: resident size after the first flood %d KiB, after the last %d KiB"
          % (settled[0], settled[-1]))


if __name__ == "__main__":
    main()

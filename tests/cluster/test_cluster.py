#!/usr/bin/env python3
"""test_cluster.py: three (and more) gpukvd nodes forming a cluster through a private etcd
(docs/cluster.md), on loopback, or (as root) on a veth pair with the third node in a network
namespace of its own, so that a partition can cut it off. Each check prints ok or FAIL; the exit status is 0 when all
passed, 77 when this machine has no etcd or no gpukv Python package (skipped).

Usage: test_cluster.py GPUKVD [NAME...]   (NAME: run only the checks whose name contains it)"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

try:
    import gpukv
except ImportError:
    print("no gpukv Python package: skipped")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_fixture import Cluster, wait_for  # noqa: E402
from linearizability import Op, linearizable  # noqa: E402

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def get(c, key):
    """The value, or None for a missing key."""
    try:
        return c.get(key)
    except gpukv.NotFound:
        return None


def rand_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


@check
def writes_read_bit_exact_on_every_node(cl: Cluster):
    sizes = [0, 1, 100, 4096, 65537, 1 << 20, 3 * (1 << 20) + 7]
    for i, size in enumerate(sizes):
        writer = cl.nodes[i % 3]
        value = rand_bytes(size, i)
        with writer.client() as c:
            c.set(f"bits/{i}", value)
        for node in cl.nodes:
            with node.client() as c:
                got = get(c, f"bits/{i}")
                assert got == value, f"{node.name} read {len(got)} bytes of {size} (written on {writer.name})"
                # A second read serves the replica (or the owner's copy) again.
                assert get(c, f"bits/{i}") == value
    pulled = sum(n.info()["bytes_pulled"] for n in cl.nodes)
    assert pulled > 0, "no node pulled a value from another"


@check
def overwrite_and_delete_are_seen_everywhere(cl: Cluster):
    for round_ in range(6):
        writer = cl.nodes[round_ % 3]
        value = f"value-{round_}".encode()
        with writer.client() as c:
            c.set("ow/key", value)
        for node in cl.nodes:
            with node.client() as c:
                assert get(c, "ow/key") == value, f"{node.name} after a write on {writer.name}"
    with cl.nodes[1].client() as c:
        assert c.delete("ow/key") == 1
    for node in cl.nodes:
        with node.client() as c:
            assert get(c, "ow/key") is None, f"{node.name} still reads a deleted key"
            assert c.exists("ow/key") == 0


MISSES = ("no_record", "gone_here", "owned_gone", "home_said", "rounds")


def misses(node) -> dict:
    """node's INFO read_misses_* by path."""
    i = node.info()
    return {m: i[f"read_misses_{m}"] for m in MISSES}


@check
def a_read_that_finds_nothing_counts_the_path_that_decided_it(cl: Cluster):
    # A missing key read on its home is decided there (no record); read on another node, by
    # the home's answer. The paths that should stay rare (a copy of ours without its value,
    # the home naming us round after round) do not move on such reads.
    for want in range(3):
        home = cl.nodes[want]
        for k in range(200):
            key = f"miss/{want}/{k}"
            before = home.info()["keys_homed"]
            with cl.nodes[0].client() as c:
                c.set(key, b"x")
                homed_here = home.info()["keys_homed"] > before
                c.delete(key)
            if homed_here:
                break
        else:
            raise AssertionError(f"no key homed on {home.name}")
        other = cl.nodes[(want + 1) % 3]
        b_home, b_other = misses(home), misses(other)
        for node in (home, other):
            with node.client() as c:
                assert get(c, key) is None
        a_home, a_other = misses(home), misses(other)
        # (Just after a member change the home asks itself, as any node would: home_said.)
        assert (a_home["no_record"] - b_home["no_record"]) + (
            a_home["home_said"] - b_home["home_said"]) == 1, (home.name, b_home, a_home)
        assert a_other["home_said"] == b_other["home_said"] + 1, (other.name, b_other, a_other)
        for m in ("owned_gone", "rounds"):
            assert a_home[m] == b_home[m] and a_other[m] == b_other[m], (m, a_home, a_other)
        with other.client() as c:
            metrics = c.metrics()
        assert f'gpukv_cluster_read_misses_total{{path="home_said"}} {a_other["home_said"]}' \
            in metrics, metrics[-3000:]


def events_until(w, last: str, timeout: float = 10.0) -> list:
    """(kind, key) of w's events up to the set of key `last` (included)."""
    seen, until = [], time.monotonic() + timeout
    while True:
        ev = w.get(max(0.0, until - time.monotonic()))
        assert ev is not None, f"no set of {last} within {timeout}s; saw {seen}"
        seen.append((ev.kind, ev.key))
        if ev.kind == "set" and ev.key == last:
            return seen


@check
def each_node_watches_the_values_it_owns(cl: Cluster):
    n1, n2 = cl.nodes[0], cl.nodes[1]
    with n1.client() as c1, n2.client() as c2:
        w1, w2 = c1.watch("wt/", local=True), c2.watch("wt/", local=True)
        try:
            c1.set("wt/a", b"1")  # n1 owns it
            c2.set("wt/b", b"22")  # n2 owns it
            c1.set("other/x", b"out of the prefix")
            assert get(c1, "wt/b") == b"22"  # n1 keeps a replica: no event there
            assert get(c1, "wt/b") == b"22"
            c2.set("wt/a", b"333")  # now n2's; n1's copy goes without an event
            assert get(c1, "wt/a") == b"333"  # a replica on n1 again: no event
            c2.delete("wt/b")  # n2's copy deleted: an event on n2
            c1.set("wt/end1", b"")
            c2.set("wt/end2", b"")
            got1, got2 = events_until(w1, "wt/end1"), events_until(w2, "wt/end2")
            assert got1 == [("set", "wt/a"), ("set", "wt/end1")], got1
            assert got2 == [("set", "wt/b"), ("set", "wt/a"), ("delete", "wt/b"),
                            ("set", "wt/end2")], got2
            # What n1 owns and deletes on the other node's request is an event on n1.
            c2.delete("wt/end1")
            c1.set("wt/end3", b"")
            got1 = events_until(w1, "wt/end3")
            assert got1 == [("delete", "wt/end1"), ("set", "wt/end3")], got1
        finally:
            w1.close()
            w2.close()


def try_set(c, key: str) -> bool:
    try:
        c.set(key, b"")
        return True
    except (gpukv.Unavailable, gpukv.Busy):  # its home died a moment ago: members changing
        return False


def clients_stat(node, name: str) -> int:
    """A figure of the node's INFO "# Clients" section."""
    with node.client() as c:
        return c.info("clients")[name]


def watching(node) -> int:
    return clients_stat(node, "watching_clients")


@check
def a_watch_spans_the_cluster(cl: Cluster):
    n1, n2, n3 = cl.nodes[:3]
    with n1.client() as c1, n2.client() as c2, n3.client() as c3:
        w = c1.watch("ws/")  # on n1, of every member's values
        try:
            # Its streams: a watching connection on each other member (opened after the reply).
            wait_for(lambda: watching(n2) == 1 and watching(n3) == 1, 10, "the watch's streams")
            wait_for(lambda: n1.info()["cluster_watch_streams"] == 2, 10, "n1 reading both")
            assert n1.info()["cluster_watches"] == 1
            c1.set("ws/a", b"1")
            c2.set("ws/b", b"22")
            c3.set("ws/c", b"333")
            c2.set("other/x", b"out of the prefix")
            assert get(c1, "ws/b") == b"22" and get(c3, "ws/a") == b"1"  # replicas: no events
            c3.set("ws/b", b"4444")  # now n3's: n2's copy goes without an event
            c1.delete("ws/c")  # n3's copy deleted: n3's event
            for c, end in ((c1, "ws/end1"), (c2, "ws/end2"), (c3, "ws/end3")):
                c.set(end, b"")
            seen, ends, until, nodes = [], set(), time.monotonic() + 10, {}
            while len(ends) < 3:
                ev = w.get(max(0.0, until - time.monotonic()))
                assert ev is not None, f"events missing; saw {seen}"
                seen.append((ev.kind, ev.key))
                nodes.setdefault(ev.key, set()).add(ev.node)
                if ev.key.startswith("ws/end"):
                    ends.add(ev.key)
            # Each event names the member it happened on ("" for n1 itself).
            assert nodes["ws/a"] == {""} and nodes["ws/end2"] == {n2.name}, nodes
            assert nodes["ws/b"] == {n2.name, n3.name} and nodes["ws/c"] == {n3.name}, nodes
            assert sorted(seen) == sorted([
                ("set", "ws/a"), ("set", "ws/b"), ("set", "ws/c"), ("set", "ws/b"),
                ("delete", "ws/c"), ("set", "ws/end1"), ("set", "ws/end2"),
                ("set", "ws/end3")]), seen
            # One node's events come in its order: n3 set ws/c before deleting it.
            assert seen.index(("set", "ws/c")) < seen.index(("delete", "ws/c")), seen
            assert w.get(0.2) is None, "an event after the last"
            # A member that dies ends its stream; the watch goes on with the others.
            n3.kill()
            wait_for(lambda: n1.info()["cluster_watch_streams"] == 1, 10, "n3's stream to end")
            wait_for(lambda: n1.info()["members"] == 2, cl.ttl + 5, "n3 to leave")
            wait_for(lambda: try_set(c2, "ws/after"), 20, "a write once n3 is gone")
            ev = w.get(10)
            assert ev is not None and (ev.key, ev.node) == ("ws/after", n2.name), ev
            assert n1.info()["cluster_watch_streams"] == 1
            # A member that joins gets a stream.
            n3.start()
            cl.wait_members(3)
            wait_for(lambda: n1.info()["cluster_watch_streams"] == 2, 10, "a stream to n3")
            wait_for(lambda: try_set(c2, "ws/again"), 20, "a write with n3 back")
            with n3.client() as c3b:
                c3b.set("ws/from3", b"")
            got = {(e.key, e.node) for e in (w.get(10), w.get(10))}
            assert got == {("ws/again", n2.name), ("ws/from3", n3.name)}, got
        finally:
            w.close()
            if not n3.alive():
                wait_for(lambda: n1.info()["members"] == 2, cl.ttl + 5, "n3 to leave")
                n3.start()
                cl.wait_members(3)
        # The watch's end ends its streams.
        wait_for(lambda: watching(n2) == 0, 10, "the streams to end")
        wait_for(lambda: n1.info()["cluster_watches"] == 0, 10, "the watch to go")


@check
def a_watch_gives_each_keys_events_in_version_order(cl: Cluster):
    n1, n2, n3 = cl.nodes[:3]
    with n1.client() as c1, n2.client() as c2:
        w = c1.watch("wv/")
        try:
            wait_for(lambda: n1.info()["cluster_watch_streams"] == 2, 10, "the watch's streams")
            # Every event of a cluster node carries the key's version; a key written anew (on
            # any node) gets a higher one; its delete names the version that went.
            evs = []
            for c, op in ((c2, "set"), (c1, "set"), (c1, "delete")):
                c.set("wv/a", b"1") if op == "set" else c.delete("wv/a")
                evs.append(w.get(10))  # each before the next write: none of them is late
            a = [(e.kind, e.node, e.version) for e in evs if e]
            assert [(k, n) for k, n, _ in a] == [("set", n2.name), ("set", ""), ("delete", "")], a
            assert 0 < a[0][2] < a[1][2] == a[2][2], a
            # Two writers race on one key from n2 and n3 while n1 watches: the events come on
            # two streams, yet n1 delivers the key's in version order and drops the late ones
            # of an owner the key had left (counted), and nothing else goes missing.
            stale0 = n1.info()["cluster_watch_stale"]
            sent0 = clients_stat(n2, "watch_events_sent") + clients_stat(n3, "watch_events_sent")
            errors = []

            def writer(node, tag):
                try:
                    with node.client() as c:
                        for i in range(1000):
                            c.set("wv/k", f"{tag}{i}".encode())
                        c.set(f"wv/end{tag}", b"")
                except Exception as e:  # noqa: BLE001 (reported below)
                    errors.append(repr(e))

            threads = [threading.Thread(target=writer, args=(n, t))
                       for n, t in ((n2, "b"), (n3, "c"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors
            ends, got, until = set(), [], time.monotonic() + 20
            while len(ends) < 2:
                ev = w.get(max(0.0, until - time.monotonic()))
                assert ev is not None, f"the ends missing; saw {len(got)} events"
                if ev.key.startswith("wv/end"):
                    ends.add(ev.key)
                else:
                    got.append(ev)
            assert w.get(0.3) is None, "an event after the last"
            assert all(e.key == "wv/k" and e.kind == "set" and e.version for e in got), got[:5]
            versions = [e.version for e in got]
            assert all(a < b for a, b in zip(versions, versions[1:])), "out of version order"
            stale = n1.info()["cluster_watch_stale"] - stale0
            members = (clients_stat(n2, "watch_events_sent") + clients_stat(n3, "watch_events_sent")
                       - sent0)  # events the two streams carried
            assert len(got) + 2 + stale == members, (len(got), stale, members)
            # The last event delivered is the value the key holds.
            final = get(c1, "wv/k")
            assert got[-1].size == len(final) and got[-1].node in (n2.name, n3.name), got[-1]
            print(f"  {len(got)} events of wv/k delivered in version order, {stale} late "
                  f"ones dropped, of {members - 2} the members sent")
        finally:
            w.close()


@check
def a_spanning_watcher_that_never_reads_is_cut_and_its_streams_end(cl: Cluster):
    n1, n2 = cl.nodes[0], cl.nodes[1]
    with n1.client() as c1, n2.client() as c2:
        w = c1.watch("wo/")
        try:
            wait_for(lambda: n1.info()["cluster_watch_streams"] == 2, 10, "the watch's streams")
            # n2's values: their events come through n1 to a watcher that reads none of them,
            # past n1's --watch-buffer (8 MiB): about 9,000 events of 900-byte keys.
            key = "wo/" + "k" * 890
            for i in range(20000):
                c2.set(f"{key}{i}", b"")
                if i % 2000 == 1999 and watching(n1) == 0:
                    break
            wait_for(lambda: watching(n1) == 0, 20, "n1 to cut its watcher")
            with n1.client() as c:
                assert c.info("clients")["watches_overflowed"] >= 1
            # Its streams end with it: n2 and n3 hold no watching connection for it.
            wait_for(lambda: n1.info()["cluster_watches"] == 0, 10, "the watch to go")
            wait_for(lambda: watching(n2) == 0 and watching(cl.nodes[2]) == 0, 10,
                     "the members' streams to end")
            try:
                while w.get(5) is not None:
                    pass
                raise AssertionError("the watch ended without OVERFLOW")
            except gpukv.Overflow:
                pass
        finally:
            w.close()
    with n2.client(timeout=120) as c:
        c.delete_prefix("wo/")


def times_out(c, key: str, wait: float, what: str, **kw) -> float:
    """GET of key with wait (and kw, e.g. after) answers TimeoutError, never a value (what
    answered, for the failure); returns the seconds it took."""
    t0 = time.monotonic()
    try:
        c.get(key, wait=wait, **kw)
        raise AssertionError(f"{what} answered")
    except gpukv.TimeoutError:
        pass
    return time.monotonic() - t0


def wait_in_thread(node, key: str, wait: float, out: dict, nbytes: int | None = None):
    """A thread that GETs key on node with wait (get_into a buffer of nbytes when given) and
    puts (value or exception, monotonic time answered) into out[key]."""

    def run():
        try:
            with node.client(timeout=wait + 30) as c:
                if nbytes is None:
                    v = c.get(key, wait=wait)
                else:
                    buf = bytearray(nbytes)
                    n = c.get_into(key, buf, wait=wait)
                    v = bytes(buf[:n])
                out[key] = (v, time.monotonic())
        except Exception as e:  # noqa: BLE001
            out[key] = (e, time.monotonic())

    t = threading.Thread(target=run)
    t.start()
    return t


@check
def a_wait_on_one_node_is_answered_by_a_write_on_another(cl: Cluster):
    n1, n2, n3 = cl.nodes[:3]
    notified0 = n1.info()["cluster_notifies_received"]
    rechecked0 = clients_stat(n1, "key_waits_rechecked")
    # Twelve keys: their homes spread over the three nodes (n1 itself, the writer, the third).
    sizes = [10, 200 << 10, 0, 5000, 1 << 20, 64]
    keys = {f"cw/{i}": rand_bytes(sizes[i % len(sizes)], 700 + i) for i in range(12)}
    got, threads = {}, []
    for i, k in enumerate(keys):
        threads.append(wait_in_thread(n1, k, 20, got, None if i % 2 else 2 << 20))
    wait_for(lambda: clients_stat(n1, "waiting_for_keys") == len(keys), 10, "the waits to park")
    written = {}
    for i, (k, v) in enumerate(keys.items()):
        with (n2, n3)[i % 2].client() as c:
            c.set(k, v)
            written[k] = time.monotonic()
    for t in threads:
        t.join(30)
    for k, v in keys.items():
        value, at = got[k]
        assert value == v, (k, value if isinstance(value, Exception) else len(value))
        # Woken by the home's notification, not by the once-a-second re-check.
        assert at - written[k] < 0.8, (k, at - written[k])
    assert clients_stat(n1, "key_waits_rechecked") == rechecked0
    # Keys homed on n1 itself were woken by n1's own record: the others by NOTIFY.
    assert n1.info()["cluster_notifies_received"] > notified0
    assert clients_stat(n1, "waiting_for_keys") == 0
    for n in cl.nodes:
        wait_for(lambda: n.info()["cluster_wait_interests"] == 0, 5, "the interests to go")


@check
def many_waiters_of_one_key_on_every_node_wake_at_one_write(cl: Cluster):
    got, threads = {}, []
    for node in cl.nodes[:3]:
        for j in range(5):
            # Different keys in got; one key on the wire: the waiters share "mw/one".
            threads.append(wait_in_thread(node, "mw/one", 20, got.setdefault(f"{node.name}{j}",
                                                                            {})))
    wait_for(lambda: sum(clients_stat(n, "waiting_for_keys") for n in cl.nodes[:3]) == 15, 10,
             "fifteen waits to park")
    with cl.nodes[1].client() as c:
        c.set("mw/one", b"for everyone")
        t0 = time.monotonic()
    for t in threads:
        t.join(30)
    for name, d in got.items():
        value, at = d["mw/one"]
        assert value == b"for everyone" and at - t0 < 0.8, (name, value, at - t0)


@check
def a_wait_racing_its_write_is_never_lost(cl: Cluster):
    n1, n2 = cl.nodes[0], cl.nodes[1]
    rechecked0 = clients_stat(n1, "key_waits_rechecked")
    rng = random.Random(31)
    got, threads = {}, []
    with n2.client() as c:
        for i in range(200):
            k = f"race/{i}"
            threads.append(wait_in_thread(n1, k, 20, got))
            time.sleep(rng.random() * 0.004)  # the write lands before, while or after it parks
            c.set(k, str(i).encode())
            if len(threads) >= 20:
                for t in threads:
                    t.join(30)
                threads = []
    for t in threads:
        t.join(30)
    bad = {k: v for k, v in got.items() if v[0] != k.split("/")[1].encode()}
    assert len(got) == 200 and not bad, bad
    # None needed the re-check (a lost notification waits a second for it).
    assert clients_stat(n1, "key_waits_rechecked") == rechecked0


@check
def a_cluster_wait_times_out_and_asks_again_each_second(cl: Cluster):
    n1, n3 = cl.nodes[0], cl.nodes[2]
    with n1.client() as c:
        assert 0.25 < times_out(c, "tw/never", 0.3, "a missing key") < 3
        assert c.ping()  # the connection goes on
        rechecked0 = clients_stat(n1, "key_waits_rechecked")
        assert 2.4 < times_out(c, "tw/never", 2.5, "a missing key") < 6
        assert clients_stat(n1, "key_waits_rechecked") - rechecked0 >= 2
    # A write after several re-checks still answers.
    got = {}
    t = wait_in_thread(n1, "tw/late", 20, got)
    time.sleep(2.2)
    with n3.client() as c:
        c.set("tw/late", b"late")
    t.join(30)
    assert got["tw/late"][0] == b"late", got


@check
def a_cluster_wait_for_a_newer_version_is_answered_by_the_next_write_anywhere(cl: Cluster):
    n1, n2, n3 = cl.nodes[:3]
    keys = [f"nv/{i}" for i in range(6)]  # their homes spread over the nodes
    with n1.client() as c1:
        for i, k in enumerate(keys):
            owner = (n1, n2, n3)[i % 3]  # n1 itself owns some: a write elsewhere drops its copy
            with owner.client() as c:
                c.set(k, b"v1")
            assert c1.get(k) == b"v1"
            v1 = c1.last_version
            assert v1 > 0, k
            # The value at v1 is held here: a wait for a newer one parks, times out, goes on.
            assert 0.25 < times_out(c1, k, 0.3, "an old version", after=v1) < 3
            assert c1.get(k, wait=1, after=v1 - 1) == b"v1"  # older than held: at once
            with n3.client() as c3:  # a node that holds no copy yet (a direct read elsewhere)
                times_out(c3, k, 0.2, "an old version on n3", after=v1)
            got = {}

            def newer():
                try:
                    with n1.client() as c:
                        got["v"] = (c.get(k, wait=20, after=v1), c.last_version, time.monotonic())
                except Exception as e:  # noqa: BLE001
                    got["v"] = (e, 0, time.monotonic())

            t = threading.Thread(target=newer)
            t.start()
            wait_for(lambda: clients_stat(n1, "waiting_for_keys") == 1, 10, "the wait to park")
            with (n2, n3)[i % 2].client() as c:
                c.set(k, b"v2")
                written = time.monotonic()
            t.join(30)
            value, v2, at = got["v"]
            assert value == b"v2" and v2 > v1, (k, value, v1, v2)
            assert at - written < 0.8, (k, at - written)  # notified, not the re-check


@check
def waits_survive_their_home_dying(cl: Cluster):
    n1, n2, n3 = cl.nodes[:3]
    keys = {f"hd/{i}": rand_bytes(100 + i, 900 + i) for i in range(12)}  # some homed on n3
    got, threads = {}, []
    for k in keys:
        threads.append(wait_in_thread(n1, k, 60, got))
    wait_for(lambda: clients_stat(n1, "waiting_for_keys") == len(keys), 10, "the waits to park")
    try:
        n3.kill()
        wait_for(lambda: n1.info()["members"] == 2 and n2.info()["members"] == 2, cl.ttl + 10,
                 "n3 to leave")
        with n2.client() as c:
            for k, v in keys.items():
                wait_for(lambda: try_set_value(c, k, v), 20, "a write once n3 is gone")
        for t in threads:
            t.join(40)
        for k, v in keys.items():
            assert got[k][0] == v, (k, got[k][0])
    finally:
        if not n3.alive():
            n3.start()
            cl.wait_members(3)


def try_set_value(c, key: str, value: bytes) -> bool:
    try:
        c.set(key, value)
        return True
    except (gpukv.Unavailable, gpukv.Busy):
        return False


@check
def nx_races_have_exactly_one_winner(cl: Cluster):
    for k in range(15):
        key = f"nx/{k}"
        wins, errors = [], []

        def race(node, tag):
            try:
                with node.client() as c:
                    c.set(key, tag.encode(), nx=True)  # raises Exists when it lost
                    wins.append(tag)
            except gpukv.Exists:
                pass
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=race, args=(cl.nodes[i % 3], f"{i}"))
                   for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert len(wins) == 1, f"{key}: winners {wins}"
        for node in cl.nodes:
            with node.client() as c:
                assert get(c, key) == wins[0].encode()


@check
def xx_needs_the_key_anywhere(cl: Cluster):
    with cl.nodes[0].client() as c:
        c.set("xx/k", b"one")
    with cl.nodes[2].client() as c:
        c.set("xx/k", b"two", xx=True)
        try:
            c.set("xx/missing", b"x", xx=True)
            raise AssertionError("XX of a missing key succeeded")
        except gpukv.NotFound:
            pass
    with cl.nodes[1].client() as c:
        assert get(c, "xx/k") == b"two"


@check
def list_size_and_prefix_delete_span_the_nodes(cl: Cluster):
    expect = {}
    for i in range(60):
        key = f"ls/{'a' if i % 2 else 'b'}/{i:03d}" if i % 3 else f"ls/top{i:03d}"
        expect[key] = i + 1
        with cl.nodes[i % 3].client() as c:
            c.set(key, b"x" * (i + 1))
    for node in cl.nodes:
        with node.client() as c:
            assert sorted(c.keys("ls/")) == sorted(expect), f"{node.name}: keys"
            assert c.getsize_prefix("ls/") == sum(expect.values())
            assert c.count_prefix("ls/") == len(expect)
            page = c.list("ls/", delimiter="/")
            names = [e.key if hasattr(e, "key") else e for e in page]
            assert "ls/a/" in names and "ls/b/" in names, names
            assert any(str(x).startswith("ls/top") for x in names), names
    # Paging: small pages cover every key once, in order.
    with cl.nodes[1].client() as c:
        assert [e.key for e in c.list("ls/", page=7)] == sorted(expect)
        dirs = [e.key for e in c.list("ls/", delimiter="/", page=3)]
        assert dirs == sorted(set(dirs)) and "ls/a/" in dirs and "ls/b/" in dirs, dirs
        assert c.delete_prefix("ls/a/") == sum(1 for k in expect if k.startswith("ls/a/"))
    for node in cl.nodes:
        with node.client() as c:
            assert not any(k.startswith("ls/a/") for k in c.keys("ls/")), node.name
            assert get(c, "ls/a/001") is None


@check
def locate_names_the_owner_from_every_node(cl: Cluster):
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(cl.daemon))), "client",
                       "gpukv")
    for i, writer in enumerate(cl.nodes):
        with writer.client() as c:
            c.set(f"loc/{i}", b"here")
    for node in cl.nodes:
        for i, writer in enumerate(cl.nodes):
            r = subprocess.run([cli, "-s", node.sock, "--token-file", cl.token, "locate",
                                f"loc/{i}"], capture_output=True, text=True)
            assert r.returncode == 0 and r.stdout.strip() == writer.name, (node.name, r)
    r = subprocess.run([cli, "-s", cl.nodes[0].sock, "--token-file", cl.token, "locate",
                        "loc/none"], capture_output=True, text=True)
    assert r.returncode == 1, r


@check
def a_tag_gives_related_keys_one_home(cl: Cluster):
    before = {n.name: n.info()["keys_homed"] for n in cl.nodes}
    for i in range(30):
        with cl.nodes[i % 3].client() as c:
            c.set(f"user:{{42}}:item{i}", b"v")
    grew = {n.name: n.info()["keys_homed"] - before[n.name] for n in cl.nodes}
    assert sorted(grew.values()) == [0, 0, 30], grew


@check
def a_wrong_token_node_is_no_member(cl: Cluster):
    bad = os.path.join(cl.root, "bad-token")
    with open(bad, "w") as f:
        f.write("another-token-entirely-0123456789\n")
    os.chmod(bad, 0o600)
    intruder = cl.add("intruder", token_file=bad)
    try:
        time.sleep(1.0)
        for node in cl.nodes[:3]:
            info = node.info()
            assert info["members"] == 3, info
            assert info["foreign_nodes"] == 1, info
        with cl.nodes[0].client() as c:
            c.set("tok/k", b"real")
        with intruder.client() as c:
            assert get(c, "tok/k") is None  # it is a cluster of its own
        with cl.nodes[2].client() as c:
            assert get(c, "tok/k") == b"real"
    finally:
        intruder.kill(signal.SIGTERM)
        cl.nodes.remove(intruder)


def nixl_on() -> bool:
    """The nodes were started with NIXL (GKV_TEST_NIXL names its library or site-packages)."""
    return os.environ.get("GKV_TEST_NIXL", "off") != "off"


def key_homed_on(node, writer, prefix: str) -> str:
    """A new key, written (a byte) through writer, whose home is node."""
    for i in range(500):
        key, before = f"{prefix}/{i}", node.info()["keys_homed"]
        with writer.client() as c:
            c.set(key, b"x")
        if node.info()["keys_homed"] > before:
            return key
    raise AssertionError(f"no key homed on {node.name}")


def member_plane(node, other: str) -> str:
    """What node says of its data plane to other (INFO's member lines)."""
    for k, v in node.info().items():
        if k.startswith("member") and f"name={other}," in str(v):
            return str(v).rsplit("plane=", 1)[-1]
    return "none"


@check
def large_values_move_through_the_data_plane_bit_exact(cl: Cluster):
    # With NIXL every pull between n1 and n2 goes through it (chunk by chunk through the
    # arenas, several in flight), without it over TCP; the bytes are the same either way.
    # The last is larger than the host backend's 64 MiB arena: it streams through it.
    sizes = [65537, (1 << 20) + 3, 5 << 20, (21 << 20) + 11, (70 << 20) + 1]
    before = {n.name: n.info() for n in cl.nodes}
    for i, size in enumerate(sizes):
        writer = cl.nodes[i % 2]
        value = rand_bytes(size, 500 + i)
        with writer.client() as c:
            c.set(f"plane/{i}", value)
        for node in cl.nodes:
            with node.client() as c:
                assert get(c, f"plane/{i}") == value, f"{node.name}: plane/{i} ({size} bytes)"
                assert c.get(f"plane/{i}", offset=size - 100, length=50) == value[-100:-50]
    # Several values pulled by one request (MGET), after new versions on n1.
    with cl.nodes[0].client() as c:
        for i in (2, 3):
            c.set(f"plane/{i}", rand_bytes(sizes[i], 600 + i))
    with cl.nodes[1].client() as c:
        got = c.mget(["plane/2", "plane/3"])
        assert [bytes(g) for g in got] == [rand_bytes(sizes[i], 600 + i) for i in (2, 3)], "MGET"
    with cl.nodes[0].client() as c:
        c.delete("plane/4")  # 70 MiB less to hold for the checks after this one
    after = {n.name: n.info() for n in cl.nodes}
    reads = {n: after[n]["nixl_reads"] - before[n]["nixl_reads"] for n in after}
    if not nixl_on():
        assert all(i["data_plane"] == "tcp" for i in after.values())
        assert not any(reads.values()), reads
        print("     (TCP: GKV_TEST_NIXL is not set)")
        return
    for n in cl.nodes:
        assert after[n.name]["data_plane"] == "nixl", (n.name, after[n.name]["data_plane_why"])
        assert after[n.name]["nixl_slots_in_use"] == 0, after[n.name]
        workers = int(os.environ.get("GPUKV_NIXL_WORKERS", "4"))  # the daemons inherit it
        assert after[n.name]["nixl_workers"] == workers, after[n.name]
        assert after[n.name]["nixl_fallbacks"] == before[n.name]["nixl_fallbacks"], n.name
    assert member_plane(cl.nodes[0], "n2") == "nixl" and member_plane(cl.nodes[1], "n1") == "nixl"
    # n1 and n2 each read the two values the other wrote (the first is small: TCP's direct
    # answer); n3 (in its namespace, where there is one) reads all four through NIXL or TCP.
    assert reads["n1"] >= 1 and reads["n2"] >= 1, reads
    with cl.nodes[0].client() as c:
        metrics = c.metrics()
    assert "gpukv_cluster_data_plane_nixl 1" in metrics, metrics[-2000:]
    assert 'gpukv_cluster_peers{plane="nixl"}' in metrics
    assert f"gpukv_cluster_nixl_reads_total {after['n1']['nixl_reads']}" in metrics
    print(f"     (NIXL reads {reads}; n3's plane to n1: {member_plane(cl.nodes[2], 'n1')})")


@check
def a_value_rewritten_at_another_size_is_read_whole_everywhere(cl: Cluster):
    # Keys written on n1 again and again at other sizes, some homed on n1 itself (recorded
    # there as the value is published, which may move it into the key's older entry) and
    # some elsewhere: every node lists the new size and reads the whole value (a pull sized
    # by the home's record: until 2026-11-28 an owner that was also the home recorded the
    # size of the value its SET replaced, and a pull through NIXL read that many bytes).
    mib = 1 << 20
    sizes = [3 * mib + 1, 5 * mib + 3, 70000, 2 * mib]
    with cl.nodes[0].client() as w:
        for v, size in enumerate(sizes):
            values = {f"resize/{i}": rand_bytes(size, 1900 + 10 * i + v) for i in range(6)}
            for key, value in values.items():
                w.set(key, value)
            for node in cl.nodes:
                with node.client() as c:
                    listed = {e.key: e.size for e in c.list("resize/")}
                    assert listed == {k: size for k in values}, (node.name, size, listed)
                    for key, value in values.items():
                        got = get(c, key)
                        assert got == value, (node.name, key, size, None if got is None else len(got))
        w.delete(*[f"resize/{i}" for i in range(6)])


@check
def a_map_of_a_pulled_value_takes_an_early_frame(cl: Cluster):
    # A MAP on n4 of a value n1 owns: n4 pulls it through NIXL into new memory, and the MAP's
    # early frame lets the client import that memory while the pull runs; the answer renews
    # the early frame's lease (so each MAP costs one lease id, not two). Bytes exact each time.
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    mib = 1 << 20
    with cl.extra_node("n4", extra=["--host-zero-copy", "yes"]) as n4:
        wait_for(lambda: member_plane(n4, "n1") == "nixl", 10, "n4 to pair with n1 by NIXL")

        def info():
            with n4.client() as c:
                return {**c.info("clients"), **c.info("leases"), **c.info("cluster")}
        before = info()
        leases = []
        with cl.nodes[0].client() as w, n4.client() as r:
            for v in range(3):
                value = rand_bytes(3 * mib + v, 1300 + v)
                w.set("early/k", value)
                with r.map("early/k") as m:
                    assert bytes(m) == value, f"version {v}: the mapping's bytes"
                    leases.append(m.lease)
            after = info()
        assert after["nixl_reads"] - before["nixl_reads"] >= 3, (before, after)
        early = after["key_waits_early"] - before["key_waits_early"]
        assert early == 3, f"{early} early frames for three pulled MAPs"
        assert [b - a for a, b in zip(leases, leases[1:])] == [1, 1], \
            f"lease ids {leases}: an early frame's lease was not the one renewed"
        del m  # a mapping keeps its client open
        wait_for(lambda: info()["leases"] == 0, 5, "n4's leases to end with the client")
        print(f"     ({early} early frames, leases {leases})")


def read_at_once(clients, keys, values, timeout: float) -> tuple[list, list]:
    """clients[i] GETs keys[i] in a thread of its own, all released at once; then closes the
    clients. Returns the errors (wrong bytes, or the error a GET raised) and each read's
    seconds."""
    n = len(clients)
    go, errs, took = threading.Barrier(n), [], []

    def read(i):
        go.wait()
        t0 = time.monotonic()
        try:
            if clients[i].get(keys[i]) != values[i]:
                errs.append(f"{keys[i]}: wrong bytes")
        except gpukv.Error as e:
            errs.append(f"{keys[i]}: {e.name} {e}")
        took.append(time.monotonic() - t0)
    ts = [threading.Thread(target=read, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    for c in clients:
        c.close()
    return errs, took


@check
def connections_to_a_node_are_dialed_ahead_of_its_reads(cl: Cluster):
    # A new node n4 reads one value n1 owns (and homes): its first request to n1 dials, and
    # asks for spares (GKV_PEER_SPARE, 8, idle to n1: server/cluster/peer.h), which a thread of
    # n4's dials while nothing waits for them. Then 6 concurrent reads of n1's values find a
    # connection each and dial none (each would wait for a handshake: 11-22 ms on a busy GPU
    # machine, bench/RESULTS.md).
    keys = [key_homed_on(cl.nodes[0], cl.nodes[0], f"ahead{i}") for i in range(7)]
    values = [rand_bytes(65536 + i, 2100 + i) for i in range(7)]
    with cl.nodes[0].client() as c:
        for k, v in zip(keys, values):
            c.set(k, v)
    with cl.extra_node("n4") as n4:
        with n4.client() as c:
            assert c.get(keys[0]) == values[0]
        wait_for(lambda: n4.info()["peer_connections_ahead"] >= 1, 10, "n4's spare connections")

        def settled():  # no fill dialing any more: the counter holds for half a second
            a = n4.info()["peer_connections_ahead"]
            time.sleep(0.5)
            return n4.info()["peer_connections_ahead"] == a
        wait_for(settled, 10, "n4's fills to end")
        before = n4.info()
        errs, _ = read_at_once([n4.client() for _ in range(6)], keys[1:], values[1:], 30)
        assert not errs, errs
        after = n4.info()
        assert after["peer_dials_waited"] == before["peer_dials_waited"], (before, after)
        assert after["peer_connections_idle"] >= 6, after
        print(f"     ({before['peer_connections_ahead']} dialed ahead, "
              f"{before['peer_dials_waited']} dials waited for, none in 6 concurrent reads)")
    with cl.nodes[0].client() as c:
        c.delete(*keys)


@check
def more_concurrent_pulls_than_slots_all_go_through_the_data_plane(cl: Cluster):
    # 32 clients of n2 read 32 values of n1 at once, 2 chunks each: more pulls than n2's
    # arena has slots (16), so some READs find none for a head start and their pulls wait for
    # slots while others hold theirs. Every read bytes-exact, none falls back to TCP (a pull
    # that waited until the timeout would), and every slot comes back.
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    n = 32
    values = [rand_bytes((5 << 20) + i, 1500 + i) for i in range(n)]
    with cl.nodes[0].client() as c:
        for i, v in enumerate(values):
            c.set(f"many/{i}", v)
    before = cl.nodes[1].info()
    errs, took = read_at_once([cl.nodes[1].client(timeout=30) for _ in range(n)],
                              [f"many/{i}" for i in range(n)], values, 60)
    assert not errs, errs
    after = cl.nodes[1].info()
    assert after["nixl_fallbacks"] == before["nixl_fallbacks"], (before, after)
    assert after["nixl_reads"] - before["nixl_reads"] == n, (before, after)
    wait_for(lambda: cl.nodes[1].info()["nixl_slots_in_use"] == 0, 10, "n2's arena slots back")
    assert cl.nodes[1].info()["nixl_slots_retired"] == 0
    with cl.nodes[0].client() as c:
        c.delete(*[f"many/{i}" for i in range(n)])
    print(f"     (slowest read {max(took):.2f} s; head starts "
          f"{after['nixl_head_starts'] - before['nixl_head_starts']} of {n})")


@check
def a_pull_that_finds_no_memory_gives_back_its_head_start(cl: Cluster):
    # n4 (8 MiB of memory) reads a 24 MiB value n1 owns: its READ asks n1 for the first chunks
    # (a head start) before the loop finds no memory for the value; the read then fails
    # cleanly (over TCP no memory either), n1's answers are awaited and the slots come back,
    # none retired. The next read that fits goes through NIXL, bytes exact.
    mib = 1 << 20
    with cl.extra_node("n4", extra=["--maxmemory", "8M"]) as n4:
        if nixl_on():
            wait_for(lambda: member_plane(n4, "n1") == "nixl", 10, "n4 to pair with n1 by NIXL")
        big, small = rand_bytes(24 * mib + 7, 1400), rand_bytes(3 * mib + 1, 1401)
        with cl.nodes[0].client() as w:
            w.set("head/big", big)
            w.set("head/small", small)
        before = n4.info()
        with n4.client() as c:
            errs = []
            for _ in range(3):
                try:
                    got = c.get("head/big")
                    raise AssertionError(f"a 24 MiB value read into 8 MiB: {len(got)} bytes")
                except gpukv.Error as e:
                    errs.append(f"{e.name}: {e}")
            assert all(e.startswith(("OOM", "TOOBIG")) for e in errs), errs
            if not nixl_on():
                assert get(c, "head/small") == small, "the next read"
                print(f"     (TCP: {errs[0]})")
                return
            mid = n4.info()
            assert mid["nixl_head_starts"] - before["nixl_head_starts"] >= 3, (before, mid)
            assert mid["nixl_heads_dropped"] - before["nixl_heads_dropped"] >= 3, (before, mid)
            wait_for(lambda: n4.info()["nixl_slots_in_use"] == 0, 10, "n4's arena slots back")
            assert n4.info()["nixl_slots_retired"] == 0, n4.info()
            assert get(c, "head/small") == small, "the next pull"
        after = n4.info()
        assert after["nixl_reads"] - before["nixl_reads"] == 1, (before, after)
        assert after["nixl_head_starts"] - mid["nixl_head_starts"] == 1, (mid, after)
        assert after["nixl_heads_dropped"] == mid["nixl_heads_dropped"], (mid, after)
        print(f"     (head starts {after['nixl_head_starts'] - before['nixl_head_starts']}, "
              f"dropped {after['nixl_heads_dropped'] - before['nixl_heads_dropped']})")


@check
def a_pull_guesses_its_owner_while_the_home_answers(cl: Cluster):
    # n2 reads a 3 MiB value that n1, its home, rewrites again and again: from the second read
    # on (n2 holds a replica) n2's READ asks n1 for the first chunk of whatever version it
    # owns while n1, as the home, says which version is current; that chunk is used only when
    # it is of that version. A read of the version n2 holds moves no bytes; a value of another
    # size drops the guess; a key homed on n3 is refused there and pulled from n1 as before;
    # with writes racing the reads, every read is one version's bytes, whole.
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    n1, n2, n3 = cl.nodes[0], cl.nodes[1], cl.nodes[2]
    mib = 1 << 20
    guessing = os.environ.get("GPUKV_NIXL_GUESS") != "0"
    key, key3 = key_homed_on(n1, n1, "guess/a"), key_homed_on(n3, n1, "guess/c")
    vals = [rand_bytes(3 * mib + 1, 1600 + v) for v in range(6)]
    before = n2.info()
    with n1.client() as w, n2.client() as r:
        for v in vals:
            w.set(key, v)
            assert get(r, key) == v, "a guessed pull's bytes"
        mid = n2.info()
        guesses = mid["nixl_head_guesses"] - before["nixl_head_guesses"]
        assert guesses == (len(vals) - 1 if guessing else 0), guesses
        assert mid["nixl_guesses_missed"] == before["nixl_guesses_missed"], (before, mid)
        assert mid["nixl_fallbacks"] == before["nixl_fallbacks"], (before, mid)
        sent = n1.info()["nixl_chunks_sent"]
        assert get(r, key) == vals[-1], "the replica, confirmed"
        assert n1.info()["nixl_chunks_sent"] == sent, "a guess of the version held moved bytes"
        other = rand_bytes(5 * mib + 3, 1700)
        w.set(key, other)
        assert get(r, key) == other, "a value of another size"
        if guessing:
            assert n2.info()["nixl_heads_dropped"] > mid["nixl_heads_dropped"], n2.info()
        for v in vals[:3]:
            w.set(key3, v)
            assert get(r, key3) == v, "a key homed on n3"
        # The key written on n3: n2's guess goes to n1, its home, which owns no version now
        # and refuses; the pull asks n3 instead (a head start of its own).
        m0 = n2.info()
        with n3.client() as w3:
            w3.set(key, vals[0])
        assert get(r, key) == vals[0], "a key its home no longer owns"
        m1 = n2.info()
        if guessing:
            moved = {f: m1[f] - m0[f] for f in ("nixl_head_guesses", "nixl_heads_dropped",
                                                "nixl_head_starts", "nixl_guesses_missed")}
            assert moved == {"nixl_head_guesses": 1, "nixl_heads_dropped": 1,
                             "nixl_head_starts": 1, "nixl_guesses_missed": 0}, moved
        # Writes racing the reads (paced: a key rewritten faster than it can be pulled is
        # UNAVAILABLE to remote readers, guess or not): each read one version, whole.
        race = [rand_bytes(3 * mib + 1, 1800 + v) for v in range(8)]
        stop, errs, busy = threading.Event(), [], []

        def write():
            with n1.client() as c:
                i = 0
                while not stop.is_set():
                    c.set(key, race[i % len(race)])
                    i += 1
                    time.sleep(0.004)
        w.set(key, race[0])
        t = threading.Thread(target=write)
        t.start()
        try:
            for _ in range(40):
                try:
                    got = r.get(key)
                except gpukv.Unavailable:
                    busy.append(1)
                    continue
                if got not in race:
                    errs.append(len(got))
        finally:
            stop.set()
            t.join()
        assert not errs, f"reads that were no written version: {errs[:5]}"
        assert len(busy) < 20, f"{len(busy)} of 40 reads unavailable"
        w.delete(key, key3)
    after = n2.info()
    assert after["nixl_fallbacks"] == before["nixl_fallbacks"], (before, after)
    wait_for(lambda: n2.info()["nixl_slots_in_use"] == 0, 10, "n2's arena slots back")
    assert n2.info()["nixl_slots_retired"] == 0
    print(f"     (guesses {after['nixl_head_guesses'] - before['nixl_head_guesses']}, "
          f"missed {after['nixl_guesses_missed'] - before['nixl_guesses_missed']}, dropped "
          f"{after['nixl_heads_dropped'] - before['nixl_heads_dropped']})")


@check
def the_loop_asks_for_a_pull_s_first_chunks_as_it_queues_the_read(cl: Cluster):
    # n2 reads values n1 owns, of a key n2 homes (its own record names the owner) and of one
    # n1 homes (n2 holds a replica: a guess): each time n2's loop asks n1 for the first chunks
    # itself as it queues the READ (nixl_heads_ahead), on connections left idle, instead of the
    # READ's worker once it woke; the bytes are the values', none falls back to TCP.
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    n1, n2 = cl.nodes[0], cl.nodes[1]
    mib = 1 << 20
    ahead = os.environ.get("GPUKV_NIXL_AHEAD") != "0"
    mine, theirs = key_homed_on(n2, n1, "ahead/b"), key_homed_on(n1, n1, "ahead/a")
    vals = [rand_bytes(2 * mib + 5, 2100 + v) for v in range(4)]
    with n1.client() as w, n2.client() as r:
        w.set(theirs, vals[0])
        assert get(r, theirs) == vals[0], "the first read (no replica: no guess)"
        before = n2.info()
        for v in vals:
            w.set(mine, v)
            assert get(r, mine) == v, "a pull its home's loop asked ahead"
            w.set(theirs, v[::-1])
            assert get(r, theirs) == v[::-1], "a guess the loop asked ahead"
        after = n2.info()
        w.delete(mine, theirs)
    moved = {f: after[f] - before[f] for f in ("nixl_heads_ahead", "nixl_head_starts",
                                               "nixl_head_guesses", "nixl_fallbacks",
                                               "nixl_reads")}
    n = len(vals)
    assert moved["nixl_reads"] == 2 * n and moved["nixl_fallbacks"] == 0, moved
    assert moved["nixl_head_starts"] == n and moved["nixl_head_guesses"] == n, moved
    assert moved["nixl_heads_ahead"] == (2 * n if ahead else 0), moved
    wait_for(lambda: n2.info()["nixl_slots_in_use"] == 0, 10, "n2's arena slots back")
    print(f"     (asked ahead by the loop: {moved['nixl_heads_ahead']} of {2 * n})")


@check
def a_guessed_chunk_of_an_older_version_is_asked_again(cl: Cluster):
    # n5 (GPUKV_NIXL_GUESS_LEAD_MS=400: a READ's worker waits that long between its guess and
    # its FETCH) holds a replica of a key n1 homes and owns; n1 rewrites it (v2), n5's read
    # guesses n1 and gets v2's bytes, n1 rewrites it again (v3, the same size) before n5's
    # FETCH, which then names v3: the guessed chunk is asked again and the read returns v3,
    # whole (nixl_guesses_missed counts it).
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    n1 = cl.nodes[0]
    mib = 1 << 20
    with cl.extra_node("n5", env={"GPUKV_NIXL_GUESS_LEAD_MS": "400"}) as n5:
        wait_for(lambda: member_plane(n5, "n1") == "nixl", 10, "n5 to pair with n1 by NIXL")
        key = key_homed_on(n1, n1, "lead")
        v1, v2, v3 = (rand_bytes(3 * mib + 1, 2000 + i) for i in range(3))
        with n1.client() as w, n5.client() as r:
            w.set(key, v1)
            assert get(r, key) == v1
            w.set(key, v2)
            before = n5.info()
            got = {}
            t = threading.Thread(target=lambda: got.update(v=r.get(key)))
            t.start()
            time.sleep(0.15)  # the guess staged v2; n5's worker waits before its FETCH
            w.set(key, v3)
            t.join(20)
            after = n5.info()
            assert got.get("v") == v3, ("not v3", None if got.get("v") is None else
                                        [v.index(got["v"]) if got["v"] == v else -1 for v in (v1, v2)])
            assert after["nixl_head_guesses"] - before["nixl_head_guesses"] == 1, (before, after)
            assert after["nixl_guesses_missed"] > before["nixl_guesses_missed"], (before, after)
            assert after["nixl_fallbacks"] == before["nixl_fallbacks"], (before, after)
            w.delete(key)
        wait_for(lambda: n5.info()["nixl_slots_in_use"] == 0, 10, "n5's arena slots back")


@check
def remote_reads_racing_rewrites_each_get_one_whole_version(cl: Cluster):
    # n1 rewrites a 3 MiB value every few milliseconds (eight versions in turn) while n2 and n3
    # read it: every read is one written version, whole (never parts of two), through NIXL or
    # TCP. A key rewritten faster than it can be pulled may be UNAVAILABLE to remote readers
    # (CL_BUSY_MS); at this pace most reads go through.
    mib = 1 << 20
    race = [rand_bytes(3 * mib + 1, 1800 + v) for v in range(8)]
    key = "race/k"
    stop, errs, busy = threading.Event(), [], []
    with cl.nodes[0].client() as w:
        w.set(key, race[0])

    def write():
        with cl.nodes[0].client() as c:
            i = 0
            while not stop.is_set():
                c.set(key, race[i % len(race)])
                i += 1
                time.sleep(0.002)
    t = threading.Thread(target=write)
    t.start()
    try:
        with cl.nodes[1].client() as r2, cl.nodes[2].client() as r3:
            for i in range(120):
                try:
                    got = (r2 if i % 2 else r3).get(key)
                except gpukv.Unavailable:
                    busy.append(i)
                    continue
                if got not in race:
                    errs.append((i, len(got)))
    finally:
        stop.set()
        t.join()
    assert not errs, f"reads that were no written version: {errs[:5]}"
    assert len(busy) < 60, f"{len(busy)} of 120 reads unavailable"
    with cl.nodes[0].client() as w:
        w.delete(key)
    print(f"     ({120 - len(busy)} reads whole, {len(busy)} unavailable)")


@check
def a_busy_polling_node_s_workers_watch_for_jobs(cl: Cluster):
    # With --busy-poll the node's cluster workers watch their queues that long after a job
    # before they sleep (a job submitted meanwhile starts without a wake-up). Reads and writes
    # through it are the same bytes; its INFO says the window and counts the jobs taken while
    # watching (none on a node without the flag), SIGHUP reloads the window from its --config,
    # and it stops at once when told to.
    sizes = [100, 70000, (3 << 20) + 5]
    conf = os.path.join(cl.root, "n4.conf")  # removed with the cluster's directory
    with open(conf, "w") as f:
        f.write("busy-poll = 20000\n")
    with cl.extra_node("n4", extra=["--config", conf]) as n4:
        for round_ in range(3):
            for i, size in enumerate(sizes):
                key = f"busy/{round_}/{i}"
                value = rand_bytes(size, 2100 + 10 * round_ + i)
                with cl.nodes[round_ % 2].client() as c:
                    c.set(key, value)
                with n4.client() as c:
                    assert get(c, key) == value, (key, size)
                    c.set(key + "/back", value[::-1])
                with cl.nodes[0].client() as c:
                    assert get(c, key + "/back") == value[::-1], (key, size)
        info = n4.info()
        assert info["cluster_worker_watch_us"] == 20000, info["cluster_worker_watch_us"]
        assert info["cluster_jobs_watched"] > 0, info["cluster_jobs_watched"]
        with n4.client() as c:
            assert "gpukv_cluster_jobs_watched_total " in c.metrics()
        assert cl.nodes[0].info()["cluster_jobs_watched"] == 0
        assert cl.nodes[0].info()["cluster_worker_watch_us"] == 0
        with open(conf, "w") as f:  # SIGHUP reloads the window, the workers' too
            f.write("busy-poll = 0\n")
        n4.proc.send_signal(signal.SIGHUP)
        try:
            wait_for(lambda: n4.info()["cluster_worker_watch_us"] == 0, 5, "the window reloaded")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- n4 log tail ---\n{n4.log_tail()}") from None
        proc = n4.proc
        t0 = time.monotonic()
        n4.kill(signal.SIGTERM)
        assert proc.returncode == 0 and time.monotonic() - t0 < 5, (proc.returncode,
                                                                     time.monotonic() - t0)
        n4.proc = proc  # the block's end waits for n4 to leave every member's view
    with cl.nodes[0].client() as c:
        c.delete(*[f"busy/{r}/{i}{s}" for r in range(3) for i in range(3) for s in ("", "/back")])


@check
def a_node_without_nixl_is_read_over_tcp_and_says_why(cl: Cluster):
    with cl.extra_node("n4", extra=["--nixl", "/nonexistent/nixl"]) as n4:
        i4 = n4.info()
        assert i4["data_plane"] == "tcp" and "/nonexistent/nixl" in i4["data_plane_why"], i4
        if nixl_on():
            wait_for(lambda: member_plane(cl.nodes[0], "n4") == "tcp", 10, "n1 to pair with n4 over TCP")
        value = rand_bytes((3 << 20) + 5, 77)
        with n4.client() as c:
            c.set("tcp/from-n4", value)
        before = cl.nodes[0].info()
        with cl.nodes[0].client() as c:
            assert get(c, "tcp/from-n4") == value
            c.set("tcp/from-n1", value[::-1])
        after = cl.nodes[0].info()
        assert after["nixl_reads"] == before["nixl_reads"], "a NIXL read from a node without NIXL"
        assert after["nixl_fallbacks"] == before["nixl_fallbacks"], "TCP by failure, not by choice"
        with n4.client() as c:
            assert get(c, "tcp/from-n1") == value[::-1]


@check
def an_owner_killed_mid_pull_fails_the_read_cleanly_and_frees_the_arena(cl: Cluster):
    if not nixl_on():
        print("     (skipped: GKV_TEST_NIXL is not set)")
        return
    mib = 1 << 20
    with cl.extra_node("n4", extra=["--maxmemory", "1G"], sig=signal.SIGKILL,
                       leave_timeout=cl.ttl + 10) as n4:
        wait_for(lambda: member_plane(cl.nodes[0], "n4") == "nixl", 10, "n1 to pair with n4 by NIXL")
        values = [rand_bytes(24 * mib, 900 + i) for i in range(4)]
        with n4.client() as c:
            for i in range(24):
                c.set(f"kill/{i}", values[i % 4])
        # n1 holds replicas of the first six, then n4 rewrites them: n1's reads of those guess
        # their homes (n4 for some) for the new versions while n4 dies.
        with cl.nodes[0].client() as c:
            for i in range(6):
                assert get(c, f"kill/{i}") == values[i % 4]
        with n4.client() as c:
            for i in range(6):
                c.set(f"kill/{i}", values[(i + 1) % 4])
        for i in range(6):
            values.append(values[(i + 1) % 4])
        want = lambda i: values[4 + i] if i < 6 else values[i % 4]  # noqa: E731
        results, stop = [], threading.Event()

        def reader():
            with cl.nodes[0].client(timeout=20) as c:
                for i in range(24):
                    if stop.is_set():
                        break
                    t0 = time.monotonic()
                    try:
                        got = c.get(f"kill/{i}")
                        results.append(("ok" if got == want(i) else "WRONG", i, time.monotonic() - t0))
                    except gpukv.Error as e:
                        results.append((type(e).__name__, i, time.monotonic() - t0))
        t = threading.Thread(target=reader)
        t.start()
        wait_for(lambda: len(results) >= 2, 30, "two pulls from n4")
        n4.kill()
        t.join(60)
        stop.set()
        assert not t.is_alive(), "a read hung after its owner died"
        assert not [r for r in results if r[0] == "WRONG"], results
        failed = [r for r in results if r[0] != "ok"]
        assert all(r[2] < cl.ttl + 6 for r in failed), f"a failed read took too long: {failed}"
        i1 = cl.nodes[0].info()
        wait_for(lambda: cl.nodes[0].info()["nixl_slots_in_use"] == 0, 10, "n1's arena slots back")
        assert cl.nodes[0].info()["nixl_slots_retired"] == 0, i1
        with cl.nodes[1].client() as c:
            c.set("kill/after", values[0][:5 * mib])
        with cl.nodes[0].client() as c:
            assert get(c, "kill/after") == values[0][:5 * mib], "the next pull failed"
        print(f"     ({len(results)} reads, {len(failed)} failed cleanly: "
              f"{sorted(set(r[0] for r in failed))}; guesses {i1['nixl_head_guesses']})")


@check
def a_value_in_its_owner_s_tiers_is_read_from_every_node(cl: Cluster):
    # n4 owns 24 values of 1 MiB with room for 4 on its "GPU", 8 in its host tier and 12 on its
    # disk: the others read every one bit-exact (over TCP, or NIXL's STAGE with GKV_TEST_NIXL),
    # n4 bringing each up from wherever it is.
    mib = 1 << 20
    disk = tempfile.mkdtemp(prefix="gkv-cl-disk-")
    try:
        with cl.extra_node("n4", extra=["--maxmemory", "4M", "--tier-host", "8M", "--tier-disk",
                                        disk, "--tier-disk-size", "12M", "--maxmemory-policy",
                                        "allkeys-lru"]) as n4:
            values = [rand_bytes(mib, 1300 + i) for i in range(24)]
            with n4.client() as c:
                for i, v in enumerate(values):
                    c.set(f"tier/{i}", v)
                where = [c.tier(f"tier/{i}") for i in range(24)]
            assert where.count("disk") == 12 and where.count("host") == 8, where
            with n4.client() as c:
                info = c.info()
            assert info["tier_disk_keys"] == 12 and info["evicted_keys"] == 0, info
            for node in cl.nodes[:2]:
                with node.client() as c:
                    for i, v in enumerate(values):
                        assert get(c, f"tier/{i}") == v, (node.name, i)
            with n4.client() as c:
                info = c.info()
                c.delete_prefix("tier/")
            assert info["promoted_keys"] >= 20 and info["evicted_keys"] == 0, info
            assert info["tier_dropped_keys"] == 0, info
    finally:
        shutil.rmtree(disk, ignore_errors=True)


@check
def a_home_only_node_killed_loses_nothing(cl: Cluster):
    # Values written on n1 (owned by n1); some are homed on n3. Killing n3 loses none.
    with cl.nodes[0].client() as c:
        for i in range(200):
            c.set(f"ho/{i}", f"v{i}".encode())
    homed_on_n3 = cl.nodes[2].info()["keys_homed"]
    assert homed_on_n3 > 0
    cl.nodes[2].kill()
    wait_for(lambda: cl.nodes[0].info()["members"] == 2, cl.ttl + 5, "n3 to leave")
    time.sleep(0.5)
    for node in cl.nodes[:2]:
        with node.client() as c:
            for i in range(200):
                assert get(c, f"ho/{i}") == f"v{i}".encode(), f"{node.name} lost ho/{i}"
    cl.nodes[2].start()
    cl.wait_members(3)


@check
def a_node_added_takes_over_a_share_of_homes(cl: Cluster):
    with cl.nodes[1].client() as c:
        for i in range(300):
            c.set(f"add/{i}", f"{i}".encode())
    with cl.extra_node("n4") as n4:
        time.sleep(0.5)
        homed = n4.info()["keys_homed"]
        assert homed > 0, "the new node homes nothing"
        for node in cl.nodes:
            with node.client() as c:
                for i in range(0, 300, 7):
                    assert get(c, f"add/{i}") == f"{i}".encode(), f"{node.name} add/{i}"


@check
def replicas_make_room_before_anything_else(cl: Cluster):
    # n4 holds 8 MiB and never evicts (noeviction): replicas of six 1 MiB values read there,
    # then six 1 MiB values written there, which fit only once replicas went.
    mib = 1 << 20
    with cl.nodes[0].client() as c:
        for i in range(6):
            c.set(f"room/r{i}", rand_bytes(mib, 100 + i))
    with cl.extra_node("n4", extra=["--maxmemory", "8M", "--maxmemory-policy",
                                    "noeviction"]) as n4:
        time.sleep(2)  # past settling
        with n4.client() as c:
            for i in range(6):
                assert get(c, f"room/r{i}") == rand_bytes(mib, 100 + i)
            assert n4.info()["replicas"] >= 5
            for i in range(6):
                c.set(f"room/w{i}", rand_bytes(mib, 200 + i))  # OOM if replicas stayed
            info = n4.info()
            assert info["replicas_reclaimed"] >= 4, info
            for i in range(6):  # every value still reads right, pulled again where it went
                assert get(c, f"room/r{i}") == rand_bytes(mib, 100 + i), i
                assert get(c, f"room/w{i}") == rand_bytes(mib, 200 + i), i


@check
def a_one_node_cluster_answers_like_a_daemon_alone(cl: Cluster):
    # A node alone in a cluster of its own: reads are the store's (no records consulted), and
    # what it knows must still be right once a second node joins it.
    solo = cl.add("s1", extra=["--cluster-name", "solo"])
    try:
        wait_for(lambda: solo.info().get("members") == 1, 15, "s1 alone")
        time.sleep(2)  # past settling
        with solo.client() as c:
            for i in range(50):
                c.set(f"solo/{i}", f"v{i}".encode())
            assert get(c, "solo/7") == b"v7"
            assert c.exists("solo/7", "solo/none") == 1
            assert [e.key for e in c.list("solo/")][:3] == ["solo/0", "solo/1", "solo/10"]
            assert c.count_prefix("solo/") == 50
            assert c.delete("solo/7") == 1 and get(c, "solo/7") is None
        s2 = cl.add("s2", extra=["--cluster-name", "solo"])
        try:
            wait_for(lambda: s2.info().get("members") == 2, 15, "s2 to join s1")
            time.sleep(2)
            with s2.client() as c:  # every value s1 wrote alone, read through its home
                for i in range(50):
                    assert get(c, f"solo/{i}") == (None if i == 7 else f"v{i}".encode()), i
        finally:
            s2.kill(signal.SIGTERM)
            cl.nodes.remove(s2)
    finally:
        solo.kill(signal.SIGTERM)
        cl.nodes.remove(solo)


@check
def a_killed_owner_s_keys_become_misses_and_nothing_wrong_is_served(cl: Cluster):
    victim = cl.nodes[2]
    with victim.client() as c:
        for i in range(100):
            c.set(f"kill/{i}", f"v{i}".encode())
    with cl.nodes[0].client() as c:
        for i in range(100):
            c.set(f"keep/{i}", f"k{i}".encode())
    stop, bad, served = threading.Event(), [], [0]

    def reader(node):
        with node.client() as c:
            while not stop.is_set():
                i = random.randrange(100)
                try:
                    v = get(c, f"kill/{i}")
                    if v not in (None, f"v{i}".encode()):
                        bad.append((f"kill/{i}", v))
                    if get(c, f"keep/{i}") != f"k{i}".encode():
                        bad.append((f"keep/{i}", "lost"))
                    served[0] += 1
                except gpukv.Unavailable:
                    pass

    threads = [threading.Thread(target=reader, args=(n,)) for n in cl.nodes[:2]]
    for t in threads:
        t.start()
    time.sleep(0.5)
    killed_at = time.monotonic()
    victim.kill()
    try:
        def all_missing():
            with cl.nodes[1].client() as c:
                try:
                    return all(get(c, f"kill/{i}") is None for i in range(100))
                except gpukv.Unavailable:
                    return False
        wait_for(all_missing, cl.ttl + 5, "the dead owner's keys to read as missing")
        took = time.monotonic() - killed_at
        assert took <= cl.ttl + 3, f"misses after {took:.1f}s"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not bad, bad[:5]
    assert served[0] > 0
    victim.start()
    cl.wait_members(3)


@check
def etcd_stopped_for_30_seconds_changes_nothing_for_live_nodes(cl: Cluster):
    with cl.nodes[0].client() as c:
        c.set("etcd/before", b"b")
    cl.etcd.stop()
    try:
        end = time.monotonic() + float(os.environ.get("GKV_ETCD_OUTAGE", "30"))
        i = 0
        while time.monotonic() < end:
            w, r = cl.nodes[i % 3], cl.nodes[(i + 1) % 3]
            with w.client() as c:
                c.set(f"etcd/{i}", f"{i}".encode())
            with r.client() as c:
                assert get(c, f"etcd/{i}") == f"{i}".encode()
                assert get(c, "etcd/before") == b"b"
            i += 1
            time.sleep(0.05)
        info = cl.nodes[0].info()
        assert info["etcd_state"] == "unreachable", info
        assert info["members"] == 3
    finally:
        cl.etcd.start()
    wait_for(lambda: cl.nodes[0].info()["etcd_state"] == "ok", 20, "etcd reachable again")
    cl.wait_members(3)
    with cl.nodes[2].client() as c:
        assert get(c, "etcd/0") == b"0"


def outcome(c, key):
    """get(), or "unavailable"."""
    try:
        return get(c, key)
    except gpukv.Unavailable as e:
        outcome.why = str(e)
        return "unavailable"


@check
def a_partitioned_node_is_fenced_and_serves_nothing_stale(cl: Cluster):
    if not cl.net:
        print(f"  partition: skipped ({cl.net_why})")
        return
    inner = next(n for n in cl.nodes if n.inside)
    outer = [n for n in cl.nodes if not n.inside]
    n = 20
    with inner.client() as c:  # values the inner node owns
        for i in range(n):
            c.set(f"part/in{i}", b"old-in")
    with outer[0].client() as c:  # values others own, which the inner node reads (and homes)
        for i in range(n):
            c.set(f"part/out{i}", b"old-out")
    with inner.client() as c:
        for i in range(n):
            assert get(c, f"part/out{i}") == b"old-out"
    joins = inner.info()["membership_joins"]
    cut_at = time.monotonic()
    cl.net.cut()
    healed = False
    try:
        # Inside: the old value, then UNAVAILABLE from when its lease may have run out on.
        fenced_at = None
        with inner.client() as c:
            while time.monotonic() - cut_at < cl.ttl + 1.5:
                v = outcome(c, "part/in0")
                if v == "unavailable":
                    fenced_at = fenced_at or time.monotonic() - cut_at
                else:
                    assert v == b"old-in" and fenced_at is None, (v, fenced_at)
                time.sleep(0.05)
        assert fenced_at is not None and fenced_at <= cl.ttl + 0.3, fenced_at
        # Outside: the inner node leaves, its values are gone, new writes of every key land.
        wait_for(lambda: all(o.info()["members"] == len(outer) for o in outer), cl.ttl + 10,
                 "the others to see the inner node leave")
        with outer[0].client() as c:
            wait_for(lambda: outcome(c, "part/in0") is None, 10, "its value to read as missing")
            for i in range(n):
                c.set(f"part/in{i}", b"new-in")
                c.set(f"part/out{i}", b"new-out")
        # Inside again: nothing old is served, and nothing is written.
        with inner.client() as c:
            for i in range(n):
                for k in (f"part/in{i}", f"part/out{i}"):
                    assert outcome(c, k) == "unavailable", k
            try:
                c.set("part/in0", b"from-inside")
                raise AssertionError("a write was taken while fenced")
            except gpukv.Unavailable:
                pass
            try:
                list(c.list("part/"))
                raise AssertionError("a LIST was answered while fenced")
            except gpukv.Unavailable:
                pass
        info = inner.info()
        assert info["serving"] == 0 and info["fenced_requests"] >= 2 * n, info
        with inner.client() as c:
            metrics = c.metrics()
        assert "\ngpukv_cluster_serving 0\n" in metrics, metrics[:2000]
        assert "\ngpukv_cluster_etcd_reachable 0\n" in metrics
        cl.net.heal()
        healed = True
        cl.wait_members(3, timeout=20)
        wait_for(lambda: inner.info()["serving"] == 1, 15, "the inner node to serve again")
        assert inner.info()["membership_joins"] == joins + 1  # back as a new incarnation
        for node in cl.nodes:
            with node.client() as c:
                for i in range(n):
                    assert get(c, f"part/in{i}") == b"new-in", (node.name, i)
                    assert get(c, f"part/out{i}") == b"new-out", (node.name, i)
    finally:
        if not healed:
            cl.net.heal()
    print(f"  partition: fenced {fenced_at:.2f}s after the cut (TTL {cl.ttl}s): {outcome.why}")


@check
def concurrent_histories_are_linearizable_while_a_home_dies_etcd_stops_and_a_node_is_cut_off(cl: Cluster):
    # Two keys homed on n3 (which is cut off below: a node that kept serving its records and
    # replicas then would read old values) and two homed elsewhere.
    at_n3, elsewhere = [], []
    with cl.nodes[0].client() as c:
        for k in range(64):
            before = cl.nodes[2].info()["keys_homed"]
            c.set(f"lin/{k}", b"")
            (at_n3 if cl.nodes[2].info()["keys_homed"] > before else elsewhere).append(f"lin/{k}")
            if len(at_n3) >= 2 and len(elsewhere) >= 2:
                break
            c.delete(f"lin/{k}")
    keys = at_n3[:2] + elsewhere[:2]
    assert len(keys) == 4, (at_n3, elsewhere)
    with cl.nodes[0].client() as c:
        for k in keys:
            c.delete(k)
    history = {k: [] for k in keys}
    lock = threading.Lock()
    stop = threading.Event()
    counter = [0]
    t0 = time.monotonic()

    def client_loop(node, cid, writes):
        rng = random.Random(cid)
        c = node.client(timeout=5)
        while not stop.is_set():
            key = rng.choice(keys)
            kind = rng.choice("wwrrrd") if writes else "r"
            with lock:
                counter[0] += 1
                value = f"{cid}-{counter[0]}".encode()
            op = Op(kind, value if kind == "w" else None, time.monotonic() - t0, client=cid)
            try:
                if kind == "w":
                    c.set(key, value)
                elif kind == "r":
                    op.value = get(c, key)
                else:
                    op.existed = c.delete(key) == 1
                op.ret = time.monotonic() - t0
            except gpukv.Error:
                if kind == "r":
                    op = None  # a failed read says nothing
                else:
                    op.ret = math.inf
                try:
                    c.close()
                except gpukv.Error:
                    pass
                time.sleep(0.05)
                try:
                    c = node.client(timeout=5)
                except gpukv.Error:
                    time.sleep(0.2)
                    continue
            if op:
                with lock:
                    history[key].append(op)
            time.sleep(0.002)  # a history the checker can search in seconds
        c.close()

    # Writers on n1 and n2 (the owners); readers on n3, which dies and returns (it is only a
    # home and a reader, so no value dies with it: the register model holds).
    threads = []
    for i in range(2):
        for node in cl.nodes[:2]:
            threads.append(threading.Thread(target=client_loop, args=(node, f"{node.name}.{i}", True)))
    threads.append(threading.Thread(target=client_loop, args=(cl.nodes[2], "n3.r", False)))
    for t in threads:
        t.start()
    try:
        time.sleep(3)
        cl.nodes[2].kill()
        time.sleep(cl.ttl + 2)
        cl.nodes[2].start()
        time.sleep(2)
        cl.etcd.stop()
        time.sleep(4)
        cl.etcd.start()
        time.sleep(3)
        if cl.net:  # n3 cut off from etcd and the others, past its lease, then back
            cl.net.cut()
            time.sleep(cl.ttl + 3)
            cl.net.heal()
            time.sleep(4)
    finally:
        if cl.net:
            cl.net.heal()
        stop.set()
        for t in threads:
            t.join()
    total = sum(len(h) for h in history.values())
    done = sum(1 for h in history.values() for o in h if o.ret != math.inf)
    for key, ops in history.items():
        try:
            ok = linearizable(ops)
        except RuntimeError:  # the search's budget: dumped like a failure
            ok = False
        if not ok:
            dump = os.path.join(os.environ.get("GKV_TEST_OUT", "/tmp"),
                                f"gkv-lin-{key.replace('/', '_')}.json")
            with open(dump, "w") as f:
                json.dump([o.__dict__ | {"value": o.value.decode() if o.value is not None else None,
                                         "ret": None if o.ret == math.inf else o.ret}
                           for o in ops], f)
            counts = {n.name: misses(n) for n in cl.nodes if n.alive()}
            raise AssertionError(f"{key}: not linearizable ({len(ops)} operations; {dump}; "
                                 f"times from monotonic {t0:.6f} s, as GPUKV_TRACE's); "
                                 f"read misses by path: {counts}")
    refused = {n.name: n.info()["peer_replies_refused"] for n in cl.nodes if n.alive()}
    assert not any(refused.values()), f"replies under another request's id: {refused}"
    print(f"  linearizability: {total} operations on {len(keys)} keys "
          f"({done} answered), 0 violations")
    assert done > 200, f"only {done} operations answered"
    cl.wait_members(3)


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    daemon, only = sys.argv[1], sys.argv[2:]
    etcd = os.environ.get("GKV_ETCD", "etcd")
    if not any(os.access(os.path.join(p, etcd), os.X_OK) for p in os.environ["PATH"].split(":")) \
            and not os.access(etcd, os.X_OK):
        print("no etcd binary (apt-get install etcd-server): skipped")
        return 77
    cl = Cluster(daemon)
    failed = 0
    try:
        for fn in CHECKS:
            if only and not any(o in fn.__name__ for o in only):
                continue
            start = time.monotonic()
            try:
                fn(cl)
                print(f"ok   {fn.__name__} ({time.monotonic() - start:.1f}s)", flush=True)
            except Exception:  # noqa: BLE001
                failed += 1
                print(f"FAIL {fn.__name__}", flush=True)
                traceback.print_exc()
                for node in cl.nodes:
                    print(f"--- {node.name} log tail ---")
                    print(node.log_tail())
                if not all(n.alive() for n in cl.nodes):
                    for n in cl.nodes:
                        if not n.alive():
                            n.start()
                    cl.wait_members(3)
    finally:
        for problem in cl.close():
            failed += 1
            print(f"FAIL {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

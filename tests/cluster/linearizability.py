"""linearizability.py: a single-register linearizability checker (Wing and Gong's search with
Lowe's memoisation) for the histories the cluster test records, one key at a time.

An operation is a write of a value unique to it, a delete (optionally with whether a value was
there), or a read of a value or of nothing. Each has the time it was called and the time it
returned; an operation that failed without an answer (a timeout, UNAVAILABLE, a connection that
died) may or may not have happened: it returned at infinity and need not be placed at all. A
history is linearizable when its operations can be put in one order that respects real time
(an operation that returned before another was called comes first) in which every read sees
the last write (or nothing after a delete)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Op:
    kind: str          # "w" write, "d" delete, "r" read
    value: bytes | None  # w: the value written; r: the value read (None: a miss)
    call: float
    ret: float = math.inf  # inf: no answer (may or may not have taken effect)
    existed: bool | None = None  # d: whether the delete found a value (None: unknown)
    client: str = ""


def linearizable(ops: list[Op], initial: bytes | None = None, budget: int = 2_000_000) -> bool:
    """True when ops (one key's history) is linearizable from initial. Raises RuntimeError if
    the search needs more than budget states (it never has for the test's histories)."""
    # An unanswered write whose value nobody read is seen only by a delete that found a value
    # (existed=True): all of them are alike (their values stand for one value nobody reads),
    # and like unanswered deletes only the earliest called unplaced one need be tried (else
    # every one of them stays a choice at every step of the search, which grows without
    # bound). Without such deletes they change nothing and are left out.
    read = {o.value for o in ops if o.kind == "r" and o.value is not None}
    found = any(o.kind == "d" and o.existed for o in ops)
    unread = b"\0an unanswered write nobody read"
    ops = sorted((Op(o.kind, unread, o.call, o.ret, o.existed, o.client)
                  if o.kind == "w" and o.ret == math.inf and o.value not in read else o
                  for o in ops
                  if found or not (o.kind == "w" and o.ret == math.inf and o.value not in read)),
                 key=lambda o: o.call)
    n = len(ops)
    must = 0
    for i, o in enumerate(ops):
        if o.ret != math.inf:
            must |= 1 << i
    seen: set[tuple[int, bytes | None]] = set()
    stack = [(0, initial, 0)]  # (placed ops as a bit set, the register's value, first unplaced)
    while stack:
        done, state, lo = stack.pop()
        while lo < n and done >> lo & 1:
            lo += 1
        if done & must == must:
            return True
        if (done, state) in seen:
            continue
        seen.add((done, state))
        if len(seen) > budget:
            raise RuntimeError("linearizability search exceeded its budget")
        # The ops that may go next: called before every unplaced op has returned. Sorted by
        # call, and ret >= call, so the scan stops once calls pass the smallest ret seen.
        first_ret, window = math.inf, []
        for i in range(lo, n):
            o = ops[i]
            if o.call > first_ret:
                break
            if done >> i & 1:
                continue
            window.append(i)
            first_ret = min(first_ret, o.ret)
        free_delete = free_write = False
        # Placing a write nobody read is of use only right before a delete that found a value
        # (a read cannot follow it, a write or another delete undoes it): only while one of
        # those may go next.
        finder = any(ops[i].kind == "d" and ops[i].existed for i in window)
        for i in window:
            o = ops[i]
            if o.call > first_ret:
                continue
            if o.kind == "d" and o.ret == math.inf and o.existed is None:
                # Unanswered deletes all do the same and constrain nothing: trying the
                # earliest called is enough (it can go wherever a later one could).
                if free_delete:
                    continue
                free_delete = True
            if o.kind == "w" and o.value == unread:
                if free_write or not finder:  # the same for unanswered writes nobody read
                    continue
                free_write = True
            if o.kind == "r":
                if o.value != state:
                    continue
                nxt = state
            elif o.kind == "w":
                nxt = o.value
            else:
                if o.existed is not None and o.existed != (state is not None):
                    continue
                nxt = None
            stack.append((done | 1 << i, nxt, lo))
    return False


def _self_test() -> None:
    w = lambda v, a, b: Op("w", v, a, b)
    r = lambda v, a, b: Op("r", v, a, b)
    # A read after a completed write must see it.
    assert linearizable([w(b"1", 0, 1), r(b"1", 2, 3)])
    assert not linearizable([w(b"1", 0, 1), r(None, 2, 3)])
    # Concurrent with the write: either value.
    assert linearizable([w(b"1", 0, 5), r(None, 1, 2), r(b"1", 3, 4)])
    # Once a read saw the new value, a later read may not see the old one.
    assert not linearizable([w(b"1", 0, 1), w(b"2", 2, 10), r(b"2", 3, 4), r(b"1", 5, 6)])
    # An unanswered write may take effect late, or never.
    assert linearizable([w(b"1", 0, math.inf), r(None, 1, 2), r(b"1", 3, 4)])
    assert linearizable([w(b"1", 0, math.inf), r(None, 1, 2)])
    # Many unanswered deletes: no blow-up either, and one of them explains a miss.
    assert linearizable([Op("d", None, i, math.inf) for i in range(100)]
                        + [w(b"1", 0, 1), r(None, 200, 201)])
    assert not linearizable([Op("d", None, 5, math.inf), w(b"1", 0, 1), r(None, 2, 3)])
    # Many unanswered writes nobody read: no search blow-up.
    assert linearizable([w(bytes([i]), i, math.inf) for i in range(200)] + [r(None, 300, 301)])
    # A delete that found nothing cannot follow a completed write.
    assert not linearizable([w(b"1", 0, 1), Op("d", None, 2, 3, existed=False)])
    # A delete that found a value may have found an unanswered write nobody read, taking
    # effect late (the cluster test's failure of 2026-11-26: checked as a violation before).
    late = [Op("d", None, 0, 1, existed=False), w(b"x", 2, math.inf),
            Op("d", None, 10, 11, existed=True), w(b"y", 10.5, 12), r(b"y", 13, 14)]
    assert linearizable(late)
    assert not linearizable(late[:1] + late[2:])  # without it nothing was there to find
    # Many of them beside deletes that found values: no blow-up.
    assert linearizable([w(bytes([i]), i, math.inf) for i in range(200)]
                        + [Op("d", None, 300 + 2 * i, 301 + 2 * i, existed=True) for i in range(3)])


if __name__ == "__main__":
    _self_test()
    print("linearizability checker: self-test passed")

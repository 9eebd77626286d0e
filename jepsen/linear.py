"""A small Wing-Gong-Lowe linearizability checker for the metadata workload.

The model is a set of topics; it is checked one topic at a time (a set is the product of
independent per-key registers, so a history is linearizable iff every per-topic
sub-history is). The per-topic state is absent (``None``/``False``) or present with a
partition count (``True`` when the count is not tracked).

Operations (``f`` / completion):

- ``create``: ok (absent -> 1 partition); fail with ``"error": "exists"`` (a read of present);
- ``delete``: ok (present -> absent); fail with ``"error": "unknown"`` (a read of absent);
- ``grow`` (CreatePartitions to ``count``): ok (present with fewer -> ``count``); a refusal
  did not happen (the node checks the request against its own copy of the metadata);
- ``describe``: ok with ``value`` ``{"topic": t, "exists": bool, "partitions": n}`` (a read
  of absent, or of present with exactly n partitions);
- any other fail: the operation did not happen (ignored); ``info`` or no completion:
  indeterminate -- it may take effect at any point after its invocation, or never.

The search is Lowe's refinement of Wing and Gong: depth-first over which pending
operation takes effect next, where an operation may go next only if no other pending
operation returned before it was invoked, with a cache of (set of linearized ops, state).
"""

from __future__ import annotations

from dataclasses import dataclass

INF = float("inf")


@dataclass(frozen=True)
class Op:
    i: int  # position in the sub-history
    call: float
    ret: float  # INF: indeterminate
    f: str  # create | delete | describe-present | describe-absent | read-present | read-absent
    index: int  # index of the completion (or invocation) in the full history
    optional: bool  # indeterminate: may never take effect


def _present(state) -> bool:
    return state is not None and state is not False


def step(state, f) -> tuple[bool, object]:
    """(legal, new state). ``f`` is a name, or a (name, partition count) pair."""
    if isinstance(f, tuple):
        name, n = f
        if name == "grow":
            return (_present(state) and (state is True or state < n), n)
        if name == "describe-count":  # present with exactly n partitions
            return (_present(state) and (state is True or state == n), state)
        if name == "read-at-least":  # a refused grow to n: present with >= n partitions
            return (_present(state) and (state is True or state >= n), state)
        raise ValueError(f)
    if f == "create":
        return (not _present(state), 1)
    if f == "delete":
        return (_present(state), None)
    if f in ("describe-present", "read-present"):
        return (_present(state), state)
    if f in ("describe-absent", "read-absent"):
        return (not _present(state), state)
    raise ValueError(f)


def topic_ops(history: list[dict], include_describe: bool = True) -> dict[str, list[Op]]:
    """Per-topic Op lists from a metadata history."""
    from .checkers import pairs

    out: dict[str, list] = {}
    for inv, comp in pairs(history):
        if inv["f"] not in ("create", "delete", "describe", "grow"):
            continue
        topic = inv["value"]["topic"] if isinstance(inv["value"], dict) else inv["value"]
        t = comp["type"] if comp is not None else "info"
        ret = comp["time"] if t in ("ok", "fail") else INF
        idx = comp["index"] if comp is not None else inv["index"]
        f = None
        if inv["f"] == "describe":
            if not include_describe or t != "ok":
                continue
            v = comp["value"]
            if not v["exists"]:
                f = "describe-absent"
            elif "partitions" in v:
                f = ("describe-count", v["partitions"])
            else:
                f = "describe-present"
        elif inv["f"] == "grow" and t in ("ok", "info"):
            f = ("grow", inv["value"]["count"])
        elif t == "ok" or t == "info":
            f = inv["f"]
        elif t == "fail":
            err = comp.get("error")
            if inv["f"] == "create" and err == "exists":
                f = "read-present"
            elif inv["f"] == "delete" and err == "unknown":
                f = "read-absent"
            else:  # (a refused grow: the node checked its own copy, which may be stale)
                continue  # definitely did not happen
        lst = out.setdefault(topic, [])
        lst.append((inv["time"], ret, f, idx, t == "info"))
    return {
        topic: [Op(i, c, r, f, idx, opt) for i, (c, r, f, idx, opt) in
                enumerate(sorted(lst, key=lambda x: (x[0], x[1])))]
        for topic, lst in out.items()
    }


def linearizable(ops: list[Op], initial=None, max_states: int = 2_000_000):
    """(True, order) if linearizable, else (False, info about the deepest point reached).
    Returns (None, info) when the search exceeded ``max_states`` cache entries."""
    n = len(ops)
    required = 0
    for op in ops:
        if not op.optional:
            required |= 1 << op.i
    seen: set = set()
    # stack of (done bitmask, state, order tuple)
    stack = [(0, initial, ())]
    best = (0, ())
    while stack:
        done, state, order = stack.pop()
        if done & required == required:
            return True, [ops[i].index for i in order]
        if len(order) > best[0]:
            best = (len(order), order)
        # the earliest return among pending determinate ops bounds who may go next
        bound = INF
        for op in ops:
            if not (done >> op.i) & 1 and op.ret < bound:
                bound = op.ret
        for op in ops:
            if op.call > bound:
                break  # ops are sorted by call time
            if (done >> op.i) & 1:
                continue
            legal, new = step(state, op.f)
            if not legal:
                continue
            nd = done | (1 << op.i)
            key = (nd, new)
            if key in seen:
                continue
            seen.add(key)
            if len(seen) > max_states:
                return None, {"reason": "search limit"}
            stack.append((nd, new, order + (op.i,)))
    # not linearizable: report the ops pending at the deepest point
    done = 0
    for i in best[1]:
        done |= 1 << i
    pending = [op for op in ops if not (done >> op.i) & 1]
    bound = min((op.ret for op in pending), default=INF)
    stuck = [op for op in pending if op.call <= bound]
    return False, {
        "linearized": [ops[i].index for i in best[1]][-5:],
        "could_not_place": [{"f": op.f, "index": op.index} for op in stuck][:10],
        "n_ops": n,
    }


def check_metadata(history: list[dict]) -> dict:
    """nonlinearizable-metadata: create/delete (and failed creates/deletes, which are
    reads) are not linearizable for some topic. stale-describe: they are, but a describe
    (answered from the node's local copy of the metadata) does not fit."""
    out: dict = {}
    with_desc = topic_ops(history, include_describe=True)
    without = topic_ops(history, include_describe=False)
    for topic in sorted(with_desc):
        ok, info = linearizable(with_desc[topic])
        if ok:
            continue
        ok2, info2 = linearizable(without.get(topic, []))
        if ok2 is False:
            out.setdefault("nonlinearizable-metadata", []).append({"topic": topic, **info2})
        elif ok2 is None or ok is None:
            out.setdefault("metadata-check-incomplete", []).append({"topic": topic})
        else:
            out.setdefault("stale-describe", []).append({"topic": topic, **info})
    return out

"""A/B two revisions of raftlog with the same bench, as interleaved pairs.

    python bench/ab.py REV_A REV_B [--pairs 3] [--bench throughput] [--json] [-- BENCH ARGS]

Each revision gets a throwaway git worktree and venv (``--system-site-packages``, the
revision installed editable without dependencies), so each run uses that revision's
node and client. The bench runs A B, B A, A B ... (``--pairs`` pairs, at least 3): a slow
minute on this shared machine then hits both sides alike, and each side runs second in
half the pairs (the second run of a pair was measured slower). Every numeric figure of the
bench's ``--json`` output is collected; the table shows, per figure, each revision's
median and spread (min..max) and the ratio B/A of the medians, and flags (``*``) a
difference larger than the spread of either side.

Benches (``--bench``):
  throughput     bench/throughput.py of each revision (its own bench code), args as given
                 (e.g. ``--rate 1000 --secs 10``); ``--json`` is added
  latency_floor  bench/latency_floor.py of each revision; ``--json`` is added
  latency_budget bench/latency_budget.py of each revision (every hop of a record's path:
                 ``runs.R.hops.H.step_p50_ms``, R and H in the bench's order, e.g.
                 ``--rates 1000 --rf 1,3 --write-caching false``); ``--json`` is added
  transactions   bench/transactions.py of each revision (issue #33's targets: e.g.
                 ``--phases 100 --skip-read``); ``--json`` is added
  peers          ../shared/peers/run.py ``--peers raftlog-r1,raftlog-r3`` (the peer
                 harness's raftlog rows, RAFTLOG_BIN and the python of each revision's
                 venv), its results JSON read back

``--node-set SIDE:KEY=VALUE`` (repeatable; SIDE ``a`` or ``b``) gives that revision's nodes a
node config key (``peers``: every ``raftlog up`` of that side gets ``--set KEY=VALUE``, through
a wrapper as its RAFTLOG_BIN), so a revision that has a setting can be compared with one that
predates it on equal terms: ``ab.py 52e12a3 HEAD --bench peers --node-set
b:write.caching.default=true`` (52e12a3 acknowledges from memory, and has no such key).
``--a-args`` / ``--b-args "ARGS"`` add bench arguments to one side only.

``--json`` prints the summary as JSON. Worktrees and venvs live in a temp dir that is
removed at the end (``--keep`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PEERS = os.path.join(os.path.dirname(REPO), "shared", "peers", "run.py")
#: Fewer pairs than this cannot tell a difference from noise.
PAIRS_MIN = 3
#: Longest a single bench run may take before the comparison gives up.
RUN_TIMEOUT_S = 1800


# --------------------------------------------------------------------------- pure part


def figures(doc, prefix: str = "") -> dict[str, float]:
    """Every numeric leaf of a bench's JSON output, by dotted path (lists by index;
    booleans and strings skipped)."""
    out: dict[str, float] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(figures(v, f"{prefix}{k}."))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            key = v.get("name") or v.get("peer") if isinstance(v, dict) else None
            out.update(figures(v, f"{prefix}{key or i}."))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        out[prefix[:-1]] = float(doc)
    return out


def summarize(runs_a: list[dict], runs_b: list[dict]) -> list[dict]:
    """Per figure present in every run of both sides: medians, spreads, ratio, flag."""
    keys = set.intersection(*(set(r) for r in runs_a + runs_b)) if runs_a and runs_b else set()
    rows = []
    for key in sorted(keys):
        a = [r[key] for r in runs_a]
        b = [r[key] for r in runs_b]
        ma, mb = statistics.median(a), statistics.median(b)
        spread = max(max(a) - min(a), max(b) - min(b))
        rows.append({"figure": key, "a_median": ma, "a_min": min(a), "a_max": max(a),
                     "b_median": mb, "b_min": min(b), "b_max": max(b),
                     "ratio": (mb / ma) if ma else None,
                     "beyond_spread": abs(mb - ma) > spread})
    return rows


def render(rows: list[dict], rev_a: str, rev_b: str, pairs: int) -> str:
    lines = [f"A = {rev_a}, B = {rev_b}, {pairs} interleaved pairs; * = |B - A| > spread",
             f"{'figure':<46} {'A median':>11} {'A spread':>19} {'B median':>11} "
             f"{'B spread':>19} {'B/A':>6}"]
    for r in rows:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] is not None else "-"
        lines.append(
            f"{r['figure'][:46]:<46} {r['a_median']:>11.4g} "
            f"{r['a_min']:>9.4g}..{r['a_max']:<8.4g} {r['b_median']:>11.4g} "
            f"{r['b_min']:>9.4g}..{r['b_max']:<8.4g} {ratio:>6}"
            + (" *" if r["beyond_spread"] else ""))
    return "\n".join(lines)


# --------------------------------------------------------------------------- revisions


class Revision:
    """A worktree of one revision with its own venv."""

    def __init__(self, rev: str, root: str):
        self.rev = rev
        self.sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}").strip()
        self.dir = os.path.join(root, f"wt-{self.sha[:12]}")
        self.venv = os.path.join(root, f"venv-{self.sha[:12]}")

    @property
    def python(self) -> str:
        return os.path.join(self.venv, "bin", "python")

    def build(self) -> None:
        if not os.path.isdir(self.dir):
            _git("worktree", "add", "--detach", self.dir, self.sha)
        if not os.path.exists(self.python):
            subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", self.venv],
                           check=True)
            subprocess.run([self.python, "-m", "pip", "install", "-q", "--no-deps", "-e",
                            self.dir], check=True, stdout=subprocess.DEVNULL)
        probe = subprocess.run([self.python, "-c", "import raftlog; print(raftlog.__file__)"],
                               cwd=tempfile.gettempdir(), capture_output=True, text=True,
                               check=True).stdout.strip()
        if not probe.startswith(self.dir):
            raise SystemExit(f"ab: {self.rev}'s venv imports raftlog from {probe}, not from "
                             f"{self.dir}")

    def remove(self) -> None:
        _git("worktree", "remove", "--force", self.dir, check=False)


def parse_node_sets(items: list[str]) -> dict[str, list[str]]:
    """``SIDE:KEY=VALUE`` items -> {"a": ["KEY=VALUE", ...], "b": [...]}."""
    out: dict[str, list[str]] = {"a": [], "b": []}
    for item in items:
        side, sep, kv = item.partition(":")
        if not sep or side not in out or "=" not in kv or not kv.split("=", 1)[0]:
            raise SystemExit(f"ab: --node-set {item!r}: expected a:KEY=VALUE or b:KEY=VALUE")
        out[side].append(kv)
    return out


def node_wrapper(rev: Revision, sets: list[str], scratch: str) -> str:
    """RAFTLOG_BIN for ``rev``: its raftlog, with ``--set KEY=VALUE`` after ``up``'s
    arguments when there are node settings."""
    exe = os.path.join(rev.venv, "bin", "raftlog")
    if not sets:
        return exe
    path = os.path.join(scratch, f"raftlog-{rev.sha[:12]}")
    flags = " ".join(f"--set {shlex.quote(kv)}" for kv in sets)
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nif [ "$1" = up ]; then exec {shlex.quote(exe)} "$@" {flags}; fi\n'
                f'exec {shlex.quote(exe)} "$@"\n')
    os.chmod(path, 0o755)
    return path


def _git(*args: str, check: bool = True) -> str:
    r = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"ab: git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def pair_order(i: int) -> tuple[int, int]:
    """The sides (0 = A, 1 = B) of pair ``i`` in the order they run: A B, then B A, ...
    The second run of a pair is often slower on this machine (measured: the same code as B
    after A read 20% slower on every hop of bench/latency_budget.py, and 6% slower the
    other way round), so each side runs second in half the pairs."""
    return (0, 1) if i % 2 == 0 else (1, 0)


def run_once(rev: Revision, bench: str, extra: list[str], scratch: str,
             node_sets: list[str] = ()) -> dict[str, float]:
    """One run of ``bench`` on ``rev`` (its nodes given ``node_sets``): its figures."""
    env = dict(os.environ)
    if node_sets and bench != "peers":
        raise SystemExit("ab: --node-set works with --bench peers (other benches start "
                         "their own nodes: give their flags with --a-args/--b-args)")
    if bench == "peers":
        if not os.path.exists(PEERS):
            raise SystemExit(f"ab: the peer harness is not at {PEERS}")
        out = tempfile.mkdtemp(dir=scratch)
        env["RAFTLOG_BIN"] = node_wrapper(rev, list(node_sets), scratch)
        cmd = [rev.python, PEERS, "--peers", "raftlog-r1,raftlog-r3", "--out", out, *extra]
    else:
        cmd = [rev.python, os.path.join(rev.dir, "bench", f"{bench}.py"), *extra, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch,
                       timeout=RUN_TIMEOUT_S)
    if r.returncode != 0:
        raise SystemExit(f"ab: {bench} on {rev.rev} exited {r.returncode}:\n"
                         f"{r.stderr[-3000:]}")
    if bench == "peers":
        [name] = [n for n in os.listdir(out) if n.endswith(".json")]
        with open(os.path.join(out, name)) as f:
            return figures(json.load(f)["results"])
    return figures(json.loads(r.stdout[r.stdout.index("{"):]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rev_a")
    ap.add_argument("rev_b")
    ap.add_argument("--pairs", type=int, default=PAIRS_MIN)
    ap.add_argument("--bench", choices=["throughput", "latency_floor", "latency_budget",
                                        "transactions", "peers"],
                    default="throughput")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the worktrees and venvs")
    ap.add_argument("--node-set", action="append", default=[], metavar="SIDE:KEY=VALUE",
                    help="a node config key for one side's nodes (a or b; --bench peers)")
    ap.add_argument("--a-args", default="", help="bench arguments for A only")
    ap.add_argument("--b-args", default="", help="bench arguments for B only")
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    extra = argv[cut + 1:]  # the bench's own arguments
    if args.pairs < PAIRS_MIN:
        ap.error(f"--pairs must be {PAIRS_MIN} or more: fewer cannot tell a difference "
                 "from noise")
    node_sets = parse_node_sets(args.node_set)
    if any(node_sets.values()) and args.bench != "peers":
        ap.error("--node-set works with --bench peers only (give other benches' node flags "
                 "with --a-args/--b-args)")
    side_args = [shlex.split(args.a_args), shlex.split(args.b_args)]
    root = tempfile.mkdtemp(prefix="raftlog-ab-")
    revs = [Revision(args.rev_a, root), Revision(args.rev_b, root)]
    try:
        for rev in revs:
            print(f"ab: building {rev.rev} ({rev.sha[:12]})", file=sys.stderr, flush=True)
            rev.build()
        runs: list[list[dict]] = [[], []]
        for i in range(args.pairs):
            for side in pair_order(i):
                rev = revs[side]
                print(f"ab: pair {i + 1}/{args.pairs}: {rev.rev}", file=sys.stderr, flush=True)
                runs[side].append(run_once(rev, args.bench, extra + side_args[side], root,
                                           node_sets["ab"[side]]))
        rows = summarize(*runs)
        if args.json:
            print(json.dumps({"a": args.rev_a, "b": args.rev_b, "pairs": args.pairs,
                              "bench": args.bench, "args": extra,
                              "node_sets": node_sets, "a_args": side_args[0],
                              "b_args": side_args[1], "figures": rows}, indent=1))
        else:
            print(render(rows, args.rev_a, args.rev_b, args.pairs))
        return 0
    finally:
        if not args.keep:
            for rev in revs:
                rev.remove()
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

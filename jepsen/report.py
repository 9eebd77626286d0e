"""results.json, report.html and the timeline PNG: latency over time, and successful
operations per second (jepsen/availability.py), faults shaded on both panels."""

from __future__ import annotations

import html
import json
import os

from .availability import BIN_S, fault_windows, ok_per_second
from .checkers import pairs
from .txn_checker import ANOMALIES as TXN_ANOMALIES

#: What an anomaly means, for the anomaly table (names without an entry show none).
MEANINGS = dict(TXN_ANOMALIES)


def latency_points(history: list[dict]) -> list[tuple[float, float, str, str]]:
    """(invoke time s, latency ms, f, type) of every completed client operation."""
    out = []
    for inv, comp in pairs(history):
        if comp is None or inv["process"] == "nemesis" or inv["f"].startswith("observe"):
            continue
        out.append((inv["time"] / 1e9, (comp["time"] - inv["time"]) / 1e6, inv["f"],
                    comp["type"]))
    return out


def nemesis_windows(history: list[dict]) -> list[tuple[float, float, str]]:
    """(start s, end s, label) of every fault, from the nemesis process's ops: a ``start``
    op opens a window, the next ``stop`` closes it (the end of the run otherwise)."""
    return [(w["start"], w["end"], w["what"]) for w in fault_windows(history)]


def percentiles(xs: list[float]) -> dict:
    if not xs:
        return {}
    s = sorted(xs)

    def q(p):
        return round(s[min(len(s) - 1, int(p * len(s)))], 3)

    return {"p50": q(0.5), "p99": q(0.99), "max": round(s[-1], 3), "n": len(s)}


def stats(history: list[dict]) -> dict:
    by: dict = {}
    for inv, comp in pairs(history):
        if inv["process"] == "nemesis":
            continue
        t = comp["type"] if comp else "open"
        d = by.setdefault(inv["f"], {})
        d[t] = d.get(t, 0) + 1
    lat = {}
    for _t, ms, f, typ in latency_points(history):
        if typ == "ok":
            lat.setdefault(f, []).append(ms)
    return {"ops": by, "latency_ms": {f: percentiles(v) for f, v in lat.items()},
            "nemesis": [{"start": round(a, 2), "end": round(b, 2), "fault": lab}
                        for a, b, lab in nemesis_windows(history)]}


def plot_timeline(history: list[dict], path: str) -> str | None:
    """Write the PNG; returns None (and writes nothing) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    pts = latency_points(history)
    fig, (ax, ax_ok) = plt.subplots(2, 1, figsize=(12, 8), dpi=100, sharex=True,
                                    gridspec_kw={"height_ratios": [5, 3]})
    for a, b, label in nemesis_windows(history):
        for panel in (ax, ax_ok):
            panel.axvspan(a, b, color="tab:red", alpha=0.12)
        ax.text(a, 1.0, label[:30], transform=ax.get_xaxis_transform(), fontsize=7,
                va="top", rotation=90, color="tab:red")
    colors = {"ok": "tab:blue", "info": "tab:orange", "fail": "tab:red"}
    markers = {"send": "o", "poll": "^", "create": "s", "delete": "x", "describe": "."}
    groups: dict = {}
    for t, ms, f, typ in pts:
        groups.setdefault((f, typ), ([], []))
        groups[(f, typ)][0].append(t)
        groups[(f, typ)][1].append(max(ms, 0.01))
    for (f, typ), (xs, ys) in sorted(groups.items()):
        ax.scatter(xs, ys, s=4, c=colors.get(typ, "gray"), marker=markers.get(f, "o"),
                   label=f"{f} {typ}", alpha=0.6, linewidths=0)
    ax.set_yscale("log")
    ax.set_ylabel("latency (ms)")
    ax.set_title("operation latency; shaded: faults")
    if groups:
        ax.legend(loc="upper right", fontsize=7, markerscale=3)
    rates = ok_per_second(history)
    for f, bins in rates.items():  # (the last bin drawn to its end)
        xs = [t for t, _ in bins] + [bins[-1][0] + BIN_S]
        ys = [n for _, n in bins] + [bins[-1][1]]
        ax_ok.step(xs, ys, where="post", label=f"{f} ok", linewidth=1)
    ax_ok.set_xlabel("time since start (s)")
    ax_ok.set_ylabel("ok operations / s")
    ax_ok.set_title("successful operations per second (availability); shaded: faults")
    if rates:
        ax_ok.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_results(out_dir: str, results: dict) -> str:
    path = os.path.join(out_dir, "results.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2, sort_keys=True, default=repr)
        f.write("\n")
    return path


def _availability_html(av: dict | None) -> list[str]:
    """The availability table: per fault kind, then per window (jepsen/availability.py)."""
    if not av or not av.get("fault_free"):
        return []
    e = html.escape

    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    def row(name, d, extra=""):
        send = (d.get("by_f") or {}).get("send", {})
        return (f"<tr><td>{e(name)}</td><td>{extra}</td><td>{d['seconds']:.1f}</td>"
                f"<td>{d['ok_per_s']}</td><td>{pct(d.get('availability'))}</td>"
                f"<td>{pct(send.get('availability'))}</td><td>{pct(d['ok_fraction'])}</td></tr>")

    out = ["<h2>Availability</h2>",
           "<p>ok operations per second during each fault, as a share of the fault-free "
           "rate (send: sends only); ok fraction: of the operations started in the span, "
           "the share that succeeded.</p>",
           "<table><tr><th>span</th><th>windows / what</th><th>seconds</th><th>ok/s</th>"
           "<th>availability</th><th>send availability</th><th>ok fraction</th></tr>",
           row("fault-free", av["fault_free"])]
    for kind, d in av.get("by_kind", {}).items():
        out.append(row(f"all {kind}", d, str(d["windows"])))
    for name, d in av.get("by_kind_and_nodes", {}).items():
        kind, _, n = name.partition("/")
        out.append(row(f"{kind} of {n} node{'s' if n != '1' else ''}", d, str(d["windows"])))
    if av.get("faults"):
        out.append(row("all faults", av["faults"]))
    out.append(row("overall", av["overall"]))
    for w in av.get("windows", []):
        out.append(row(f"{w['kind']} @{w['start']:.1f}s", w, e(w["what"][:60])))
    out.append("</table>")
    return out


def write_report(out_dir: str, history: list[dict], results: dict) -> str:
    png = plot_timeline(history, os.path.join(out_dir, "timeline.png"))
    e = html.escape
    verdict = "VALID" if results.get("valid") else "INVALID"
    color = "#2a7" if results.get("valid") else "#c33"
    parts = [
        "<!doctype html><meta charset=utf-8><title>raftlog jepsen report</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}"
        "pre{background:#f4f4f4;padding:1em;overflow:auto;max-height:30em}"
        "td,th{padding:.2em .8em;text-align:left;border-bottom:1px solid #ddd}</style>",
        f"<h1>raftlog jepsen: <span style='color:{color}'>{verdict}</span></h1>",
    ]
    for w in results.get("warnings", []):
        parts.append(f"<p style='color:#c60'><b>warning:</b> {e(str(w))}</p>")
    parts.append("<h2>Anomalies</h2>")
    counts = results.get("stats", {}).get("anomaly_counts", {})
    allowed = set(results.get("allowed_anomalies", []))
    if counts:
        parts.append("<table><tr><th>anomaly</th><th>count</th><th>counts against validity</th>"
                     "<th>meaning</th></tr>")
        for name, n in sorted(counts.items()):
            parts.append(f"<tr><td>{e(name)}</td><td>{n}</td>"
                         f"<td>{'no (expected for this workload)' if name in allowed else 'yes'}</td>"
                         f"<td>{e(MEANINGS.get(name, ''))}</td></tr>")
        parts.append("</table>")
        for name, note in sorted(results.get("notes", {}).items()):
            parts.append(f"<p><b>{e(name)}</b>: {e(note)}</p>")
        for name, ex in sorted(results.get("anomalies", {}).items()):
            parts.append(f"<h3>{e(name)}</h3><pre>{e(json.dumps(ex[:5], indent=1, default=repr))}</pre>")
    else:
        parts.append("<p>none</p>")
    parts += _availability_html(results.get("availability"))
    if png:
        parts.append("<h2>Timeline</h2><img src='timeline.png' width=1200>")
    else:
        parts.append("<p>(matplotlib is not installed: no timeline; pip install 'raftlog[jepsen]')</p>")
    parts.append("<h2>Run</h2><pre>" + e(json.dumps(results.get("config", {}), indent=1)) + "</pre>")
    parts.append("<h2>Stats</h2><pre>" + e(json.dumps(results.get("stats", {}), indent=1,
                                                      default=repr)) + "</pre>")
    path = os.path.join(out_dir, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path

"""results.json, report.html and the timeline PNG (latency over time, nemesis shaded)."""

from __future__ import annotations

import html
import json
import os

from .checkers import pairs


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
    end = history[-1]["time"] / 1e9 if history else 0.0
    windows, open_ = [], None
    for inv, comp in pairs(history):
        if inv["process"] != "nemesis":
            continue
        t = (comp or inv)["time"] / 1e9
        if inv["f"] == "start" and comp is not None and comp["type"] == "ok":
            if open_ is not None:
                windows.append((open_[0], t, open_[1]))
            open_ = (t, str(comp.get("value")))
        elif inv["f"] == "stop" and open_ is not None:
            windows.append((open_[0], t, open_[1]))
            open_ = None
    if open_ is not None:
        windows.append((open_[0], end, open_[1]))
    return windows


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
    fig, ax = plt.subplots(figsize=(12, 5), dpi=100)
    for a, b, label in nemesis_windows(history):
        ax.axvspan(a, b, color="tab:red", alpha=0.12)
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
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("operation latency; shaded: faults")
    if groups:
        ax.legend(loc="upper right", fontsize=7, markerscale=3)
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
        parts.append("<table><tr><th>anomaly</th><th>count</th><th>counts against validity</th></tr>")
        for name, n in sorted(counts.items()):
            parts.append(f"<tr><td>{e(name)}</td><td>{n}</td>"
                         f"<td>{'no (expected for this workload)' if name in allowed else 'yes'}</td></tr>")
        parts.append("</table>")
        for name, note in sorted(results.get("notes", {}).items()):
            parts.append(f"<p><b>{e(name)}</b>: {e(note)}</p>")
        for name, ex in sorted(results.get("anomalies", {}).items()):
            parts.append(f"<h3>{e(name)}</h3><pre>{e(json.dumps(ex[:5], indent=1, default=repr))}</pre>")
    else:
        parts.append("<p>none</p>")
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

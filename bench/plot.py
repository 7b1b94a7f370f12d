#!/usr/bin/env python3
"""Draw a benchmark CSV as an SVG plot for BENCHMARKS.md.

    python3 bench/plot.py KIND CSV OUT.svg [--command "…"] [--commit REV]

`concurrency`, `body`, `sinks`: a CSV of bench/peers/run.sh lines (bench/peers/sweep.sh,
bench/curves.sh): deliveries/s, and CPU per delivery (the worker's plus Redis' drain
share), against the concurrency, the body size or the sink entries per hook, one line per
system (the median where a point has several runs).
`tenants`: bench/curves.sh's CSV of `ankusa bench` runs: deliveries/s and Redis CPU per
row against the tenants the backlog is split over.
`workers`: bench/cluster/run.sh's CSV: deliveries/s and Redis CPU per row against the
worker processes on a 3-master cluster.

The plot names the machine (CPU model, cores), the commit and the command, so a picture
read apart from its table still says where it comes from. Needs matplotlib (installed with
pip on first use when missing: `python3 -m pip install matplotlib`).
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
from collections import defaultdict


def need_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py: installing matplotlib", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "matplotlib"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.check_output(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"], text=True
        ).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"


def median(points, f):
    return statistics.median(f(p) for p in points)


def curve(rows, out, *, x, xlabel, panels, title, command, at, log_base=2, series="system"):
    """One figure, one panel per (y label, panel title, value of a row), one line per series,
    the median where a point has several runs."""
    plt = need_matplotlib()
    # series -> x -> [rows]
    lines = defaultdict(lambda: defaultdict(list))
    for r in rows:
        lines[r.get(series, "ankusa") if series else "ankusa"][int(float(r[x]))].append(r)
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.6))
    if len(panels) == 1:
        axes = [axes]
    for name in sorted(lines):
        xs = sorted(lines[name])
        for ax, (_, _, value) in zip(axes, panels):
            ax.plot(xs, [median(lines[name][v], value) for v in xs], marker="o", label=name)
    ticks = sorted({int(float(r[x])) for r in rows})
    for ax, (ylabel, panel_title, _) in zip(axes, panels):
        if log_base:
            ax.set_xscale("log", base=log_base)
        ax.set_xticks(ticks, [label(t) for t in ticks])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(panel_title)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{title}\n{machine()} · commit {at or commit()} · {command}", fontsize=9)
    fig.tight_layout()
    fmt = os.path.splitext(out)[1].lstrip(".") or "svg"
    fig.savefig(out, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    print(f"plot.py: wrote {out}", file=sys.stderr)


def label(v):
    """1024 → 1Ki, 262144 → 256Ki, 10000 → 10000: axis ticks a reader takes in at a glance."""
    if v >= 1024 and v % 1024 == 0:
        return f"{v // 1024}Ki"
    return str(v)


def rate(p):
    return float(p["deliveries_per_s"])


def cpu(p):
    # The worker's CPU and Redis' share of the drain, per delivered row.
    return float(p["worker_cpu_us_per_delivery"]) + float(p["redis_cpu_us_per_row"])


RUN_SH = [
    ("deliveries/s", "throughput", rate),
    ("CPU µs per delivery (worker + Redis)", "cost", cpu),
]


def concurrency(rows, out, command, at):
    n = rows[0]["rows"] if rows else "?"
    curve(rows, out, x="concurrency", xlabel="concurrency (requests in flight)", panels=RUN_SH,
          title=f"{n} × 1 KiB bodies drained into nginx `return 200`, one Redis",
          command=command, at=at)


def body(rows, out, command, at):
    curve(rows, out, x="body_bytes", xlabel="body size (bytes)", panels=RUN_SH,
          title="hooks of one body size drained into nginx `return 200` at concurrency 100, one Redis",
          command=command, at=at)


def sinks(rows, out, command, at):
    curve(rows, out, x="sinks", xlabel="http sink entries per hook", panels=RUN_SH,
          title="1 KiB hooks with k sink entries each (k rows per hook), concurrency 100, one Redis",
          command=command, at=at)


def tenants(rows, out, command, at):
    curve(rows, out, x="tenants", xlabel="tenants (rows split evenly)", log_base=10, panels=[
        ("deliveries/s", "throughput", rate),
        ("Redis CPU µs per delivered row", "Redis cost", lambda p: float(p["redis_cpu_us_per_row"])),
    ], title="`ankusa bench`: a backlog split over k tenants, drained into its receiver",
        command=command, at=at)


def workers(rows, out, command, at):
    curve(rows, out, x="workers", xlabel="ankusa worker processes (6 partitions)", log_base=None,
          series=None, panels=[
              ("deliveries/s", "throughput", rate),
              ("Redis CPU µs per delivered row (3 masters)", "Redis cost",
               lambda p: float(p["redis_cpu_us_per_row"])),
          ], title="a 3-master Redis Cluster, 1 KiB bodies of 12 tenants into nginx `return 200`",
          command=command, at=at)


KINDS = {"concurrency": concurrency, "body": body, "sinks": sinks, "tenants": tenants,
         "workers": workers}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=sorted(KINDS))
    p.add_argument("csv")
    p.add_argument("out")
    p.add_argument("--command", default="", help="the command that made the CSV, shown on the plot")
    p.add_argument("--commit", default="", help="the commit the measured binary was built from (default: HEAD)")
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {a.csv} has no rows")
    KINDS[a.kind](rows, a.out, a.command, a.commit)


if __name__ == "__main__":
    main()

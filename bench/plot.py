#!/usr/bin/env python3
"""Draw a benchmark CSV as an SVG plot for BENCHMARKS.md.

    python3 bench/plot.py concurrency CSV OUT.svg [--command "…"] [--commit REV]

`concurrency`: a CSV of bench/peers/sweep.sh (run.sh's columns, one line per system and
concurrency): deliveries/s, and CPU per delivery (the worker's plus Redis' drain share),
against the concurrency, one line per system (the median where a point has several runs).

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


def concurrency(rows, out, command, at):
    plt = need_matplotlib()
    # system -> concurrency -> [rows]
    series = defaultdict(lambda: defaultdict(list))
    for r in rows:
        series[r["system"]][int(r["concurrency"])].append(r)

    def median(points, f):
        return statistics.median(f(p) for p in points)

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    for system in sorted(series):
        xs = sorted(series[system])
        rate = [median(series[system][x], lambda p: float(p["deliveries_per_s"])) for x in xs]
        cpu = [
            median(
                series[system][x],
                lambda p: float(p["worker_cpu_us_per_delivery"]) + float(p["redis_cpu_us_per_row"]),
            )
            for x in xs
        ]
        ax1.plot(xs, rate, marker="o", label=system)
        ax2.plot(xs, cpu, marker="o", label=system)
    ticks = sorted({int(r["concurrency"]) for r in rows})
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("concurrency (requests in flight)")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylim(bottom=0)
    ax1.set_ylabel("deliveries/s")
    ax1.set_title("throughput")
    ax2.set_ylabel("CPU µs per delivery (worker + Redis)")
    ax2.set_title("cost")
    ax1.legend(fontsize=8)
    n = rows[0]["rows"] if rows else "?"
    fig.suptitle(
        f"{n} × 1 KiB bodies drained into nginx `return 200`, one Redis\n"
        f"{machine()} · commit {at or commit()} · {command}",
        fontsize=9,
    )
    fig.tight_layout()
    fmt = os.path.splitext(out)[1].lstrip(".") or "svg"
    fig.savefig(out, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    print(f"plot.py: wrote {out}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["concurrency"])
    p.add_argument("csv")
    p.add_argument("out")
    p.add_argument("--command", default="", help="the command that made the CSV, shown on the plot")
    p.add_argument("--commit", default="", help="the commit the measured binary was built from (default: HEAD)")
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {a.csv} has no rows")
    concurrency(rows, a.out, a.command, a.commit)


if __name__ == "__main__":
    main()

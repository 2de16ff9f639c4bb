#!/usr/bin/python3
"""Draws the size sweeps of weft-perf (or weft-bench-fi-anchor) and the simulator's scale curve as PNG.

    tools/perf/plot.py --out bw.png --y bw_mib_s --title "RDMA write bandwidth" \
        "weft tcp=weft-perf.tcp.bw.json" "raw libfabric tcp=fi-anchor.tcp.bw.json"
    tools/perf/plot.py --out scale.png --scale sim-scale.txt

Each LABEL=FILE is a JSON document of weft-perf (--json) or JSON lines of weft-bench-fi-anchor; the
results of one operation (--op, default write) and test (bw when --y is a bandwidth, lat otherwise) are
drawn against the message size on a log scale. --scale reads the output of weft-bench-sim-scale and draws
ns per request against the number of queue pairs. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def results(path):
    """Every result object in a weft-perf JSON document or a file of JSON lines."""
    text = open(path).read()
    try:
        doc = json.loads(text)
        return doc.get("results", []) if isinstance(doc, dict) else doc
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def sweep(args):
    test = "bw" if args.y.startswith("bw") or args.y.startswith("msg_rate") else "lat"
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for spec in args.series:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"plot.py: '{spec}' is not LABEL=FILE")
        points = sorted((r["size"], r[args.y]) for r in results(path)
                        if r.get("op") == args.op and r.get("test") == test and args.y in r)
        if not points:
            sys.exit(f"plot.py: {path} has no {args.op} {test} result with {args.y}")
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel({"bw_mib_s": "MiB/s", "t_typical_us": "one-way latency, median (µs)"}.get(args.y, args.y))
    ax.set_title(args.title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)


def scale(args):
    pattern = re.compile(r"sim_scale: (\d+) QPs, (\d+) in flight: ([\d.]+) ns per request")
    rows = [tuple(map(float, m.groups())) for m in map(pattern.search, open(args.scale)) if m]
    if not rows:
        sys.exit(f"plot.py: no 'sim_scale: N QPs, M in flight: X ns per request' line in {args.scale}")
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    by_qps = sorted((q, ns) for q, inflight, ns in rows if inflight < 1_000_000)
    ax.plot([r[0] for r in by_qps], [r[1] for r in by_qps], marker="o", label="8-byte writes, 8 in flight per QP")
    for q, inflight, ns in rows:
        if inflight >= 1_000_000:
            ax.plot([q], [ns], marker="s", linestyle="", label=f"{int(q)} QPs, {int(inflight):,} in flight")
    first = by_qps[0][1]
    ax.axhline(1.5 * first, color="grey", linestyle="--", label="target: 1.5 x the 2-QP cost")
    ax.set_xscale("log")
    ax.set_ylim(bottom=0)
    ax.set_xlabel("queue pairs in the fabric")
    ax.set_ylabel("wall-clock ns per request")
    ax.set_title(args.title or "Simulator: cost per request as the fabric grows")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="PNG file to write")
    p.add_argument("--title", default="")
    p.add_argument("--y", default="bw_mib_s", help="result field: bw_mib_s, t_typical_us, msg_rate_mpps ...")
    p.add_argument("--op", default="write")
    p.add_argument("--scale", help="output of weft-bench-sim-scale")
    p.add_argument("series", nargs="*", help="LABEL=FILE")
    args = p.parse_args()
    if args.scale:
        scale(args)
    else:
        sweep(args)


if __name__ == "__main__":
    main()

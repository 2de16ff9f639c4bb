#!/usr/bin/env python3
"""trace2svg — draws a weft simulator trace (Chrome/Perfetto JSON, from `sim:trace=PATH` or
weft::sim::Fabric::trace_json) as an SVG timeline: one lane per QP, bars for request and response
transmissions, ticks for packet placements, dots for completions.

    tools/trace/trace2svg.py trace.json out.svg [--until MICROSECONDS]
"""
import json
import sys
from html import escape

COLORS = {"request": "#4878b0", "response": "#a0a0a0", "placement": "#3a9a4a", "completion": "#c83c3c",
          "reorder": "#e08a1e", "fault": "#e08a1e"}


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    until = float(argv[argv.index("--until") + 1]) if "--until" in argv else None
    events = json.load(open(argv[1]))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    events = [e for e in events if e.get("ph") in ("X", "i") and (until is None or e["ts"] <= until)]
    lanes = sorted({(e["pid"], e["tid"]) for e in events})
    end = max(e["ts"] + e.get("dur", 0) for e in events)
    left, top, lane_h, width = 170, 40, 46, 1100
    scale = (width - left - 20) / end
    x = lambda t: left + t * scale
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + lane_h * len(lanes) + 50}" '
           'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="20" font-size="13">weft simulator trace: {len(events)} records, '
           f'{end:.2f} us of virtual time</text>']
    for i, (pid, tid) in enumerate(lanes):
        y = top + i * lane_h
        out.append(f'<line x1="{left}" y1="{y + lane_h - 4}" x2="{width - 20}" y2="{y + lane_h - 4}" stroke="#ddd"/>')
        out.append(f'<text x="8" y="{y + 24}">{escape(names.get(pid, f"node {pid}"))} / QP {tid}</text>')
    step = 10 ** max(0, len(str(int(end))) - 1) / 2 or 0.5
    t = 0.0
    while t <= end:
        out.append(f'<line x1="{x(t):.1f}" y1="{top - 6}" x2="{x(t):.1f}" y2="{top + lane_h * len(lanes)}" '
                   'stroke="#f0f0f0"/>')
        out.append(f'<text x="{x(t):.1f}" y="{top + lane_h * len(lanes) + 16}" text-anchor="middle">{t:g} us</text>')
        t += step
    for e in events:
        y = top + lanes.index((e["pid"], e["tid"])) * lane_h
        color = COLORS.get(e.get("cat"), "#666")
        title = escape(f'{e["name"]} at {e["ts"]:.3f} us')
        if e["ph"] == "X":
            row = 6 if e.get("cat") == "request" else 22
            out.append(f'<rect x="{x(e["ts"]):.1f}" y="{y + row}" width="{max(1.0, e["dur"] * scale):.1f}" height="12" '
                       f'fill="{color}" opacity="0.8"><title>{title}</title></rect>')
        elif e.get("cat") == "placement":
            out.append(f'<line x1="{x(e["ts"]):.1f}" y1="{y + 4}" x2="{x(e["ts"]):.1f}" y2="{y + 38}" stroke="{color}">'
                       f'<title>{title}</title></line>')
        else:
            out.append(f'<circle cx="{x(e["ts"]):.1f}" cy="{y + 36}" r="4" fill="{color}"><title>{title}</title></circle>')
    legend = top + lane_h * len(lanes) + 34
    for i, (label, key) in enumerate([("request on the wire", "request"), ("ACK / read response", "response"),
                                      ("packet placed", "placement"), ("completion", "completion")]):
        out.append(f'<rect x="{left + i * 200}" y="{legend - 9}" width="12" height="10" fill="{COLORS[key]}"/>'
                   f'<text x="{left + i * 200 + 18}" y="{legend}">{label}</text>')
    out.append("</svg>")
    open(argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)

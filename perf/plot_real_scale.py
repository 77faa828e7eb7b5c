#!/usr/bin/env python3
"""Draws docs/real-scale-rss.svg from a perf/real_scale.py result: steady RSS against namespaces (with their nodes,
no Jobs) and against owner Jobs (with every namespace and node), at 10 %, 50 % and 100 % of the load. Standard
library only (the SVG is written by hand, so no plotting package is needed).

    python3 perf/plot_real_scale.py perf/results/real-scale-<time>.json [--before other.json] [--out docs/real-scale-rss.svg]
"""
from __future__ import annotations

import argparse
import json
import pathlib

WIDTH, HEIGHT, MARGIN = 360, 240, 48
TARGET_MIB = 64


def panel(x0: int, title: str, label: str, series: list[tuple[str, str, list[tuple[float, float]]]], top: float) -> str:
    """One chart: each series a (name, colour, [(x, MiB)]) polyline with dots and values, the 64 MiB target dashed."""
    right = max((x for _, _, points in series for x, _ in points), default=1) or 1
    px = lambda x: x0 + MARGIN + (WIDTH - MARGIN - 16) * x / right  # noqa: E731
    py = lambda y: 24 + (HEIGHT - 24 - MARGIN) * (1 - y / top)  # noqa: E731
    out = [f'<text x="{x0 + WIDTH / 2}" y="16" text-anchor="middle" font-weight="bold">{title}</text>',
           f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(right)}" y2="{py(0)}" stroke="black"/>',
           f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(0)}" y2="{py(top)}" stroke="black"/>',
           f'<text x="{x0 + WIDTH / 2}" y="{HEIGHT - 8}" text-anchor="middle">{label}</text>',
           f'<line x1="{px(0)}" y1="{py(TARGET_MIB)}" x2="{px(right)}" y2="{py(TARGET_MIB)}" stroke="red" '
           f'stroke-dasharray="4 3"/>',
           f'<text x="{px(right)}" y="{py(TARGET_MIB) - 4}" text-anchor="end" fill="red">target {TARGET_MIB} MiB</text>']
    for tick in range(0, int(top) + 1, 20):
        out.append(f'<text x="{px(0) - 4}" y="{py(tick) + 4}" text-anchor="end">{tick}</text>')
    for tick in (right / 2, right):
        out.append(f'<text x="{px(tick)}" y="{py(0) + 14}" text-anchor="middle">{tick:,.0f}</text>')
    for index, (name, colour, points) in enumerate(series):
        if not points:
            continue
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
            out.append(f'<text x="{px(x) - 4:.1f}" y="{py(y) - 6:.1f}" text-anchor="end" fill="{colour}">{y:.0f}</text>')
        out.append(f'<text x="{px(0) + 8}" y="{py(top) + 12 + 14 * index}" fill="{colour}">{name}</text>')
    return "\n".join(out)


def points(result: dict, key: str, x: str) -> list[tuple[float, float]]:
    return [(point[x], point["rss_mib"]) for point in result.get(key, [])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=pathlib.Path)
    parser.add_argument("--before", type=pathlib.Path, help="an earlier result to draw beside it")
    parser.add_argument("--out", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent / "docs/real-scale-rss.svg")
    args = parser.parse_args()
    after = json.loads(args.result.read_text())
    before = json.loads(args.before.read_text()) if args.before else {}
    runs = [("before", "#999999", before), ("after", "#1f77b4", after)] if before else [("steady RSS", "#1f77b4", after)]
    top = max([TARGET_MIB + 16] + [p["rss_mib"] + 10 for _, _, run in runs
                                    for p in run.get("namespace_steps", []) + run.get("owner_steps", [])])
    top = 20 * -(-top // 20)
    left = panel(0, "RSS (MiB) against namespaces", "namespaces (+ nodes at 1:5), no Jobs",
                 [(name, colour, points(run, "namespace_steps", "namespaces")) for name, colour, run in runs], top)
    right = panel(WIDTH + 20, "RSS (MiB) against owners", "suspended Jobs (all namespaces and nodes)",
                  [(name, colour, points(run, "owner_steps", "jobs")) for name, colour, run in runs], top)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * WIDTH + 20}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n'
           f"{left}\n{right}\n</svg>\n")
    args.out.write_text(svg)
    print(f"wrote {args.out} ({len(svg)} bytes)")


if __name__ == "__main__":
    main()

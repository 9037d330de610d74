"""Small inline-SVG charts, so the report opens from the file system with no network.

Three shapes cover the showdown: bars (one value per strategy), grouped bars (p50/p95/p99
per strategy) and lines (throughput over time). A bar without a figure (None) is an
"n/a" at its foot.
"""

from __future__ import annotations

import math
from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#1b9e77", "#7570b3", "#d95f02"]
W, H, LEFT, BOTTOM, TOP = 720, 300, 60, 80, 30


def _frame(title: str, top: float, unit: str, height: int = H) -> list[str]:
    plot_h = H - TOP - BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" '
             f'viewBox="0 0 {W} {height}" role="img" aria-label="{escape(title)}">',
             f'<text x="{W / 2}" y="18" text-anchor="middle" font-weight="bold">'
             f'{escape(title)}</text>']
    for i in range(TICKS + 1):
        value = top * i / TICKS
        y = TOP + plot_h - plot_h * i / TICKS
        parts.append(f'<line x1="{LEFT}" x2="{W - 10}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#ddd"/><text x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="11">{_tick(value)}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_h / 2}" font-size="11" '
                 f'transform="rotate(-90 12 {TOP + plot_h / 2})" text-anchor="middle">'
                 f'{escape(unit)}</text>')
    return parts


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _figure(value: float) -> str:
    """A bar's value in its hover title: whole, with thousands separators, from 1,000
    (``.4g`` printed 10,000 ms as "1e+04": a demo audit), else four figures."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


#: gridlines above zero; the top is TICKS round steps (5,280 / 3,960 / ... were max x 1.1)
TICKS = 4
NICE_STEPS = (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def nice_step(at_least: float) -> float:
    """The smallest round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten)
    that is at least ``at_least``."""
    if at_least <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(at_least))
    return next(step * power for step in NICE_STEPS if step * power >= at_least * (1 - 1e-9))


def _top(values: list[float]) -> float:
    """The axis top: TICKS round steps, at or above the largest value."""
    largest = max([v for v in values if v is not None] + [0.0])
    return TICKS * nice_step(largest / TICKS) if largest > 0 else 1.0


def _label(text: str, most: int = 36) -> str:
    """A bar's label, cut short past ``most`` characters (the whole one is its title)."""
    return text if len(text) <= most else text[:most - 1] + "…"


def bars(title: str, labels: list[str], series: dict[str, list[float | None]],
         unit: str = "", colors: list[str] | None = None, top: float | None = None) -> str:
    """One group per label, one bar per series; ``colors`` colours single-series bars;
    ``top``: a fixed axis top (a share's is 1: fitted to the bars, fairness 0.6 and 0.9
    filled the chart alike)."""
    top = top or _top([v for values in series.values() for v in values if v is not None])
    # the labels slant down from under their bars: a long one ran out of the picture
    below = 14 + max([len(_label(label)) for label in labels] + [0]) * 6.2 * 0.574 + 6
    parts = _frame(title, top, unit, height=H + max(math.ceil(below - BOTTOM), 0))
    plot_w, plot_h = W - LEFT - 10, H - TOP - BOTTOM
    group_w = plot_w / max(len(labels), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    for s, (name, values) in enumerate(series.items()):
        for i, value in enumerate(values):
            x = LEFT + i * group_w + group_w * 0.1 + s * bar_w
            if value is None:  # no figure (a strategy without a fairness): say so, as
                # the table does, where a bare gap read as a zero (a report audit)
                parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{TOP + plot_h - 4:.1f}" '
                             f'font-size="10" fill="#777" text-anchor="middle">n/a'
                             f'<title>{escape(labels[i])} {escape(name)}: no figure'
                             f'</title></text>')
                continue
            h = plot_h * value / top
            fill = colors[i] if colors and len(series) == 1 else PALETTE[s % len(PALETTE)]
            parts.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}" fill="{fill}"><title>{escape(labels[i])} '
                         f'{escape(name)}: {_figure(value)}</title></rect>')
    for i, label in enumerate(labels):
        x = LEFT + i * group_w + group_w / 2
        parts.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" font-size="11" '
                     f'text-anchor="end" transform="rotate(-35 {x:.1f} {H - BOTTOM + 14})">'
                     f'<title>{escape(label)}</title>{escape(_label(label))}</text>')
    if len(series) > 1:
        parts += _legend(list(series))
    return "\n".join(parts + ["</svg>"])


def lines(title: str, series: dict[str, list[tuple[float, float]]], unit: str = "",
          x_unit: str = "s") -> str:
    """One polyline per series of (x, y) points."""
    top = _top([y for points in series.values() for _, y in points])
    right = TICKS * nice_step(max([x for points in series.values() for x, _ in points]
                                  + [1.0]) / TICKS)
    legend, legend_h = _legend_rows(list(series))
    parts = _frame(title, top, unit, height=H + legend_h)
    plot_w, plot_h = W - LEFT - 10, H - TOP - BOTTOM
    for s, (name, points) in enumerate(series.items()):
        if not points:
            continue
        xy = [(LEFT + plot_w * x / right, TOP + plot_h - plot_h * y / top) for x, y in points]
        color = PALETTE[s % len(PALETTE)]
        if len(xy) == 1:  # a one-point polyline draws nothing: a phase of one second
            # of history was in the legend and nowhere on the chart (a showdown audit)
            (cx, cy), = xy
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{color}">'
                         f'<title>{escape(name)}</title></circle>')
            continue
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
        parts.append(f'<polyline fill="none" stroke="{color}" '
                     f'stroke-width="2" points="{coords}"><title>{escape(name)}</title>'
                     f'</polyline>')
    for i in range(TICKS + 1):  # the x axis: its round steps (only the last was named)
        x = LEFT + plot_w * i / TICKS
        # the last tick is 10 px from the edge: its label, centred there, was cut off
        # ("3.2 s" showed as "3.2 :"), so it ends at its tick instead
        anchor = "end" if i == TICKS else "middle"
        parts.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 16}" text-anchor="{anchor}" '
                     f'font-size="11">{_tick(right * i / TICKS)}'
                     f'{" " + escape(x_unit) if i == TICKS else ""}</text>')
    return "\n".join(parts + legend + ["</svg>"])


def _legend_rows(names: list[str]) -> tuple[list[str], int]:
    """The lines' legend below the plot, in columns as wide as its longest name (names
    110 px apart overlapped), and how much taller than H the chart must be to hold it."""
    width = min(max([len(name) for name in names] + [1]) * 6.5 + 24, W - LEFT - 10)
    per_row = max(int((W - LEFT - 10) // width), 1)
    parts = []
    for i, name in enumerate(names):
        x, y = LEFT + (i % per_row) * width, H - 40 + (i // per_row) * 14
        parts.append(f'<rect x="{x:.0f}" y="{y - 9}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/><text x="{x + 14:.0f}" y="{y}" '
                     f'font-size="11">{escape(name)}</text>')
    rows = -(-len(names) // per_row)
    return parts, max(rows - 3, 0) * 14  # three rows fit in H


def _legend(names: list[str]) -> list[str]:
    """In the top-right corner for bars (their labels sit below)."""
    parts = []
    for i, name in enumerate(names):
        x, y = W - 10 - (len(names) - i) * 70, TOP + 4
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/><text x="{x + 14}" y="{y}" '
                     f'font-size="11">{escape(name)}</text>')
    return parts

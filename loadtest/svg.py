"""Small inline-SVG charts, so the report opens from the file system with no network.

Three shapes cover the showdown: bars (one value per strategy), grouped bars (p50/p95/p99
per strategy) and lines (throughput over time). Values of None are drawn as gaps.
"""

from __future__ import annotations

from html import escape

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#1b9e77", "#7570b3", "#d95f02"]
W, H, LEFT, BOTTOM, TOP = 720, 300, 60, 80, 30


def _frame(title: str, top: float, unit: str) -> list[str]:
    plot_h = H - TOP - BOTTOM
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
             f'<text x="{W / 2}" y="18" text-anchor="middle" font-weight="bold">'
             f'{escape(title)}</text>']
    for i in range(5):
        value = top * i / 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line x1="{LEFT}" x2="{W - 10}" y1="{y:.1f}" y2="{y:.1f}" '
                     f'stroke="#ddd"/><text x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end" font-size="11">{_tick(value)}</text>')
    parts.append(f'<text x="12" y="{TOP + plot_h / 2}" font-size="11" '
                 f'transform="rotate(-90 12 {TOP + plot_h / 2})" text-anchor="middle">'
                 f'{escape(unit)}</text>')
    return parts


def _tick(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _top(values: list[float]) -> float:
    return max([v for v in values if v is not None] + [0.0]) * 1.1 or 1.0


def bars(title: str, labels: list[str], series: dict[str, list[float | None]],
         unit: str = "", colors: list[str] | None = None) -> str:
    """One group per label, one bar per series; ``colors`` colours single-series bars."""
    top = _top([v for values in series.values() for v in values if v is not None])
    parts = _frame(title, top, unit)
    plot_w, plot_h = W - LEFT - 10, H - TOP - BOTTOM
    group_w = plot_w / max(len(labels), 1)
    bar_w = group_w * 0.8 / max(len(series), 1)
    for s, (name, values) in enumerate(series.items()):
        for i, value in enumerate(values):
            if value is None:
                continue
            h = plot_h * value / top
            x = LEFT + i * group_w + group_w * 0.1 + s * bar_w
            fill = colors[i] if colors and len(series) == 1 else PALETTE[s % len(PALETTE)]
            parts.append(f'<rect x="{x:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}" fill="{fill}"><title>{escape(labels[i])} '
                         f'{escape(name)}: {value:.4g}</title></rect>')
    for i, label in enumerate(labels):
        x = LEFT + i * group_w + group_w / 2
        parts.append(f'<text x="{x:.1f}" y="{H - BOTTOM + 14}" font-size="11" '
                     f'text-anchor="end" transform="rotate(-35 {x:.1f} {H - BOTTOM + 14})">'
                     f'{escape(label)}</text>')
    if len(series) > 1:
        parts += _legend(list(series), corner=True)
    return "\n".join(parts + ["</svg>"])


def lines(title: str, series: dict[str, list[tuple[float, float]]], unit: str = "",
          x_unit: str = "s") -> str:
    """One polyline per series of (x, y) points."""
    top = _top([y for points in series.values() for _, y in points])
    right = max([x for points in series.values() for x, _ in points] + [1.0])
    parts = _frame(title, top, unit)
    plot_w, plot_h = W - LEFT - 10, H - TOP - BOTTOM
    for s, (name, points) in enumerate(series.items()):
        if not points:
            continue
        coords = " ".join(f"{LEFT + plot_w * x / right:.1f},{TOP + plot_h - plot_h * y / top:.1f}"
                          for x, y in points)
        parts.append(f'<polyline fill="none" stroke="{PALETTE[s % len(PALETTE)]}" '
                     f'stroke-width="2" points="{coords}"><title>{escape(name)}</title>'
                     f'</polyline>')
    parts.append(f'<text x="{W - 10}" y="{H - BOTTOM + 16}" text-anchor="end" '
                 f'font-size="11">{right:.0f} {escape(x_unit)}</text>')
    return "\n".join(parts + _legend(list(series)) + ["</svg>"])


def _legend(names: list[str], corner: bool = False) -> list[str]:
    """Below the plot for lines; in the top-right corner for bars (labels sit below)."""
    parts = []
    for i, name in enumerate(names):
        if corner:
            x, y = W - 10 - (len(names) - i) * 70, TOP + 4
        else:
            x, y = LEFT + (i % 6) * 110, H - 40 + (i // 6) * 14
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                     f'fill="{PALETTE[i % len(PALETTE)]}"/><text x="{x + 14}" y="{y}" '
                     f'font-size="11">{escape(name)}</text>')
    return parts

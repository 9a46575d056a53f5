"""Charts drawn on the server as SVG: no script, no library, the page works offline.

`step_chart` draws counts over time (jobs by state), `bar_chart` values by name (running
jobs per site, throughput per resource). Labels pass through `_html.esc`; every chart has
a `<title>` and `aria-label` for screen readers, and its numbers in `data-*` attributes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from htgrid.web._html import Html, el, join

__all__ = ["COLORS", "bar_chart", "step_chart"]

#: The colour of each job state, also used by the stylesheet's badges.
COLORS: Mapping[str, str] = {
    "Idle": "#c8a000",
    "Running": "#2e7d32",
    "Held": "#c62828",
    "Completed": "#1565c0",
    "Removed": "#6d6d6d",
    "Transferring Output": "#6a1b9a",
    "Suspended": "#ef6c00",
}
_OTHER = ("#00838f", "#8e24aa", "#5d4037", "#3949ab", "#7cb342", "#d81b60")

_W, _H = 640, 220  # the drawing's size in SVG units
_LEFT, _RIGHT, _TOP, _BOTTOM = 44, 130, 14, 26


def _color(name: str, index: int) -> str:
    return COLORS.get(name, _OTHER[index % len(_OTHER)])


def _nice_max(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at or above `value` (at least 1)."""
    if value <= 1:
        return 1.0
    scale = 1.0
    while True:
        for step in (1, 2, 5):
            if step * scale >= value:
                return step * scale
        scale *= 10


def _clock(t: float, span: float) -> str:
    fmt = "%H:%M" if span <= 2 * 86400 else "%m-%d %H:%M"
    return time.strftime(fmt, time.localtime(t))


def step_chart(
    key: str,
    title: str,
    series: Mapping[str, Sequence[tuple[float, int]]],
    start: float,
    end: float,
) -> Html:
    """Counts over [start, end]: for each name, its (time, count) steps in time order
    (the count holds until the next step)."""
    span = max(end - start, 1.0)
    top = _nice_max(max((n for points in series.values() for _, n in points), default=0))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + plot_w * (min(max(t, start), end) - start) / span

    def y(n: float) -> float:
        return _TOP + plot_h * (1 - n / top)

    parts: list[Html] = [el("title", None, title)]
    for frac in (0.0, 0.5, 1.0):
        gy = y(top * frac)
        parts.append(
            el("line", {"x1": _LEFT, "x2": _LEFT + plot_w, "y1": gy, "y2": gy, "class": "grid"})
        )
        parts.append(
            el("text", {"x": _LEFT - 6, "y": gy + 4, "text-anchor": "end"}, f"{top * frac:g}")
        )
    for frac in (0.0, 0.5, 1.0):
        t = start + span * frac
        anchor = "start" if frac == 0 else "end" if frac == 1 else "middle"
        parts.append(el("text", {"x": x(t), "y": _H - 8, "text-anchor": anchor}, _clock(t, span)))
    for index, (name, points) in enumerate(series.items()):
        color = _color(name, index)
        coords: list[str] = []
        last = 0
        for t, n in points:
            if coords:
                coords.append(f"{x(t):.1f},{y(last):.1f}")
            else:
                coords.append(f"{x(start):.1f},{y(0):.1f}")
                coords.append(f"{x(t):.1f},{y(0):.1f}")
            coords.append(f"{x(t):.1f},{y(n):.1f}")
            last = n
        coords.append(f"{x(end):.1f},{y(last):.1f}")
        if not points:
            coords = [f"{x(start):.1f},{y(0):.1f}", f"{x(end):.1f},{y(0):.1f}"]
        parts.append(
            el(
                "polyline",
                {
                    "points": " ".join(coords),
                    "stroke": color,
                    "fill": "none",
                    "stroke-width": 2,
                    "data-series": name,
                    "data-last": last,
                },
                el("title", None, f"{name}: {last} now"),
            )
        )
        ly = _TOP + 16 * index + 8
        parts.append(
            el(
                "rect",
                {"x": _W - _RIGHT + 12, "y": ly - 8, "width": 10, "height": 10, "fill": color},
            )
        )
        parts.append(el("text", {"x": _W - _RIGHT + 26, "y": ly + 1}, f"{name} ({last})"))
    return el(
        "svg",
        {
            "class": "chart",
            "viewBox": f"0 0 {_W} {_H}",
            "role": "img",
            "aria-label": title,
            "data-chart": key,
            "xmlns": "http://www.w3.org/2000/svg",
        },
        join(parts),
    )


def bar_chart(key: str, title: str, bars: Sequence[tuple[str, float]], unit: str = "") -> Html:
    """Horizontal bars, one per (label, value), largest first as given."""
    if not bars:
        return el("p", {"class": "empty", "data-chart": key}, f"{title}: nothing to show yet.")
    row = 22
    height = _TOP + row * len(bars) + 8
    label_w = 190
    plot_w = _W - label_w - 70
    top = max(value for _, value in bars) or 1.0
    parts: list[Html] = [el("title", None, title)]
    for index, (label, value) in enumerate(bars):
        by = _TOP + row * index
        width = plot_w * value / top
        shown = label if len(label) <= 30 else label[:29] + "…"
        parts.append(
            el(
                "text",
                {"x": label_w - 6, "y": by + 14, "text-anchor": "end"},
                el("title", None, label),
                shown,
            )
        )
        parts.append(
            el(
                "rect",
                {
                    "x": label_w,
                    "y": by + 2,
                    "width": f"{width:.1f}",
                    "height": row - 6,
                    "fill": _OTHER[index % len(_OTHER)],
                    "data-label": label,
                    "data-value": f"{value:g}",
                },
                el("title", None, f"{label}: {value:g}{unit}"),
            )
        )
        parts.append(el("text", {"x": label_w + width + 6, "y": by + 14}, f"{value:g}{unit}"))
    return el(
        "svg",
        {
            "class": "chart bars",
            "viewBox": f"0 0 {_W} {height}",
            "role": "img",
            "aria-label": title,
            "data-chart": key,
            "xmlns": "http://www.w3.org/2000/svg",
        },
        join(parts),
    )

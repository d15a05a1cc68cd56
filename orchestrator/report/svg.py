"""Small SVG charts, written by hand: no plotting library, no JavaScript, no network.

Why: the report must be one self-contained file that opens anywhere, years later, offline.
Inline SVG is text in the HTML (searchable, diff-able, sharp at any zoom, printable), needs no
runtime and no dependency (matplotlib is not installed on lab hosts, and a JS chart library would
have to be inlined, ~100s of kB, and executed). The charts orch needs are few and simple: lines
on log axes, dot strips, a timeline with markers.

Every chart is `<svg class="plot" data-kind=...>`; each data series is `<g class="series">` holding
a `<path class="line">` and/or `<circle class="point">` with a `<title>` tooltip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Literal

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)
Fmt = Callable[[float], str]


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    lines: bool = True
    dashed: bool = False
    shape: Literal["circle", "cross"] = "circle"


@dataclass
class Band:
    """A shaded area between a low and a high value at each x (e.g. p50 to p99)."""

    name: str
    points: list[tuple[float, float, float]]


@dataclass
class Marker:
    """A vertical line at x with a label (a fault injection, a milestone)."""

    x: float
    label: str
    colour: str = "#444"


@dataclass
class Span:
    """A shaded stretch of the x axis from x0 to x1 (an outage), drawn behind the data."""

    x0: float
    x1: float
    label: str
    css: Literal["outage", "span"] = "span"
    colour: str = "#d62728"


@dataclass
class _Axis:
    lo: float
    hi: float
    log: bool
    ticks: list[float] = field(default_factory=list)

    def norm(self, v: float) -> float:
        if self.log:
            v, lo, hi = math.log(max(v, 1e-300)), math.log(self.lo), math.log(self.hi)
        else:
            lo, hi = self.lo, self.hi
        return 0.5 if hi == lo else (v - lo) / (hi - lo)


def _g(v: float) -> str:
    return f"{v:.4g}"


def _nice_linear(lo: float, hi: float, n: int = 5) -> tuple[float, float, list[float]]:
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    start = math.floor(lo / step) * step
    end = math.ceil(hi / step) * step
    ticks, t = [], start
    while t <= end + step / 1e6:
        ticks.append(round(t, 12))
        t += step
    return start, end, ticks


def _log_axis(lo: float, hi: float, base: int) -> _Axis:
    lo_e = math.floor(math.log(lo, base) + 1e-9)
    hi_e = math.ceil(math.log(hi, base) - 1e-9)
    if hi_e <= lo_e:
        hi_e = lo_e + 1
    exps = list(range(lo_e, hi_e + 1))
    stride = max(1, math.ceil(len(exps) / 8))
    return _Axis(float(base) ** lo_e, float(base) ** hi_e, True, [float(base) ** e for e in exps[::stride]])


def _axis(values: Sequence[float], log: bool, base: int, zero: bool) -> _Axis:
    if log:
        pos = [v for v in values if v > 0]
        if not pos:
            return _Axis(1.0, 10.0, True, [1.0, 10.0])
        return _log_axis(min(pos), max(pos), base)
    if not values:
        return _Axis(0.0, 1.0, False, [0.0, 1.0])
    lo, hi = min(values), max(values)
    if zero:
        lo = min(lo, 0.0)
    lo, hi, ticks = _nice_linear(lo, hi)
    return _Axis(lo, hi, False, ticks)


def line_chart(
    series: list[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    x_base: int = 10,
    x_fmt: Fmt = _g,
    y_fmt: Fmt = _g,
    markers: Sequence[Marker] = (),
    width: int = 560,
    height: int = 300,
    kind: str = "line",
    bands: Sequence[Band] = (),
    spans: Sequence[Span] = (),
) -> str:
    """An SVG chart of series (lines and/or points), with axes, ticks, a legend and markers; each
    band is shaded in the colour of the series of the same index, each span across the plot's
    height."""
    ml, mr, mt, mb = 64, 16, 28, 44
    legend_h = 16 * ((len(series) + 2) // 3)
    pw, ph = width - ml - mr, height - mt - mb
    total_h = height + legend_h
    xs = [x for s in series for x, _ in s.points] + [m.x for m in markers]
    xs += [x for sp in spans for x in (sp.x0, sp.x1)]
    ys = [y for s in series for _, y in s.points]
    ys += [v for b in bands for _, lo, hi in b.points for v in (lo, hi)]
    xa = _axis(xs, x_log, x_base, zero=False)
    ya = _axis(ys, y_log, 10, zero=True)

    def px(x: float) -> float:
        return ml + xa.norm(x) * pw

    def py(y: float) -> float:
        return mt + (1 - ya.norm(y)) * ph

    out = [
        f'<svg class="plot" data-kind="{escape(kind)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {total_h}" width="{width}" height="{total_h}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text class="title" x="{width / 2}" y="16" text-anchor="middle">{escape(title)}</text>',
        f'<rect class="frame" x="{ml}" y="{mt}" width="{pw}" height="{ph}"/>',
    ]
    for t in xa.ticks:
        x = px(t)
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}"/>')
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{mt + ph + 14}" text-anchor="middle">'
            f"{escape(x_fmt(t))}</text>"
        )
    for t in ya.ticks:
        y = py(t)
        out.append(f'<line class="grid" x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}"/>')
        out.append(
            f'<text class="tick" x="{ml - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(y_fmt(t))}</text>'
        )
    out.append(
        f'<text class="label" x="{ml + pw / 2}" y="{mt + ph + 32}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    out.append(
        f'<text class="label" transform="translate(14 {mt + ph / 2}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for sp in spans:
        x0, x1 = sorted((px(sp.x0), px(sp.x1)))
        out.append(
            f'<rect class="{sp.css}" data-name="{escape(sp.label)}" x="{x0:.1f}" y="{mt}" '
            f'width="{max(x1 - x0, 1.0):.1f}" height="{ph}" fill="{escape(sp.colour)}" fill-opacity="0.12">'
            f"<title>{escape(sp.label)}</title></rect>"
        )
    for j, m in enumerate(markers):
        x = px(m.x)
        out.append(
            f'<g class="marker"><line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" '
            f'stroke="{m.colour}" stroke-dasharray="4 3"/><text class="tick" x="{x + 3:.1f}" '
            f'y="{mt + 10 + 12 * (j % 2)}" fill="{m.colour}">{escape(m.label)}</text></g>'
        )
    for i, b in enumerate(bands):
        bp = [(x, lo, hi) for x, lo, hi in sorted(b.points) if (not x_log or x > 0) and (not y_log or lo > 0)]
        if len(bp) > 1:
            edge = [(px(x), py(hi)) for x, _, hi in bp] + [(px(x), py(lo)) for x, lo, _ in reversed(bp)]
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in edge)
            out.append(
                f'<polygon class="band" data-name="{escape(b.name)}" points="{d}" '
                f'fill="{PALETTE[i % len(PALETTE)]}" fill-opacity="0.15">'
                f"<title>{escape(b.name)}</title></polygon>"
            )
    for i, s in enumerate(series):
        colour = PALETTE[i % len(PALETTE)]
        pts = [(x, y) for x, y in s.points if (not x_log or x > 0) and (not y_log or y > 0)]
        out.append(f'<g class="series" data-name="{escape(s.name)}">')
        if s.lines and len(pts) > 1:
            d = " ".join(f"{'M' if j == 0 else 'L'}{px(x):.1f},{py(y):.1f}" for j, (x, y) in enumerate(pts))
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            out.append(f'<path class="line" d="{d}" stroke="{colour}"{dash}/>')
        for x, y in pts:
            tip = f"<title>{escape(s.name)}: {escape(x_fmt(x))}, {escape(y_fmt(y))}</title>"
            if s.shape == "cross":
                cx, cy = px(x), py(y)
                out.append(
                    f'<path class="point cross" d="M{cx - 3:.1f},{cy - 3:.1f}L{cx + 3:.1f},{cy + 3:.1f}'
                    f'M{cx - 3:.1f},{cy + 3:.1f}L{cx + 3:.1f},{cy - 3:.1f}" stroke="{colour}" '
                    f'stroke-width="1.5" fill="none">{tip}</path>'
                )
            else:
                out.append(
                    f'<circle class="point" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{colour}">'
                    f"{tip}</circle>"
                )
        out.append("</g>")
    for i, s in enumerate(series):
        lx, ly = ml + (i % 3) * (pw / 3), height + 16 * (i // 3)
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<g class="legend"><rect x="{lx:.1f}" y="{ly - 8}" width="10" height="10" '
            f'fill="{colour}"/><text x="{lx + 14:.1f}" y="{ly + 1}">{escape(s.name)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def strip_chart(
    groups: dict[str, list[float]], *, title: str, x_label: str, width: int = 560, kind: str = "strip"
) -> str:
    """One row per group, one dot per value, with the median marked: a distribution over repeats."""
    ml, mr, mt, mb, row = 150, 16, 28, 40, 26
    pw = width - ml - mr
    height = mt + mb + row * max(1, len(groups))
    xa = _axis([v for vs in groups.values() for v in vs], False, 10, zero=True)
    out = [
        f'<svg class="plot" data-kind="{escape(kind)}" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text class="title" x="{width / 2}" y="16" text-anchor="middle">{escape(title)}</text>',
        f'<rect class="frame" x="{ml}" y="{mt}" width="{pw}" height="{row * max(1, len(groups))}"/>',
    ]
    for t in xa.ticks:
        x = ml + xa.norm(t) * pw
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{height - mb}"/>')
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{height - mb + 14}" text-anchor="middle">{_g(t)}</text>'
        )
    out.append(
        f'<text class="label" x="{ml + pw / 2}" y="{height - 8}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
    )
    for i, (name, values) in enumerate(groups.items()):
        y = mt + row * i + row / 2
        colour = PALETTE[i % len(PALETTE)]
        out.append(
            f'<g class="series" data-name="{escape(name)}"><text class="tick" x="{ml - 6}" '
            f'y="{y + 4:.1f}" text-anchor="end">{escape(name)} (n={len(values)})</text>'
        )
        for v in values:
            out.append(
                f'<circle class="point" cx="{ml + xa.norm(v) * pw:.1f}" cy="{y:.1f}" r="3.5" '
                f'fill="{colour}" fill-opacity="0.6"><title>{escape(name)}: {v:.3f} s</title></circle>'
            )
        if values:
            med = sorted(values)[len(values) // 2]
            mx = ml + xa.norm(med) * pw
            out.append(
                f'<line class="median" x1="{mx:.1f}" y1="{y - 9:.1f}" x2="{mx:.1f}" y2="{y + 9:.1f}" '
                f'stroke="#000" stroke-width="2"><title>median {med:.3f} s</title></line>'
            )
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)

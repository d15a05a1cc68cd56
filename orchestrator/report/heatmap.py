"""A node-pair heatmap in SVG (the straggler matrix), drawn as report/svg.py draws its charts.

`<svg class="plot" data-kind="heatmap">`: one `<rect class="cell">` per ordered pair with a
`<title>` tooltip (both names and the figure), a grey cell where the pair was not measured, the
node names along both axes, and flagged nodes (stragglers) marked in red (class "flagged"). Every
label is data (a node name from an inventory): it goes through escape.visible (control characters
shown) and then html.escape, so no name can become markup.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from orchestrator.report.escape import html_text, visible

_LOW = (255, 255, 255)
_HIGH = (178, 24, 43)
_MISSING = "#d9d9d9"


def _colour(v: float, lo: float, hi: float) -> str:
    t = 0.0 if hi <= lo else (v - lo) / (hi - lo)
    r, g, b = (round(a + (z - a) * t) for a, z in zip(_LOW, _HIGH, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(
    nodes: Sequence[str],
    values: Mapping[tuple[str, str], float],
    *,
    title: str,
    unit: str,
    flagged: Collection[str] = (),
    cell: int = 22,
) -> str:
    """An SVG heatmap of values[(a, b)] over nodes x nodes; a pair given one way is drawn both ways."""
    both: dict[tuple[str, str], float] = {}
    for (a, b), v in values.items():
        both[(a, b)] = v
        both.setdefault((b, a), v)
    shown = [v for (a, b), v in both.items() if a in nodes and b in nodes]
    lo, hi = (min(shown), max(shown)) if shown else (0.0, 1.0)
    margin = 12 + 7 * max((len(visible(n)) for n in nodes), default=4)
    top = 28 + margin
    size = cell * len(nodes)
    width, height = margin + size + 16, top + size + 30
    out = [
        f'<svg class="plot" data-kind="heatmap" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="{html_text(title)}">',
        f'<text class="title" x="{width / 2}" y="16" text-anchor="middle">{html_text(title)}</text>',
    ]
    for i, n in enumerate(nodes):
        colour = ' fill="#b2182b" font-weight="bold"' if n in flagged else ""
        flag = " flagged" if n in flagged else ""
        y = top + i * cell + cell * 0.7
        x = margin + i * cell + cell * 0.7
        out.append(
            f'<text class="tick row{flag}" x="{margin - 4}" y="{y:.1f}" text-anchor="end"{colour}>'
            f"{html_text(n)}</text>"
        )
        out.append(
            f'<text class="tick col{flag}" transform="translate({x:.1f} {top - 4}) rotate(-60)"{colour}>'
            f"{html_text(n)}</text>"
        )
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            x, y = margin + j * cell, top + i * cell
            if a == b:
                out.append(f'<rect class="diag" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="#fff"/>')
                continue
            got = both.get((a, b))
            fill = _MISSING if got is None else _colour(got, lo, hi)
            tip = f"{a} - {b}: " + ("not measured" if got is None else f"{got:.4g} {unit}")
            out.append(
                f'<rect class="cell" x="{x}" y="{y}" width="{cell}" height="{cell}" fill="{fill}" '
                f'stroke="#fff"><title>{html_text(tip)}</title></rect>'
            )
    out.append(
        f'<text class="label" x="{margin + size / 2}" y="{top + size + 20}" text-anchor="middle">'
        f"{html_text(f'{lo:.4g} to {hi:.4g} {unit}, white to red; grey: not measured')}</text>"
    )
    out.append("</svg>")
    return "\n".join(out)

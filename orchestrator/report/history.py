"""`orch history`: key figures of one plan over nights, and regressions beyond the noise band.

Key figure: busbw at the largest size of each (step, collective). The latest run is checked
against the previous run and, when named, a baseline. Noise band: the night-to-night spread of
each figure over the window, sigma = 1.4826 * median|ln x_i - ln x_(i-1)| (the spread of a
difference of two nights), band = max(ln(1 + floor), k * sigma), floor 5%, k 3; with fewer than
three earlier nights only the floor applies.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime
from html import escape
from itertools import pairwise

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.report import svg
from orchestrator.store.db import ResultsStore
from orchestrator.text import plural

_MAD = 1.4826


class Night(StrictModel):
    run_id: str
    started_at: datetime | None
    status: str
    figures: dict[str, float] = Field(description="'collective@step' -> busbw GB/s at the largest size")


class Regression(StrictModel):
    run_id: str
    figure: str
    value: float
    reference: float
    against: str = Field(description="'previous night' or 'baseline NAME'")
    ratio: float
    band: float


class History(StrictModel):
    plan: str | None
    nights: list[Night] = Field(description="oldest first")
    regressions: list[Regression]
    floor: float
    k: float

    @property
    def figures(self) -> list[str]:
        return list(dict.fromkeys(f for n in self.nights for f in n.figures))


def _figures(store: ResultsStore, run_ids: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {r: {} for r in run_ids}
    for row in store.summaries(run_ids):
        out[row["run_id"]][f"{row['collective']}@{row['step_id']}"] = float(row["busbw_gbs"])
    return out


def _band(series: list[float], floor: float, k: float) -> float:
    logs = [math.log(v) for v in series if v > 0]
    if len(logs) < 3:
        return math.log1p(floor)
    sigma = _MAD * statistics.median(abs(b - a) for a, b in pairwise(logs))
    return max(math.log1p(floor), k * sigma)


def history(
    store: ResultsStore,
    *,
    plan: str | None = None,
    since: datetime | None = None,
    baseline: str | None = None,
    floor: float = 0.05,
    k: float = 3.0,
) -> History:
    """Finished runs of plan since a date, oldest first, and the latest run's regressions."""
    rows = [r for r in store.runs(plan=plan, since=since) if r.status not in ("running", "interrupted")]
    rows.reverse()
    figs = _figures(store, [r.run_id for r in rows])
    nights = [
        Night(run_id=r.run_id, started_at=r.started_at, status=r.status, figures=figs[r.run_id]) for r in rows
    ]
    regressions: list[Regression] = []
    if len(nights) >= 2:
        last, prev = nights[-1], nights[-2]
        for fig, value in last.figures.items():
            earlier = [n.figures[fig] for n in nights[:-1] if fig in n.figures]
            band = _band(earlier, floor, k)
            ref = prev.figures.get(fig)
            if ref and ref > 0 and value > 0 and math.log(value / ref) < -band:
                regressions.append(
                    Regression(
                        run_id=last.run_id,
                        figure=fig,
                        value=value,
                        reference=ref,
                        against="previous night",
                        ratio=value / ref,
                        band=math.expm1(band),
                    )
                )
    if baseline and nights:
        b = store.baseline(baseline)
        if b is not None:
            ref_figs = _figures(store, [b.run_id])[b.run_id]
            last = nights[-1]
            for fig, value in last.figures.items():
                ref = ref_figs.get(fig)
                earlier = [n.figures[fig] for n in nights[:-1] if fig in n.figures]
                band = _band(earlier, floor, k)
                if ref and ref > 0 and value > 0 and math.log(value / ref) < -band:
                    regressions.append(
                        Regression(
                            run_id=last.run_id,
                            figure=fig,
                            value=value,
                            reference=ref,
                            against=f"baseline {baseline}",
                            ratio=value / ref,
                            band=math.expm1(band),
                        )
                    )
    return History(plan=plan, nights=nights, regressions=regressions, floor=floor, k=k)


def render_history_html(h: History) -> str:
    """A self-contained page: one trend plot per collective (one line per step) and the table."""
    colls = list(dict.fromkeys(f.split("@", 1)[0] for f in h.figures))
    plots = []
    for coll in colls:
        series = []
        for fig in [f for f in h.figures if f.startswith(coll + "@")]:
            pts = [
                (n.started_at.timestamp(), n.figures[fig])
                for n in h.nights
                if n.started_at and fig in n.figures
            ]
            series.append(svg.Series(fig.split("@", 1)[1], pts))
        plots.append(
            svg.line_chart(
                series,
                title=f"{coll}: busbw at the largest size",
                x_label="run start (UTC)",
                y_label="busbw (GB/s)",
                x_fmt=lambda t: datetime.fromtimestamp(t).strftime("%m-%d %H:%M"),
                kind="trend",
            )
        )
    flagged = {(r.run_id, r.figure) for r in h.regressions}
    head = "".join(f"<th>{escape(f)}</th>" for f in h.figures)
    body = []
    for n in h.nights:
        cells = "".join(
            f'<td class="num{" bad" if (n.run_id, f) in flagged else ""}">'
            + (f"{n.figures[f]:.4g}" if f in n.figures else "-")
            + "</td>"
            for f in h.figures
        )
        body.append(
            f"<tr><td>{escape(str(n.started_at or '-'))}</td><td>{escape(n.run_id)}</td>"
            f"<td>{escape(n.status)}</td>{cells}</tr>"
        )
    regs = (
        "".join(
            f"<li>{escape(r.figure)}: {r.value:.4g} GB/s is {r.ratio:.2f} x {escape(r.against)} "
            f"({r.reference:.4g}); band +-{r.band:.0%}</li>"
            for r in h.regressions
        )
        or "<li>none</li>"
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><link rel="icon" href="data:,">'
        f"<title>orch history {escape(h.plan or 'all plans')}</title><style>"
        "body{font:14px system-ui,sans-serif;margin:24px} table{border-collapse:collapse}"
        "td,th{border:1px solid #ddd;padding:2px 6px} td.num{text-align:right} td.bad{background:#fdd}"
        ".plots{display:flex;flex-wrap:wrap;gap:12px} svg .frame{fill:none;stroke:#999}"
        "svg .grid{stroke:#eee}"
        "svg .line{fill:none;stroke-width:1.6} svg.plot{font-size:11px}</style></head><body>"
        f"<h1>orch history: {escape(h.plan or 'all plans')} ({plural(len(h.nights), 'run')})</h1>"
        f"<h2>Regressions of the latest run</h2><ul>{regs}</ul>"
        f'<div class="plots">{"".join(plots)}</div>'
        f"<h2>Key figures (busbw GB/s at the largest size)</h2><table><tr><th>started</th><th>run</th>"
        f"<th>status</th>{head}</tr>{''.join(body)}</table></body></html>\n"
    )

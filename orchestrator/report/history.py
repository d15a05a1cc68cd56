"""`orch history`: key figures of one plan over its runs, and regressions beyond the noise band.

Key figure: busbw at the largest size of each (step, collective). The latest run is checked
against the previous run and, when named, a baseline. Noise band, per figure, from the history
itself (orchestrator.metrics.noise): sigma = 1.4826 x MAD of ln busbw over the earlier runs in
the window, se = sigma x sqrt(2) (one run against one run), band = max(ln(1 + floor), k x se),
floor 5%, k 3. Nothing is flagged until MIN_EARLIER earlier runs exist to know the noise; the
history says how many there are. The reference is called "previous night" only when the two
runs started at least NIGHT_GAP apart, "previous run" otherwise.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from html import escape

from pydantic import Field

from orchestrator.metrics import decision, noise
from orchestrator.models.base import StrictModel
from orchestrator.report import svg
from orchestrator.store.db import ResultsStore
from orchestrator.text import plural

MIN_EARLIER = 5
"""Earlier runs needed before any regression is flagged."""
NIGHT_GAP = timedelta(hours=20)


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
    against: str = Field(description="'previous run', 'previous night' or 'baseline NAME'")
    ratio: float
    band: float
    earlier: int = Field(default=0, description="earlier runs the band was estimated from")


class History(StrictModel):
    plan: str | None
    nights: list[Night] = Field(description="oldest first")
    regressions: list[Regression]
    floor: float
    k: float
    earlier_runs: int = Field(default=0, description="finished runs before the latest one")
    min_earlier: int = MIN_EARLIER
    notes: list[str] = Field(default_factory=list)

    @property
    def figures(self) -> list[str]:
        return list(dict.fromkeys(f for n in self.nights for f in n.figures))


def _figures(store: ResultsStore, run_ids: list[str]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {r: {} for r in run_ids}
    for row in store.summaries(run_ids):
        out[row["run_id"]][f"{row['collective']}@{row['step_id']}"] = float(row["busbw_gbs"])
    return out


def _band(earlier: list[float], floor: float, k: float) -> float:
    """The band of one figure from its earlier values (robust spread of ln busbw, sqrt 2 for a
    difference of two runs)."""
    sigma = noise.mad_sigma(noise.log_values(earlier)) or 0.0
    return noise.band(sigma * math.sqrt(2.0), floor, k)


def previous_label(prev: Night, last: Night) -> str:
    """'previous night' when the two runs started NIGHT_GAP or more apart, else 'previous run'."""
    if prev.started_at and last.started_at and last.started_at - prev.started_at >= NIGHT_GAP:
        return "previous night"
    return "previous run"


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
    earlier_runs = max(0, len(nights) - 1)
    notes: list[str] = []
    if nights and earlier_runs < MIN_EARLIER:
        notes.append(
            f"{earlier_runs} earlier run{'s' if earlier_runs != 1 else ''} in the window: no regression is "
            f"flagged until {MIN_EARLIER} exist to know the noise"
        )
        return History(plan=plan, nights=nights, regressions=[], floor=floor, k=k,
                       earlier_runs=earlier_runs, notes=notes)  # fmt: skip
    refs: list[tuple[str, dict[str, float]]] = []
    if len(nights) >= 2:
        refs.append((previous_label(nights[-2], nights[-1]), nights[-2].figures))
    if baseline and nights:
        b = store.baseline(baseline)
        if b is not None:
            refs.append((f"baseline {baseline}", _figures(store, [b.run_id])[b.run_id]))
    regressions: list[Regression] = []
    last = nights[-1] if nights else None
    for against, ref_figs in refs:
        assert last is not None
        for fig, value in last.figures.items():
            earlier = [n.figures[fig] for n in nights[:-1] if fig in n.figures]
            ref = ref_figs.get(fig)
            if len(earlier) < MIN_EARLIER or not ref or ref <= 0 or value <= 0:
                continue
            band = _band(earlier, floor, k)
            if decision.direction(math.log(value / ref), band) == "worse":
                regressions.append(
                    Regression(
                        run_id=last.run_id, figure=fig, value=value, reference=ref, against=against,
                        ratio=value / ref, band=math.expm1(band), earlier=len(earlier),
                    )
                )  # fmt: skip
    return History(plan=plan, nights=nights, regressions=regressions, floor=floor, k=k,
                   earlier_runs=earlier_runs, notes=notes)  # fmt: skip


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
        f"<h2>Regressions of the latest run</h2>"
        + "".join(f"<p>{escape(n)}</p>" for n in h.notes)
        + f"<ul>{regs}</ul>"
        f'<div class="plots">{"".join(plots)}</div>'
        f"<h2>Key figures (busbw GB/s at the largest size)</h2><table><tr><th>started</th><th>run</th>"
        f"<th>status</th>{head}</tr>{''.join(body)}</table></body></html>\n"
    )

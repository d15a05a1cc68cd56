"""CLI command: history (`orch history --plan nightly`): trend of key figures, regressions flagged."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import Cell, Col, err, fitted_table, out, styled, table_width
from orchestrator.cli.runs import StoreOpt, open_existing, store_path
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.report.history import History, history, render_history_html
from orchestrator.store.rundir import atomic_write
from orchestrator.text import figure, plural


def history_cmd(
    plan: Annotated[str | None, typer.Option("--plan", help="Only runs of this plan.")] = None,
    since: Annotated[
        datetime | None, typer.Option("--since", help="Only runs started since (YYYY-MM-DD).")
    ] = None,
    baseline: Annotated[
        str | None, typer.Option("--baseline", help="Also judge against this baseline.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option("--html", help="Write the trend plots to this HTML file.")
    ] = None,
    floor: Annotated[
        float, typer.Option("--floor", min=0.0, help="Smallest regression band, relative (0.05 = 5%).")
    ] = 0.05,
    store: StoreOpt = None,
) -> int:
    """Key figures over the runs of a plan; exit 1 when the latest run regressed beyond the noise band."""
    if since is not None and since.tzinfo is None:
        since = since.astimezone()
    opened = open_existing(store)
    if opened is None:
        if baseline:
            raise ConfigError(f"no baseline named {baseline!r}: no results store at {store_path(store)}")
        out.print(f"no runs recorded yet (no results store at {store_path(store)})", markup=False)
        return EXIT_OK
    with opened as db:
        if baseline and db.baseline(baseline) is None:
            known = ", ".join(b.name for b in db.baselines()) or "none"
            raise ConfigError(f"no baseline named {baseline!r} (known: {known})", hint="orch baseline list")
        h = history(db, plan=plan, since=since, baseline=baseline, floor=floor)
    figs = h.figures
    colls = list(dict.fromkeys(f.split("@", 1)[0] for f in figs))
    # Terminal: per collective, the figure of the largest step (last in ladder order).
    shown = {c: [f for f in figs if f.startswith(c + "@")][-1] for c in colls}
    for table in history_tables(h, shown, plan, out.width):
        out.print(table)
    for note in h.notes:
        out.print(note, markup=False, soft_wrap=False)
    for r in h.regressions:
        out.print(
            f"REGRESSION {r.run_id} {r.figure}: {r.value:.4g} GB/s = {r.ratio:.2f} x {r.against} "
            f"({r.reference:.4g}); band ±{r.band:.0%} from {r.earlier} earlier runs",
            markup=False,
            style="red",
        )
    if html:
        atomic_write(html, render_history_html(h))
        err.print(f"history plots -> {html}", markup=False)
    return EXIT_THRESHOLDS if h.regressions else EXIT_OK


def history_tables(h: History, shown: dict[str, str], plan: str | None, width: int) -> list[Table]:
    """The history as tables that fit `width`: run ids and figures are never cut.

    When the figures do not fit beside the run id, they are split over several tables, each with
    the run id again (an 80-column terminal shows about 3 collectives a table).
    """
    flagged = {(r.run_id, r.figure) for r in h.regressions}
    figures = list(shown.values())
    rows: list[list[Cell]] = []
    for n in h.nights:
        row: list[Cell] = [n.run_id, n.status]
        for f in figures:
            v = n.figures.get(f)
            txt = figure(v)
            row.append(styled(f"{txt} ▼", "red") if (n.run_id, f) in flagged else txt)
        rows.append(row)
    cols = [Col("run", whole=True), Col("status", whole=True), *(Col(f, whole=True) for f in figures)]
    chunks: list[list[int]] = [[]]
    for i in range(2, len(cols)):
        trial = [0, 1, *chunks[-1], i]
        if (
            chunks[-1]
            and table_width([cols[j] for j in trial], [[r[j] for j in trial] for r in rows]) > width
        ):
            chunks.append([])
        chunks[-1].append(i)
    runs = plural(len(h.nights), "run")
    title = f"history: {plan or 'all plans'} ({runs}) — busbw GB/s at the largest size"
    tables = []
    for k, chunk in enumerate(chunks):
        idx = [0, 1, *chunk]
        tables.append(
            fitted_table(
                title if k == 0 else None, [cols[j] for j in idx], [[r[j] for j in idx] for r in rows], width
            )
        )
    return tables


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("history")(history_cmd)

"""CLI command: history (`orch history --plan nightly`): trend of key figures, regressions flagged."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import err, out, styled
from orchestrator.cli.runs import StoreOpt, store_path
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS
from orchestrator.report.history import history, render_history_html
from orchestrator.store.db import ResultsStore
from orchestrator.store.rundir import atomic_write


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
    floor: Annotated[float, typer.Option("--floor", min=0.0)] = 0.05,
    store: StoreOpt = None,
) -> int:
    """Key figures over the runs of a plan; exit 1 when the latest run regressed beyond the noise band."""
    if since is not None and since.tzinfo is None:
        since = since.astimezone()
    with ResultsStore.open(store_path(store)) as db:
        h = history(db, plan=plan, since=since, baseline=baseline, floor=floor)
    figs = h.figures
    colls = list(dict.fromkeys(f.split("@", 1)[0] for f in figs))
    # Terminal: per collective, the figure of the largest step (last in ladder order).
    shown = {c: [f for f in figs if f.startswith(c + "@")][-1] for c in colls}
    flagged = {(r.run_id, r.figure) for r in h.regressions}
    table = Table(
        title=f"history: {plan or 'all plans'} ({len(h.nights)} runs) — busbw GB/s at the largest size"
    )
    for col in ["started", "run", "status", *shown.values()]:
        table.add_column(col)
    for n in h.nights:
        cells = []
        for f in shown.values():
            v = n.figures.get(f)
            txt = f"{v:.4g}" if v is not None else "-"
            cells.append(styled(f"{txt} ▼", "red") if (n.run_id, f) in flagged else txt)
        table.add_row(f"{n.started_at:%Y-%m-%d %H:%M}" if n.started_at else "-", n.run_id, n.status, *cells)
    out.print(table)
    for r in h.regressions:
        out.print(
            f"REGRESSION {r.run_id} {r.figure}: {r.value:.4g} GB/s = {r.ratio:.2f} x {r.against} "
            f"({r.reference:.4g}); band ±{r.band:.0%}",
            markup=False,
            style="red",
        )
    if html:
        atomic_write(html, render_history_html(h))
        err.print(f"history plots -> {html}", markup=False)
    return EXIT_THRESHOLDS if h.regressions else EXIT_OK


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("history")(history_cmd)

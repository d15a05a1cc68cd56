"""CLI command: decide (`orch decide A B`): the decision between two setups on one page
(report/decide.py): one row per line of a buyer's matrix, each with A's and B's figure, the
verdict and why, and an overall better / same / worse / undecided."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import out, styled
from orchestrator.cli.compare import RepeatA, RepeatB, load_ref
from orchestrator.cli.runs import RunArg, StoreOpt
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS
from orchestrator.models.decide import DecidePage
from orchestrator.report.decide import decide, page_html, page_markdown
from orchestrator.store.rundir import atomic_write

_COLOUR = {"better": "green", "same": "white", "worse": "red", "missing": "yellow", "undecided": "yellow"}


def render_page(p: DecidePage) -> Table:
    table = Table(title=f"decision: B {p.b} ({len(p.runs_b)} run(s)) vs A {p.a} ({len(p.runs_a)} run(s))")
    for col in ("row", "A", "B", "verdict", "why"):
        table.add_column(col, overflow="fold")
    for r in p.rows:
        table.add_row(r.row, r.a or "-", r.b or "-", styled(r.verdict, _COLOUR[r.verdict]), r.why)
    return table


def decide_cmd(
    run_a: RunArg,
    run_b: RunArg,
    repeat_a: RepeatA = None,
    repeat_b: RepeatB = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Also write the page as HTML.")] = None,
    md_out: Annotated[Path | None, typer.Option("--md", help="Also write the page as Markdown.")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the page as JSON.")] = None,
    store: StoreOpt = None,
) -> int:
    """The decision between A and B on one page. Exit 0 when B is better or the same, 1 when it is
    worse or the call is undecided (a row the runs cannot answer, named on the page). The bands are
    orch compare's (its default floor and k)."""
    runs_a = [load_ref(r, store) for r in [run_a, *(repeat_a or [])]]
    runs_b = [load_ref(r, store) for r in [run_b, *(repeat_b or [])]]
    page = decide(runs_a, runs_b)
    out.print(render_page(page))
    out.print(f"overall: {page.overall}: {page.why.split(': ', 1)[-1]}", markup=False)
    for path, text in (
        (html_out, page_html(page)),
        (md_out, page_markdown(page)),
        (json_out, page.model_dump_json(indent=2) + "\n"),
    ):
        if path is not None:
            atomic_write(path, text)
    return EXIT_OK if page.overall in ("better", "same") else EXIT_THRESHOLDS


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("decide")(decide_cmd)

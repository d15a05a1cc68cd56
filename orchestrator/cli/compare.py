"""CLI command: compare (`orch compare RUN_A RUN_B`): B against A, per step, collective and size."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import err, out, styled
from orchestrator.cli.runs import RunArg, StoreOpt, store_path
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.models.plan import format_size
from orchestrator.models.run import RunRecord
from orchestrator.report.compare import FLOOR, Comparison, K, compare_runs
from orchestrator.store.db import resolve_run_dir
from orchestrator.store.load import load_run
from orchestrator.store.rundir import atomic_write

_COLOUR = {"better": "green", "same": "white", "worse": "red"}


def _load(ref: str, store: str | None) -> RunRecord:
    return load_run(resolve_run_dir(ref, store_path(store)))


def render_table(c: Comparison, only_changed: bool) -> Table:
    table = Table(
        title=f"B {c.b} ({c.b_plan}, {c.runs_b} run{'s' if c.runs_b > 1 else ''}) vs "
        f"A {c.a} ({c.a_plan}, {c.runs_a} run{'s' if c.runs_a > 1 else ''}); medians, robust band"
    )
    for col in ("step", "collective", "size", "A GB/s", "B GB/s", "B/A", "band", "verdict", "note"):
        table.add_column(
            col, justify="right" if col in {"size", "A GB/s", "B GB/s", "B/A", "band"} else "left"
        )
    for r in c.rows:
        if only_changed and r.verdict == "same":
            continue
        table.add_row(
            r.step,
            r.collective,
            format_size(r.size_bytes),
            f"{r.a_gbs:.4g}" if r.a_gbs is not None else "-",
            f"{r.b_gbs:.4g}" if r.b_gbs is not None else "-",
            f"{r.ratio:.3f}" if r.ratio is not None else "-",
            f"±{r.band:.0%}" if r.band is not None else "-",
            styled(r.verdict, _COLOUR.get(r.verdict, "magenta")),
            r.note or "",
        )
    return table


def _secs(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "-"


def compare_cmd(
    run_a: RunArg,
    run_b: RunArg,
    repeat_a: Annotated[
        list[str] | None, typer.Option("--repeat-a", help="Another run of A's setup (noise).")
    ] = None,
    repeat_b: Annotated[
        list[str] | None, typer.Option("--repeat-b", help="Another run of B's setup (noise).")
    ] = None,
    floor: Annotated[float, typer.Option("--floor", min=0.0, help="Smallest band, relative.")] = FLOOR,
    k: Annotated[float, typer.Option("--k", min=0.0, help="Band = k x estimated noise.")] = K,
    only_changed: Annotated[bool, typer.Option("--changed", help="Show only rows not 'same'.")] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the comparison as JSON.")
    ] = None,
    store: StoreOpt = None,
) -> int:
    """Compare run B against run A (exit 1 when any row is worse beyond the noise band)."""
    a, b = _load(run_a, store), _load(run_b, store)
    for rec in (a, b):
        if not any(s.rows for s in rec.steps) and not rec.recovery:
            raise ConfigError(
                f"run {rec.run_id} has nothing to compare: no measurement in {rec.run_dir} "
                f"({rec.status}, {len(rec.steps)} of {len(rec.step_ids)} steps finished)",
                hint="compare runs that measured something (orch runs list)",
            )
    c = compare_runs(
        a,
        b,
        repeats_a=[_load(r, store) for r in repeat_a or []],
        repeats_b=[_load(r, store) for r in repeat_b or []],
        floor=floor,
        k=k,
    )
    for w in c.warnings:
        err.print(f"warning: {w}", markup=False)
    if c.rows or not c.recovery:
        out.print(render_table(c, only_changed))
    for r in c.recovery:
        a_s, b_s, band = (_secs(v) for v in (r.a_median_s, r.b_median_s, r.band_s))
        out.print(
            f"recovery {r.fault} {r.phase}: median A {a_s} s (n={r.n_a}), B {b_s} s (n={r.n_b}) "
            f"(band {band} s) -> {r.verdict}",
            markup=False,
        )
    counts = c.counts()
    out.print("rows: " + ", ".join(f"{k_}={v}" for k_, v in sorted(counts.items())), markup=False)
    if json_out:
        atomic_write(json_out, c.model_dump_json(indent=2) + "\n")
    return EXIT_THRESHOLDS if c.worse else EXIT_OK


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("compare")(compare_cmd)

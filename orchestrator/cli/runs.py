"""CLI commands: runs (`orch runs list/show/resume/ingest`) and baseline (`orch baseline set/list`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from orchestrator.cli.common import Cell, Col, err, fitted_table, out, styled
from orchestrator.errors import ConfigError
from orchestrator.models.fault import RecoverySummary
from orchestrator.models.migrate import MigrateRun
from orchestrator.models.plan import format_size
from orchestrator.report.common import efficiency_cell, reference_cell
from orchestrator.report.diagnostics import diag_text
from orchestrator.runs.orphans import cleanup_orphans
from orchestrator.store.db import ResultsStore, default_store_path, resolve_run_dir
from orchestrator.store.load import load_run
from orchestrator.store.location import StoreLocation, parse_store

runs_app = typer.Typer(name="runs", help="Recorded runs: list, show, resume.", no_args_is_help=True)
baseline_app = typer.Typer(
    name="baseline", help="Named reference runs for thresholds and compare.", no_args_is_help=True
)

StoreOpt = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="ORCH_STORE",
        help="Results store: a SQLite file (default: runs/orch.db) or a postgresql:// URL without password.",
        show_default=False,
    ),
]
InventoryOpt = Annotated[
    Path | None,
    typer.Option(
        "--inventory",
        "-i",
        help="Inventory whose orch_slurm_conf Slurm commands use (default: orch's own SLURM_CONF); "
        "a run folder's own inventory.json is never trusted for it.",
        show_default=False,
    ),
]
RunArg = Annotated[str, typer.Argument(help="Run directory, run id (or prefix), or baseline name.")]
_COLOUR = {"accepted": "green", "pass": "green", "failed": "red", "fail": "red", "running": "cyan"}


def store_path(store: str | None) -> StoreLocation:
    return parse_store(store) if store else default_store_path()


def open_existing(store: str | None) -> ResultsStore | None:
    """The store to read from, never created: None when there is none yet (no run recorded; an
    ORCH_STORE set for every command, as cron does, names the store before the first run).

    Raises:
        ConfigError: --store / ORCH_STORE names a folder or a file that is not a results store.
    """
    path = store_path(store)
    if isinstance(path, Path) and not path.exists():
        return None  # a PostgreSQL store is always there to be asked
    return ResultsStore.open(path, create=False)


def slurm_conf_of(inventory: Path | None) -> Path | None:
    """The orch_slurm_conf of the inventory named on the command line (None: orch's own
    SLURM_CONF). Raises InventoryError when the inventory cannot be loaded."""
    if inventory is None:
        return None
    from orchestrator.inventory import load_inventory

    return load_inventory(inventory).vars.orch_slurm_conf


def user_at_host(user: str | None, host: str | None) -> str:
    """``user@host`` with what is known; "-" when neither is."""
    if user is None and host is None:
        return "-"
    return f"{user or '-'}@{host or '-'}"


@runs_app.command("list")
def list_cmd(
    store: StoreOpt = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Only runs of this plan.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Show at most this many runs.")] = 50,
    scan: Annotated[
        Path | None, typer.Option("--scan", help="Ingest every run directory under this folder first.")
    ] = None,
) -> int:
    """Runs in the results store, newest first (an unfinished, dead run shows as interrupted)."""
    path = store_path(store)
    if scan is not None and not scan.is_dir():
        raise ConfigError(f"--scan {scan}: no such folder")
    opened = ResultsStore.open(path) if scan is not None else open_existing(store)
    if opened is None:
        out.print(f"no runs recorded yet (no results store at {path})", markup=False)
        return 0
    with opened as db:
        if scan is not None:
            for d in sorted(p.parent for p in scan.glob("*/journal.jsonl")):
                db.ingest(d)
        rows = db.runs(plan=plan, limit=limit)
        # A run that was running when last ingested may have died since: look again.
        for i, r in enumerate(rows):
            if r.status == "running" and r.run_dir.exists():
                db.ingest(r.run_dir)
                rows[i] = db.run(r.run_id) or r
    cols = [
        Col("run", whole=True), Col("plan", optional=True), Col("backend", optional=True),
        Col("status", whole=True), Col("exit", whole=True), Col("steps", whole=True),
        Col("started", optional=True), Col("wall s", whole=True), Col("user@host", optional=True),
    ]  # fmt: skip
    cells: list[list[Cell]] = [
        [
            r.run_id,
            r.plan,
            r.backend,
            styled(r.status, _COLOUR.get(r.status, "magenta")),
            "-" if r.exit_code is None else str(r.exit_code),
            f"{r.steps_done}/{r.steps_planned}",
            r.started_at.strftime("%Y-%m-%d %H:%M:%S") if r.started_at else "-",
            f"{r.wall_s:.1f}" if r.wall_s is not None else "-",
            user_at_host(r.user, r.host),
        ]
        for r in rows
    ]
    table = fitted_table(f"runs in {path}", cols, cells, out.width)
    out.print(table)
    return 0


@runs_app.command("show")
def show_cmd(run: RunArg, store: StoreOpt = None) -> int:
    """One run: status, steps with their verdicts, busbw at the largest size, what is left to run."""
    rec = load_run(resolve_run_dir(run, store_path(store)))
    colour = _COLOUR.get(rec.status, "magenta")
    out.print(
        f"run {rec.run_id}:",
        styled(rec.status, colour),
        f"(plan {rec.plan_name}, {rec.backend}) — {rec.run_dir}",
    )
    out.print(
        f"started {rec.started_at or '-'} by {user_at_host(rec.user, rec.host)}; "
        f"finished {rec.finished_at or 'no'}; resumed {rec.resumes}x",
        markup=False,
    )
    table = Table()
    for col in ("step", "ranks", "job", "verdict", "collective", "size", "busbw GB/s", "eff.", "against"):
        table.add_column(col)
    for sid in rec.step_ids:
        s = rec.step(sid)
        if s is None:
            if sid in rec.unreadable:
                table.add_row(sid, "-", "-", styled("unreadable", "red"), rec.unreadable[sid], "", "", "", "")
            else:
                table.add_row(sid, "-", "-", styled("not run", "yellow"), "", "", "", "", "")
            continue
        for i, c in enumerate(s.summary.values() or [None]):
            first = i == 0
            table.add_row(
                sid if first else "",
                str(s.step.world_size) if first else "",
                (s.job_id or "-") if first else "",
                styled(s.verdict, _COLOUR.get(s.verdict, "magenta")) if first else "",
                c.collective if c else "-",
                format_size(c.size_bytes) if c else "-",
                f"{c.busbw_gbs:.3f}" if c else "-",
                efficiency_cell(c),
                reference_cell(c),
            )
    if rec.step_ids or not rec.serving_ids:
        out.print(table)
    for s in rec.steps:
        for reason in s.reasons:
            out.print(f"{s.step.id}: {reason}", markup=False)
    for line in diag_text(rec):  # each node's diagnostic figures
        out.print(line, markup=False)
    if rec.serving:
        from orchestrator.cli.run import render_serving

        render_serving(rec.run_id, rec.serving)
    for w in rec.warnings:
        err.print(f"warning: {w}", markup=False)
    pending = rec.pending + rec.serving_pending
    if pending and rec.status != "running":
        out.print(f"not finished: {', '.join(pending)} — orch runs resume {rec.run_id}", markup=False)
    return 0


@runs_app.command("resume")
def resume_cmd(run: RunArg, store: StoreOpt = None, inventory: InventoryOpt = None) -> int:
    """Finish an interrupted run in the same run directory: a ladder's steps without a result,
    a recovery-test's repeats without a record, a migrate run's phases from where it stopped
    (after stopping the ansible-playbook it left behind)."""
    from orchestrator.cli.fault import render_recovery
    from orchestrator.cli.run import ProgressPrinter, render_result
    from orchestrator.remote.shells import node_shells
    from orchestrator.runs.recovery import summary_ending
    from orchestrator.runs.resume import resume

    run_dir = resolve_run_dir(run, store_path(store))
    result = resume(
        run_dir,
        listeners=[ProgressPrinter()],
        open_shells=node_shells,
        progress=lambda m: err.print(m, markup=False),
        slurm_conf=slurm_conf_of(inventory),
    )
    if isinstance(result, MigrateRun):
        from orchestrator.cli.migrate import render_run

        render_run(result)
        return result.exit_code
    if isinstance(result, RecoverySummary):
        for w in result.warnings:
            err.print(f"warning: {w}", markup=False, style="yellow")
        render_recovery(result, f"recovery-test {result.kind} x{result.repeats} (resumed) — {run_dir}")
        return summary_ending(result).exit_code
    render_result(result)
    return result.exit_code


@runs_app.command("ingest")
def ingest_cmd(
    dirs: Annotated[list[Path], typer.Argument(help="Run directories.")], store: StoreOpt = None
) -> int:
    """(Re)load run directories into the results store (idempotent)."""
    with ResultsStore.open(store_path(store)) as db:
        for d in dirs:
            rec = db.ingest(d)
            out.print(f"{rec.run_id}: {rec.status}, {len(rec.steps)}/{len(rec.step_ids)} steps", markup=False)
    return 0


@runs_app.command("cleanup")
def cleanup_cmd(
    runs: Annotated[
        Path | None,
        typer.Option("--runs", help="Root of the run directories (default: runs).", show_default=False),
    ] = None,
    inventory: InventoryOpt = None,
) -> int:
    """Cancel Slurm jobs left by runs whose orch process died (SIGKILL): the journal names them."""
    if runs is None:
        runs = Path("runs")
        if not runs.is_dir():
            out.print("no orphan jobs (no runs folder here)", markup=False)
            return 0
    elif not runs.is_dir():
        raise ConfigError(
            f"--runs {runs}: no such folder", hint="name the folder that holds the run directories"
        )
    from orchestrator.scheduler.slurm import SlurmScheduler

    reports = cleanup_orphans(runs, SlurmScheduler(slurm_conf=slurm_conf_of(inventory)))
    for r in reports:
        if r.refused is not None:
            err.print(f"{r.run_id}: refused: {r.refused}", markup=False)
            continue
        out.print(f"{r.run_id}: cancelled {', '.join(r.cancelled) or 'none (all ended)'}", markup=False)
    if not reports:
        out.print("no orphan jobs", markup=False)
    return 0


@baseline_app.command("set")
def baseline_set(
    run: RunArg,
    name: Annotated[
        str | None, typer.Option("--name", help="Baseline name (default: the run's plan).")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="A note kept with the baseline.")] = None,
    store: StoreOpt = None,
) -> int:
    """Name a run as a baseline (plans refer to it in thresholds.baseline; compare accepts the name)."""
    path = store_path(store)
    run_dir = resolve_run_dir(run, path)
    with ResultsStore.open(path) as db:
        rec = db.ingest(run_dir)
        if rec.status != "accepted":
            err.print(f"warning: run {rec.run_id} is {rec.status}", markup=False)
        levels = any(lv.summary is not None for sv in rec.serving for lv in sv.levels)
        if not rec.steps and not levels:
            raise ConfigError(
                f"run {rec.run_id} has no finished steps to serve as a baseline "
                "(no collective step, no serving level with figures)"
            )
        b = db.set_baseline(name or rec.plan_name, rec.run_id, note)
    out.print(f"baseline {b.name} = run {b.run_id}", markup=False)
    return 0


@baseline_app.command("list")
def baseline_list(store: StoreOpt = None) -> int:
    """Named baselines."""
    opened = open_existing(store)
    if opened is None:
        out.print(f"no baselines (no results store at {store_path(store)})", markup=False)
        return 0
    with opened as db:
        for b in db.baselines():
            out.print(f"{b.name}\t{b.run_id}\t{b.set_at:%Y-%m-%d %H:%M}\t{b.note or ''}", markup=False)
    return 0


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(runs_app)
    app.add_typer(baseline_app)

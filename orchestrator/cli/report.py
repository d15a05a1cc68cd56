"""CLI command: report (`orch report RUN --format ...`), rebuilt from the run directory alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.common import err, write_out
from orchestrator.cli.runs import RunArg, StoreOpt, store_path
from orchestrator.errors import ConfigError
from orchestrator.report.formats import EXTENSIONS, FORMATS, Format, render
from orchestrator.store.db import resolve_run_dir
from orchestrator.store.load import load_run, run_kind
from orchestrator.store.rundir import atomic_write


def report_cmd(
    run: RunArg,
    fmt: Annotated[
        str, typer.Option("--format", "-f", help=f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}.")
    ] = "html",
    out_file: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="File to write; '-' = stdout. Default: html into the run dir."),
    ] = None,
    store: StoreOpt = None,
) -> int:
    """Write the report of one run (any state: finished, interrupted, running)."""
    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    f: Format = fmt
    run_dir = resolve_run_dir(run, store_path(store))
    if run_kind(run_dir) in ("migrate", "rollback"):
        return _migrate_report(run_dir, f, out_file)
    rec = load_run(run_dir)
    if out_file is None and f == "html":
        out_file = run_dir / f"report.{EXTENSIONS[f]}"
    if out_file is None or str(out_file) == "-":
        write_out(render(rec, f, Path.cwd()))
        return 0
    if out_file.is_dir():
        raise ConfigError(
            f"--out {out_file} is a folder",
            hint=f"name a file, e.g. {out_file / ('report.' + EXTENSIONS[f])}",
        )
    atomic_write(out_file, render(rec, f, out_file.parent))
    err.print(f"{f} report of {rec.run_id} ({rec.status}) -> {out_file}", markup=False)
    return 0


def _migrate_report(run_dir: Path, f: Format, out_file: Path | None) -> int:
    """A migrate or rollback run's own report (phases, compare, proof): md, html or json."""
    from orchestrator.runs.migrate import migrate_report

    if f not in ("md", "html", "json"):
        raise ConfigError(f"a migrate run has no {f} report", hint="use --format md, html or json")
    text = migrate_report(run_dir, f)
    if out_file is None and f == "html":
        out_file = run_dir / "report.html"
    if out_file is None or str(out_file) == "-":
        write_out(text)
        return 0
    atomic_write(out_file, text)
    err.print(f"{f} report of {run_dir.name} -> {out_file}", markup=False)
    return 0


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("report")(report_cmd)

"""CLI commands: parse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pydantic_core
import typer
from rich.table import Table

from orchestrator.cli.common import out
from orchestrator.models.serving_results import StatedLatency
from orchestrator.parse import (
    PARSE_COLLECTIVES,
    PARSERS,
    ParsedFile,
    ParseOptions,
    parse_file,
    recomputed_busbw,
)
from orchestrator.workloads.nccltests import ParsedRun


def _as_json(parsed: ParsedFile) -> dict[str, Any]:
    doc: dict[str, Any] = {"path": str(parsed.path), "kind": parsed.kind}
    if parsed.runs:
        doc["runs"] = [
            {
                **run.model_dump(mode="json", exclude={"row_text"}),
                "recomputed_busbw": [list(pair) for pair in recomputed_busbw(run)],
            }
            for run in parsed.runs
        ]
    if parsed.jobs is not None:
        doc["jobs"] = {k: v.model_dump(mode="json") for k, v in parsed.jobs.items()}
    if parsed.data is not None:
        doc["data"] = pydantic_core.to_jsonable_python(parsed.data)
    if parsed.serving:
        doc["serving"] = [s.model_dump(mode="json") for s in parsed.serving]
    return doc


def _show(parsed: ParsedFile) -> None:
    if parsed.data is not None:
        out.print_json(json.dumps(_as_json(parsed)["data"]))
    for run in parsed.runs:
        _show_run(parsed, run)
    if parsed.serving:
        _show_serving(parsed)
    if parsed.jobs is not None:
        table = Table(title=f"{parsed.path} — {parsed.kind}")
        cols = ("job", "status", "slurm state", "steps", "exit", "signal", "elapsed (s)", "reason", "nodes")
        for col in cols:
            table.add_column(col)
        for job in parsed.jobs.values():
            status = job.status.value + (f" (step {job.decided_by})" if job.decided_by else "")
            steps = ", ".join(f"{k} {v}" for k, v in job.steps.items())
            table.add_row(
                job.job_id, status, job.raw_state, steps, str(job.exit_code or ""),
                str(job.signal or ""), "" if job.elapsed_s is None else f"{job.elapsed_s:g}",
                job.reason or "", job.nodelist or "",
            )  # fmt: skip
        out.print(table)
        if any(j.decided_by for j in parsed.jobs.values()):
            out.print("status (step N): Slurm's record says COMPLETED, but that step did not complete "
                      "(docs/parse.md, 'Job steps')", markup=False)  # fmt: skip


def _show_run(parsed: ParsedFile, run: ParsedRun) -> None:
    flags = [f for f, on in (("TRUNCATED", run.truncated), ("ABORTED", run.aborted)) if on]
    title = f"{parsed.path} — {run.tool} {run.collective or '?'} n={run.nranks or '?'} {' '.join(flags)}"
    table = Table(title=title)
    for col in ("collective", "size (B)", "type", "time (us)", "busbw", "busbw recomputed", "#wrong",
                "in-place busbw"):  # fmt: skip
        table.add_column(col, justify="left" if col == "collective" else "right")
    for row, (oop, _ip) in zip(run.rows, recomputed_busbw(run), strict=True):
        ip = row.in_place
        wrong = "N/A" if row.out_of_place.wrong is None else str(row.out_of_place.wrong)
        table.add_row(
            row.collective, str(row.size_bytes), row.dtype, f"{row.out_of_place.time_us:g}",
            f"{row.out_of_place.busbw_gbs:.2f}", f"{oop:.2f}", wrong,
            "" if ip is None else f"{ip.busbw_gbs:.2f}",
        )  # fmt: skip
    out.print(table)
    if run.aborted:
        out.print(f"aborted: {run.aborted}", markup=False)
    if run.wrong_total or run.out_of_bounds:
        out.print(f"#wrong total {run.wrong_total}; out of bounds {run.out_of_bounds}", markup=False)


def _num(value: float | str | None) -> str:
    """A figure for the table: as stated when short, else 5 significant digits (--json: as stated)."""
    if value is None or isinstance(value, str):
        return value or ""
    text = f"{value:g}" if isinstance(value, int) else repr(value).removesuffix(".0")
    return text if len(text) <= 9 else f"{value:.5g}"


def _pair(lat: StatedLatency | None) -> str:
    """p50/p99 of one latency; '?' for the one the output does not state."""
    if lat is None:
        return ""
    return "/".join(_num(lat.p(q)) or "?" for q in ("p50", "p99"))


def _show_serving(parsed: ParsedFile) -> None:
    """One row per load level with the figures compare uses; --json has every figure stated."""
    first = parsed.serving[0]
    facts = (("model", first.model), ("backend", first.backend), ("version", first.tool_version))
    about = ", ".join(f"{k} {v}" for k, v in facts if v)
    table = Table(title=f"{parsed.path} — {parsed.kind}: {first.tool}" + (f" ({about})" if about else ""))
    cols = ("#", "label", "rate/s", "conc.", "ok", "failed", "s", "req/s", "out tok/s",
            "TTFT p50/p99", "TPOT p50/p99", "ITL p50/p99", "E2E p50/p99")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="left" if col == "label" else "right")
    for s in parsed.serving:
        table.add_row(
            str(s.index + 1), s.label or s.date or "", _num(s.request_rate), _num(s.max_concurrency),
            _num(s.completed), _num(s.failed), _num(s.duration_s), _num(s.request_throughput),
            _num(s.output_throughput), _pair(s.ttft), _pair(s.tpot), _pair(s.itl), _pair(s.e2e),
        )  # fmt: skip
    out.print(table)
    out.print("latencies in ms; empty: not stated by the output; every figure stated: --json", markup=False)
    for s in parsed.serving:
        if s.sections_aside:
            names = ", ".join(repr(k) for k in s.sections_aside)
            out.print(f"#{s.index + 1}: kept aside, not read: {names} (their text and figures: --json)",
                      markup=False)  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""

    @app.command("parse")
    def parse_cmd(
        files: Annotated[list[Path], typer.Argument(help="Tool outputs to read.")],
        kind: Annotated[
            str | None,
            typer.Option("--kind", help=f"One of: {', '.join(PARSERS)}. Default: told by the text itself."),
        ] = None,
        collective: Annotated[
            str | None,
            typer.Option(
                "--collective",
                help=f"For benchmark logs that do not name it: {', '.join(PARSE_COLLECTIVES)}.",
            ),
        ] = None,
        nranks: Annotated[
            int | None,
            typer.Option("--nranks", help="For benchmark logs without device lines: the rank count."),
        ] = None,
        fields: Annotated[
            str | None,
            typer.Option(
                "--fields", help="For --query-gpu CSV without a header: the --query-gpu list, in order."
            ),
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    ) -> None:
        """Read benchmark logs, serving-benchmark results (vLLM, SGLang, guidellm), Slurm job states, GPU and
        RDMA tool outputs; the kind is told by the text."""
        opts = ParseOptions.from_flags(collective, nranks, fields)
        parsed = [parse_file(f, kind, opts) for f in files]
        if as_json:
            out.print_json(json.dumps([_as_json(p) for p in parsed]))
            return
        for p in parsed:
            _show(p)

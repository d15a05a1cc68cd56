"""CLI command: compare (`orch compare RUN_A RUN_B`): B against A, per step, collective and size,
and per serving step and load level; `orch compare RUN FILE` (or FILE RUN): a run's serving levels
against a vLLM/SGLang/guidellm result that `orch parse` reads (report/compare_foreign.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.table import Table

from orchestrator.cli.common import err, out, styled
from orchestrator.cli.runs import RunArg, StoreOpt, store_path
from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.metrics.decision import FLOOR, K
from orchestrator.models.decision import FigureChange
from orchestrator.models.plan import format_size
from orchestrator.models.run import RunRecord
from orchestrator.parse import parse_file
from orchestrator.report.compare import Comparison, ServingRow, compare_runs, level_summaries
from orchestrator.report.compare_foreign import ForeignComparison, compare_foreign
from orchestrator.store.db import resolve_run_dir
from orchestrator.store.load import load_run
from orchestrator.store.rundir import atomic_write
from orchestrator.text import figure

_COLOUR = {"better": "green", "same": "white", "worse": "red", "worse for interactive": "red"}


def load_ref(ref: str, store: str | None) -> RunRecord:
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


def _fig(c: FigureChange) -> str:
    """A figure's change with its band and the n behind each side, e.g. +3.1% ±5% (n=100/100)."""
    if c.ratio is None or c.band is None:
        return f"- (n={c.n_a}/{c.n_b})"
    return f"{c.ratio - 1:+.1%} ±{c.band:.0%} (n={c.n_a}/{c.n_b})"


def render_serving_table(c: Comparison, only_changed: bool) -> Table:
    """Serving steps per level: each figure's change B/A with its band and n, the verdict, cost."""
    table = Table(
        title="serving: B vs A per step and level; change B/A ± band (n A/B: runs for throughput, "
        "samples for p99)"
    )
    for col in ("step", "level", "engine A / B", "tokens/s", "TTFT p99", "ITL p99", "TPOT p99", "E2E p99",
                "verdict", "cost/1M A", "cost/1M B"):  # fmt: skip
        table.add_column(col, justify="right" if col.startswith(("cost", "tok")) or "p99" in col else "left")
    for r in c.serving:
        if only_changed and r.verdict == "same":
            continue
        cmp = r.comparison
        figs = [_fig(f) for f in [cmp.throughput, *cmp.latency]] if cmp else ["-"] * 5
        a_eng, b_eng = r.engine_a or "-", r.engine_b or "-"
        engines = a_eng if a_eng == b_eng else f"{a_eng} / {b_eng}"
        table.add_row(r.step, r.level, engines, *figs, styled(r.verdict, _COLOUR.get(r.verdict, "magenta")),
                      figure(r.a_cost_per_million), figure(r.b_cost_per_million))  # fmt: skip
    return table


def serving_lines(rows: list[ServingRow]) -> list[str]:
    """One line per level not 'same': step, level, verdict and the figures that made it."""
    out = []
    for r in rows:
        if r.verdict == "missing":
            out.append(f"serving step {r.step}, level {r.level}: missing (runs A {r.n_a}, B {r.n_b})")
        elif r.comparison is not None and r.verdict != "same":
            out.append(f"serving step {r.step}, level {r.level}: {r.verdict}: {r.comparison.reason}")
    return out


def _secs(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "-"


RepeatA = Annotated[list[str] | None, typer.Option("--repeat-a", help="Another run of A's setup (noise).")]
RepeatB = Annotated[list[str] | None, typer.Option("--repeat-b", help="Another run of B's setup (noise).")]
FloorOpt = Annotated[float, typer.Option("--floor", min=0.0, help="Smallest band, relative.")]
KOpt = Annotated[float, typer.Option("--k", min=0.0, help="Band = k x estimated noise.")]


def compare_cmd(
    run_a: RunArg,
    run_b: RunArg,
    repeat_a: RepeatA = None,
    repeat_b: RepeatB = None,
    floor: FloorOpt = FLOOR,
    k: KOpt = K,
    only_changed: Annotated[bool, typer.Option("--changed", help="Show only rows not 'same'.")] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the comparison as JSON.")
    ] = None,
    store: StoreOpt = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind", help="With a FILE side: its kind, as orch parse --kind (default: told by the text)."
        ),
    ] = None,
    result: Annotated[
        int | None,
        typer.Option(
            "--result", min=1, help="With a FILE side: compare with its result N only (orch parse's #)."
        ),
    ] = None,
) -> int:
    """Compare run B against run A (exit 1 when any row or serving level is worse beyond the noise
    band; a serving level with a worse p99 is 'worse for interactive' even with more throughput).
    One side may be a FILE, a vLLM/SGLang/guidellm result orch parse reads: each of the run's
    serving levels is compared with the file's result at the same concurrency or request rate."""
    file_side = _file_side(run_a, run_b)
    if file_side is not None:
        return _compare_file(run_a, run_b, file_side, repeat_a, repeat_b, floor, k, only_changed, json_out,
                             store, kind, result)  # fmt: skip
    if kind is not None or result is not None:
        raise ConfigError(
            "--kind and --result apply to a FILE side only (a vLLM/SGLang/guidellm result); "
            f"{run_a!r} and {run_b!r} are runs"
        )
    a, b = load_ref(run_a, store), load_ref(run_b, store)
    for rec in (a, b):
        levels = any(lv.summary for s in rec.serving for lv in s.levels)
        if not any(s.rows for s in rec.steps) and not rec.recovery and not levels:
            raise ConfigError(
                f"run {rec.run_id} has nothing to compare: no measurement in {rec.run_dir} "
                f"({rec.status}, {len(rec.steps)} of {len(rec.step_ids)} steps finished)",
                hint="compare runs that measured something (orch runs list)",
            )
    c = compare_runs(
        a,
        b,
        repeats_a=[load_ref(r, store) for r in repeat_a or []],
        repeats_b=[load_ref(r, store) for r in repeat_b or []],
        floor=floor,
        k=k,
    )
    for w in c.warnings:
        err.print(f"warning: {w}", markup=False)
    if c.rows or not (c.recovery or c.serving):
        out.print(render_table(c, only_changed))
    if c.serving:
        out.print(render_serving_table(c, only_changed))
        out.print(
            f"serving band: max({c.floor:.0%}, {c.k:g} x se), se from the robust spread (1.4826 x MAD) of "
            f"the repeats ({c.runs_a} run(s) of A, {c.runs_b} of B) and at least one run's own noise "
            "(its p99's order statistics, its drift over 5 blocks of requests); a worse p99 with more "
            "throughput is 'worse for interactive'",
            markup=False,
        )
        for line in serving_lines(c.serving):
            out.print(line, markup=False)
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


# --- a run against a result from elsewhere (docs/serving.md, "Compare against a result from elsewhere")


def _file_side(run_a: str, run_b: str) -> Literal["a", "b"] | None:
    """Which argument is a file (a result from elsewhere) rather than a run; None for two runs.
    A run is a directory, a run id or a baseline name, never a plain file."""
    fa, fb = Path(run_a).is_file(), Path(run_b).is_file()
    if fa and fb:
        raise ConfigError(
            f"{run_a} and {run_b} are both files: compare a run with a file (orch compare RUN FILE)",
            hint="to read both, use orch parse",
        )
    return "a" if fa else "b" if fb else None


def _compare_file(
    run_a: str,
    run_b: str,
    file_side: Literal["a", "b"],
    repeat_a: list[str] | None,
    repeat_b: list[str] | None,
    floor: float,
    k: float,
    only_changed: bool,
    json_out: Path | None,
    store: str | None,
    kind: str | None,
    pick: int | None,
) -> int:
    path = Path(run_a if file_side == "a" else run_b)
    run_ref = run_b if file_side == "a" else run_a
    if repeat_a if file_side == "a" else repeat_b:
        raise ConfigError(
            f"--repeat-{file_side}: {path} is a result from elsewhere, one result without repeats",
            hint="give repeats of the run's side only",
        )
    parsed = parse_file(path, kind)
    if not parsed.serving:
        raise ConfigError(
            f"{path} is {parsed.kind}, not a serving benchmark result",
            hint="compare with a vLLM, SGLang or guidellm output (orch parse reads it)",
        )
    rec = load_ref(run_ref, store)
    runs = [rec, *(load_ref(r, store) for r in (repeat_b if file_side == "a" else repeat_a) or [])]
    levels = [(step, sums) for (step, _), sums in level_summaries(runs).items()]
    if not levels:
        raise ConfigError(
            f"run {rec.run_id} has no serving level with figures to compare with {path}",
            hint="compare a run with serving steps (orch runs show RUN)",
        )
    try:
        c = compare_foreign(levels, parsed.serving, a=run_a if file_side == "a" else rec.run_id,
                            b=run_b if file_side == "b" else rec.run_id, file_side=file_side, file=str(path),
                            floor=floor, k=k, orch_runs=len(runs), pick=pick)  # fmt: skip
    except ValueError as e:
        raise ConfigError(str(e), hint="orch parse FILE shows what the file states") from e
    out.print(render_foreign_table(c, only_changed))
    for line in foreign_lines(c):
        out.print(line, markup=False)
    if json_out:
        atomic_write(json_out, c.model_dump_json(indent=2) + "\n")
    return EXIT_THRESHOLDS if c.worse else EXIT_OK


def _ffig(f: FigureChange) -> str:
    n = "/".join("?" if x is None else str(x) for x in (f.n_a, f.n_b))
    if f.ratio is None or f.band is None:
        return f"n/a (n={n})"
    return f"{f.ratio - 1:+.1%} ±{f.band:.0%} (n={n})"


def render_foreign_table(c: ForeignComparison, only_changed: bool) -> Table:
    """One row per orch level matched to the file's result: each figure's change B/A with band and n."""
    side = {"a": "A", "b": "B"}
    table = Table(
        title=f"serving: B {c.b} vs A {c.a} ({side[c.file_side]}: a {c.tool} output); "
        "change B/A ± band (n A/B: runs for orch's throughput, samples for a p99; ? not stated)"
    )
    for col in (
        "step",
        "level",
        "file #",
        "tokens/s",
        "TTFT p99",
        "ITL p99",
        "TPOT p99",
        "E2E p99",
        "verdict",
    ):
        table.add_column(col, justify="right" if col.startswith(("tok", "file")) or "p99" in col else "left")
    for r in c.rows:
        if only_changed and r.verdict == "same":
            continue
        table.add_row(r.step, r.level, str(r.result), *(_ffig(f) for f in r.figures),
                      styled(r.verdict, _COLOUR.get(r.verdict, "magenta")))  # fmt: skip
    return table


def foreign_lines(c: ForeignComparison) -> list[str]:
    """What the band is made of, the levels without a match, and one line per row not 'same'."""
    out = [
        f"the file's side ({c.file}) is one result without repeats and states no noise estimate: band "
        f"max({c.floor:.0%}, {c.k:g} x se), se from the orch side alone ({c.orch_runs} run(s): the robust "
        "spread of repeats and each run's own p99 uncertainty and drift), taken for the file's side too"
    ]
    if c.unmatched:
        out.append(f"not compared (no result at that load in {c.file}): {', '.join(c.unmatched)}")
    for r in c.rows:
        if r.verdict != "same":
            out.append(
                f"serving step {r.step}, level {r.level} vs {c.file} #{r.result}: {r.verdict}: {r.reason}"
            )
    return out

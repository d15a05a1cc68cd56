"""CLI commands: scale-test (the main job)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import typer
from rich.table import Table

from orchestrator.cli.common import InventoryOpt, OutOpt, err, out, styled
from orchestrator.cli.plan import GroupOpt, PlanOpt, ladder_options
from orchestrator.inventory import DEFAULT_INVENTORY
from orchestrator.metrics.capacity import capacity_rows
from orchestrator.metrics.cost import cost_at_lines, cost_label
from orchestrator.metrics.serving import prefix_cache_label
from orchestrator.metrics.serving_recovery import recovery_spread
from orchestrator.models.container import ContainerChoice
from orchestrator.models.events import (
    FingerprintChecked,
    RunEvent,
    RunInterrupted,
    RunProgress,
    RunStarted,
    RunWarning,
    StepDone,
    StepState,
    StepSubmitted,
)
from orchestrator.models.plan import PlanOverrides, format_size
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.models.results import Percentiles
from orchestrator.models.run import RunResult
from orchestrator.models.serving_recovery import ServingRecovery, SpreadStat
from orchestrator.models.serving_results import ServingLevelResult, ServingStepResult
from orchestrator.report.common import efficiency_cell, latency_cell, reference_cell
from orchestrator.report.quality import serving_quality_lines
from orchestrator.runs.scale_test import scale_test
from orchestrator.telemetry.power import power_line
from orchestrator.text import plural, seconds


class ProgressPrinter:
    """Listener: one line per state change on stderr (readable live and in a cron log)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.order: list[str] = []

    def event(self, ev: RunEvent) -> None:
        elapsed = f"{time.monotonic() - self.t0:6.1f}s"
        if isinstance(ev, RunStarted):
            self.order = list(ev.steps)
            steps = plural(len(self.order), "step")
            err.print(f"{elapsed} run {ev.run_id}: plan {ev.plan}, {steps} "
                      f"via {ev.backend} -> {ev.run_dir}")  # fmt: skip
            return
        step = getattr(ev, "step", None)
        pos = step or ""
        if step in self.order:
            pos = f"[{self.order.index(step) + 1}/{len(self.order)}] {step}"
        if isinstance(ev, StepSubmitted):
            err.print(f"{elapsed} {pos} submitted as job {ev.job_id}")
        elif isinstance(ev, StepState):
            reason = f" ({ev.reason})" if ev.reason else ""
            err.print(f"{elapsed} {pos} job {ev.job_id} {ev.state}{reason}")
        elif isinstance(ev, StepDone):
            colour = {"pass": "green", "fail": "red", "infra": "magenta"}.get(ev.verdict, "yellow")
            err.print(f"{elapsed} {pos}", styled(ev.verdict, colour))
            for reason in ev.reasons:
                err.print(f"         {reason}", markup=False)
        elif isinstance(ev, FingerprintChecked):
            drift = "; ".join(ev.drift) if ev.drift else "every node unchanged"
            err.print(f"{elapsed} fingerprint against stack {ev.stack}: {drift}", markup=False)
        elif isinstance(ev, RunWarning):
            err.print(f"{elapsed} warning: {ev.message}", markup=False, style="yellow")
        elif isinstance(ev, RunProgress):
            err.print(f"{elapsed} {ev.message}", markup=False)
        elif isinstance(ev, RunInterrupted):
            err.print(f"{elapsed} interrupted; cancelled jobs: {ev.cancelled}")


def _pcts(p: Percentiles) -> str:
    """'p50/p95/p99 (n=N)' in ms, '-' for a percentile not shown (p95 under n=20, p99 under 100)."""

    def one(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    return f"{one(p.p50)}/{one(p.p95)}/{one(p.p99)} (n={p.n})"


def render_serving(run_id: str, serving: list[ServingStepResult]) -> None:
    """The serving steps: per step and load level, TTFT/ITL/TPOT p50/p95/p99 with n, tokens/s,
    SLO attainment, goodput (req/s) and cost per 1M output tokens; then each engine's load times,
    each node's figures (replicas), each cost with its inputs, and the reasons."""
    table = Table(title=f"serving steps of {run_id}")
    cols = ("step", "level", "ok/n", "TTFT ms p50/p95/p99", "ITL ms p50/p95/p99", "TPOT ms p50/p95/p99",
            "out tok/s", "req/s", "SLO att.", "goodput req/s", "cost/1M out", "verdict")  # fmt: skip
    right = {"ok/n", "out tok/s", "req/s", "SLO att.", "goodput req/s"}
    for col in cols:
        table.add_column(col, justify="right" if col in right else "left")
    for res in serving:
        rows: list[ServingLevelResult | None] = [*res.levels] or [None]
        for i, lv in enumerate(rows):
            s = lv.summary if lv else None
            per_m = lv.cost.per_million_output_tokens if lv and lv.cost else None
            table.add_row(
                res.step.id if i == 0 else "",
                lv.level if lv else "-",
                f"{s.ok}/{s.n}" if s else "-",
                _pcts(s.ttft_ms) if s else "-",
                _pcts(s.itl_ms) if s else "-",
                _pcts(s.tpot_ms) if s else "-",
                f"{s.output_tokens_per_s:.4g}" if s and s.output_tokens_per_s is not None else "-",
                f"{s.requests_per_s:.3g}" if s and s.requests_per_s is not None else "-",
                f"{s.slo_attainment:.1%}" if s and s.slo_attainment is not None else "-",
                f"{s.request_goodput:.3g}" if s and s.request_goodput is not None else "-",
                f"{per_m:.4g}" if per_m is not None else "-",
                res.verdict if i == 0 else "",
            )
    out.print(table)
    for res in serving:
        sid = res.step.id
        for e in res.engines:
            health = "-" if e.load_to_health_s is None else f"{e.load_to_health_s:.1f} s"
            first = "-" if e.load_to_first_answer_s is None else f"{e.load_to_first_answer_s:.1f} s"
            log = f", log {e.log}" if e.log and e.job_id else ""
            out.print(f"{sid}: engine on {e.node} ({e.url}): {e.health}; model load time to health {health}, "
                      f"to first answer {first}{log}", markup=False)  # fmt: skip
        for lv in res.levels:
            for node, ns in lv.per_node.items():
                out.print(f"{sid} {lv.level} {node}: {ns.ok}/{ns.n} ok, TTFT {_pcts(ns.ttft_ms)}, "
                          f"ITL {_pcts(ns.itl_ms)}, TPOT {_pcts(ns.tpot_ms)}", markup=False)  # fmt: skip
            for t in lv.summary.per_turn if lv.summary is not None else []:
                turn = f"{sid} {lv.level} turn {t.turn}: {t.ok}/{t.n} ok, TTFT {_pcts(t.ttft_ms)}"
                out.print(turn, markup=False)
            if lv.prefix_cache is not None:
                out.print(f"{sid} {lv.level}: prefix-cache hit rate {prefix_cache_label(lv.prefix_cache)}",
                          markup=False)  # fmt: skip
            if lv.cost is not None:
                source = f"; price from {lv.cost.source}" if lv.cost.source else ""
                out.print(f"{sid} {lv.level}: {cost_label(lv.cost)}{source}", markup=False)
            if lv.power is not None:
                out.print(f"{sid} {lv.level}: {power_line(lv.power)}", markup=False)
            if lv.cost_at is not None:
                for line in cost_at_lines(lv.cost_at):
                    out.print(f"{sid} {lv.level}: {line}", markup=False)
        for line in serving_fault_lines(res):
            out.print(line, markup=False)
        for row in capacity_rows(res.capacity) if res.capacity is not None else []:
            out.print(f"{sid} {row[0]}: {row[1]}; probes {row[2]}; SLO attainment {row[3]}; "
                      f"TTFT {row[4] or '-'}; E2E {row[5] or '-'}; {row[6]}", markup=False)  # fmt: skip
        if res.capacity is not None and res.capacity.cost_at is not None:
            for line in cost_at_lines(res.capacity.cost_at):
                out.print(f"{sid}: {line}", markup=False)
        for line in serving_quality_lines(sid, res.quality) if res.quality is not None else []:
            out.print(line, markup=False)
        for line in [*res.reasons, *res.warnings]:
            out.print(f"{sid}: {line}", markup=False)


def _p99(p: Percentiles | None) -> str:
    if p is None:
        return "- (n=0)"
    return f"{'-' if p.p99 is None else f'{p.p99:.3g}'} ms (n={p.n})"


def _spread(name: str, st: SpreadStat, unit: str = " s") -> str:
    if st.n == 0 or st.min is None or st.median is None or st.max is None:
        return f"{name} - (n=0)"
    return f"{name} {st.min:.3g}/{st.median:.3g}/{st.max:.3g}{unit} (n={st.n})"


def serving_fault_lines(res: ServingStepResult) -> list[str]:
    """A serving step's faults, one line each (kind, target, level, times to first failure /
    first success / steady, failed and aborted requests, TTFT p99 during and after with n), the
    spread over the repeats of each plan fault (min/median/max with n), and the engine restarts."""
    sid, lines = res.step.id, []
    skipped: dict[tuple[str, str, str, str], list[int]] = {}
    for f in res.faults:
        if f.record is None and f.recovery is None and f.outcome.startswith("skipped"):
            skipped.setdefault((f.kind, f.target, f.level, f.outcome), []).append(f.repeat)
            continue
        head = f"{sid} fault {f.kind} {f.target} at {f.level} (repeat {f.repeat}): {f.outcome}"
        r = f.recovery
        if r is None:
            lines.append(head)
            continue
        lines.append(
            f"{head}; {r.status}: to first failure {seconds(r.to_first_failure_s)}, to first success "
            f"{seconds(r.to_first_success_s)}, to steady {seconds(r.to_steady_s)}; failed {r.failed}, "
            f"aborted {r.aborted}; TTFT p99 during {_p99(r.ttft_during_ms)}, after {_p99(r.ttft_after_ms)}"
        )
    for (kind, target, level, outcome), ks in skipped.items():
        which = f"repeat {ks[0]}" if len(ks) == 1 else f"repeats {ks[0]}-{ks[-1]}"
        lines.append(f"{sid} fault {kind} {target} at {level} ({which}): {outcome}")
    groups: dict[tuple[str, str, str], list[ServingRecovery]] = {}
    for f in res.faults:
        if f.recovery is not None:
            groups.setdefault((f.kind, f.target, f.level), []).append(f.recovery)
    for (kind, target, level), recs in groups.items():
        if len(recs) < 2:
            continue
        sp = recovery_spread(recs)
        states = ", ".join(f"{k} {v}" for k, v in sp.statuses.items())
        lines.append(
            f"{sid} fault {kind} {target} at {level}, over {sp.repeats} repeats ({states}), min/median/max: "
            + "; ".join([
                _spread("to first failure", sp.to_first_failure_s),
                _spread("to first success", sp.to_first_success_s),
                _spread("to steady", sp.to_steady_s),
                _spread("outage", sp.outage_s),
                _spread("failed", sp.failed, ""),
            ])
        )  # fmt: skip
    for rs in res.restarts:
        back = None if rs.healthy_at is None else rs.healthy_at - rs.started_at
        up = "not healthy again" if back is None else f"healthy after {back:.2f} s"
        job = f" as job {rs.job_id}" if rs.job_id else ""
        lines.append(f"{sid}: engine on {rs.node} restarted{job} (restart {rs.attempt}), {up}; "
                     f"it ended: {rs.reason}")  # fmt: skip
    return lines


def render_result(result: RunResult) -> None:
    """The final tables: per step and collective, busbw at the largest size, efficiency, verdict;
    then the serving steps (render_serving); then the nodes and the run's verdict."""
    if result.steps or not result.serving:
        _render_ladder(result)
    if result.serving:
        render_serving(result.run_id, result.serving)
    nodes = ", ".join(f"{n}={v}" for n, v in result.nodes.items())
    out.print(f"nodes: {nodes}", markup=False)
    colour = {"accepted": "green", "failed": "red"}.get(result.status, "magenta")
    out.print("verdict:", styled(result.status, colour), f"(exit {result.exit_code}) — {result.run_dir}")


def _render_ladder(result: RunResult) -> None:
    table = Table(title=f"orch scale-test {result.run_id} ({result.plan}, {result.backend})")
    cols = ("step", "ranks", "job", "collective", "size", "busbw GB/s", "eff.", "against", "latency µs",
            "#wrong", "verdict")  # fmt: skip
    for col in cols:
        table.add_column(
            col, justify="right" if col in {"ranks", "size", "busbw GB/s", "eff.", "#wrong"} else "left"
        )
    for res in result.steps:
        colls = res.summary.values() or [None]
        for i, s in enumerate(colls):
            first = i == 0
            table.add_row(
                res.step.id if first else "",
                str(res.step.world_size) if first else "",
                (res.job_id or "-") if first else "",
                s.collective if s else "-",
                format_size(s.size_bytes) if s else "-",
                f"{s.busbw_gbs:.3f}" if s else "-",
                efficiency_cell(s),
                reference_cell(s),
                latency_cell(s),
                str(s.wrong) if s else "-",
                res.verdict if first else "",
            )
    out.print(table)
    for res in result.steps:
        for reason in res.reasons:
            out.print(f"{res.step.id}: {reason}", markup=False)
        for note in res.telemetry.notes if res.telemetry else []:
            out.print(f"{res.step.id}: {note}", markup=False)


@ladder_options
def scale_test_cmd(
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    plan: PlanOpt = None,
    group: GroupOpt = None,
    overrides: PlanOverrides | None = None,
    out_dir: OutOpt = None,
    stack: Annotated[
        str | None,
        typer.Option(
            "--stack", help="Stack to fingerprint the nodes against ('none': skip; default: orch_stack)."
        ),
    ] = None,
    allow_drift: Annotated[
        bool, typer.Option("--allow-drift", help="Run steps on nodes that differ from the stack.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Let plan faults hit more than the safe share of nodes.")
    ] = False,
    concurrent_steps: Annotated[
        bool,
        typer.Option(
            "--concurrent-steps", help="Let steps run together (they distort each other's numbers)."
        ),
    ] = False,
    slurm_mode: Annotated[
        Literal["allocation", "allocation-batch", "per-step"] | None,
        typer.Option(
            "--slurm-mode",
            help="allocation: the ladder in one allocation (salloc), a job step per step started by "
            "orch (default; needs sacct); allocation-batch: the same allocation run by an sbatch'd "
            "driver; per-step: one job per step, for a shared cluster.",
        ),
    ] = None,
    telemetry_interval: Annotated[
        float | None,
        typer.Option(
            "--telemetry-interval",
            min=0,
            max=3600,
            help="Seconds between GPU telemetry samples on each node during a step (0: off; default 1).",
        ),
    ] = None,
    isolate: Annotated[
        bool,
        typer.Option("--isolate", help="When a multi-node step fails its thresholds, isolate on its nodes."),
    ] = False,
    drain_bad: Annotated[
        bool, typer.Option("--drain-bad", help="With --isolate: drain the culprit nodes in Slurm.")
    ] = False,
    container: Annotated[
        ContainerChoice,
        typer.Option(
            "--container",
            help="on: each rank runs in the stack's image with its node's container_runtime; off: from"
            " the stack's tree under /opt; auto: on when the stack names a registry image.",
        ),
    ] = "auto",
) -> int:
    """Run the plan's steps (the collective ladder, serving steps) and give a verdict (exit 0
    accepted, 1 thresholds, 3 infra)."""
    overrides = overrides or PlanOverrides()
    overrides.out_dir = out_dir
    if concurrent_steps:
        overrides.concurrent_steps = True
    overrides.slurm_mode = slurm_mode
    overrides.stack = stack
    overrides.telemetry_interval_s = telemetry_interval
    req = ScaleTestRequest(
        inventory=inventory,
        plan=plan,
        overrides=overrides,
        group=group,
        allow_drift=allow_drift,
        force_faults=force,
        container=container,
    )
    result = scale_test(req, [ProgressPrinter()])
    render_result(result)
    if isolate:
        from orchestrator.cli.isolate import print_round, render_isolation
        from orchestrator.runs.isolate import isolate_after_scale_test

        found = isolate_after_scale_test(result, inventory, print_round, drain_bad=drain_bad, force=force)
        if found is not None:
            render_isolation(found)
    return result.exit_code


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("scale-test")(scale_test_cmd)

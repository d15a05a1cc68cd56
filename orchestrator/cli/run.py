"""CLI commands: scale-test (the main job)."""

from __future__ import annotations

import time
from typing import Annotated, Literal

import typer
from rich.table import Table

from orchestrator.cli.common import err, out, styled
from orchestrator.cli.plan import (
    BackendOpt,
    CollectivesOpt,
    GpusOpt,
    GroupOpt,
    InventoryOpt,
    ItersOpt,
    NodesOpt,
    OutOpt,
    PartitionOpt,
    PlanOpt,
    SizesOpt,
    TimeoutOpt,
    WarmupOpt,
    make_overrides,
)
from orchestrator.inventory import DEFAULT_INVENTORY
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
from orchestrator.models.plan import format_size
from orchestrator.models.run import RunResult
from orchestrator.pipeline import ScaleTestRequest, scale_test
from orchestrator.report.common import efficiency_cell, latency_cell, reference_cell
from orchestrator.text import plural


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


def render_result(result: RunResult) -> None:
    """The final table: per step and collective, busbw at the largest size, efficiency, verdict."""
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
    nodes = ", ".join(f"{n}={v}" for n, v in result.nodes.items())
    out.print(f"nodes: {nodes}", markup=False)
    colour = {"accepted": "green", "failed": "red"}.get(result.status, "magenta")
    out.print("verdict:", styled(result.status, colour), f"(exit {result.exit_code}) — {result.run_dir}")


def scale_test_cmd(
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    plan: PlanOpt = None,
    group: GroupOpt = None,
    nodes: NodesOpt = None,
    gpus_per_node: GpusOpt = None,
    collectives: CollectivesOpt = None,
    sizes: SizesOpt = None,
    iters: ItersOpt = None,
    warmup: WarmupOpt = None,
    backend: BackendOpt = None,
    partition: PartitionOpt = None,
    timeout: TimeoutOpt = None,
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
    """Run the collective benchmark ladder and give a verdict (exit 0 accepted, 1 thresholds, 3 infra)."""
    overrides = make_overrides(
        nodes, gpus_per_node, collectives, sizes, iters, warmup, backend, partition, timeout, out_dir
    )
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

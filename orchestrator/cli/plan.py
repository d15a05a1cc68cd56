"""CLI commands: plan (`orch plan show`).

The option types below (PlanOpt, NodesOpt, ...) and ladder_options are reused by `orch
scale-test`, so the two commands take the same flags with the same help.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import typer
from rich.table import Table

from orchestrator.cli.common import InventoryOpt, err, out
from orchestrator.inventory import DEFAULT_INVENTORY, load_inventory
from orchestrator.metrics.capacity import probe_bound
from orchestrator.models.plan import Plan, PlanOverrides, Step
from orchestrator.models.quality_gate import QualityGate
from orchestrator.models.serving import (
    FixedLengths,
    ServingStep,
    ServingWorkload,
    TokenLengths,
    UniformLengths,
)
from orchestrator.plan import (
    builtin_plans,
    check_serving_steps,
    expand_ladder,
    expand_serving_steps,
    plan_to_yaml,
    resolve_plan,
)
from orchestrator.text import plural
from orchestrator.workloads.quality import BUILTIN_PROMPTS

R = TypeVar("R")

plan_app = typer.Typer(name="plan", help="Test plans: what a scale test runs.", no_args_is_help=True)

PlanOpt = Annotated[
    str | None,
    typer.Option(
        "--plan",
        "-p",
        help="Built-in plan (smoke, acceptance, nightly) or a YAML file.",
        show_default="smoke",
    ),
]
GroupOpt = Annotated[
    str | None, typer.Option("--group", help="Inventory group to run on (default: all nodes).")
]
NodesOpt = Annotated[str | None, typer.Option("--nodes", help="Node counts: 1,2,4 or 1..N or 1..N:x2.")]
GpusOpt = Annotated[
    str | None, typer.Option("--gpus-per-node", help="Ranks (GPUs) per node: 1,2,8 or 1..G:x2 or G.")
]
CollectivesOpt = Annotated[
    str | None, typer.Option("--collectives", help="Comma list, e.g. all_reduce,alltoall.")
]
SizesOpt = Annotated[str | None, typer.Option("--sizes", help="MIN:MAX:xF (8:128M:x2) or one size (1M).")]
ItersOpt = Annotated[int | None, typer.Option("--iters", min=1, help="Timed iterations per size.")]
WarmupOpt = Annotated[int | None, typer.Option("--warmup", min=0, help="Warm-up iterations per size.")]
BackendOpt = Annotated[
    Literal["slurm", "local", "auto"] | None, typer.Option("--backend", help="slurm, local or auto.")
]
PartitionOpt = Annotated[str | None, typer.Option("--partition", help="Slurm partition.")]
TimeoutOpt = Annotated[int | None, typer.Option("--timeout", min=1, help="Time limit of one step, seconds.")]


LADDER_OPTIONS = {
    "nodes": NodesOpt,
    "gpus_per_node": GpusOpt,
    "collectives": CollectivesOpt,
    "sizes": SizesOpt,
    "iters": ItersOpt,
    "warmup": WarmupOpt,
    "backend": BackendOpt,
    "partition": PartitionOpt,
    "timeout": TimeoutOpt,
}
"""The plan's override options that `plan show` and `scale-test` share, by parameter name."""


def ladder_options(command: Callable[..., R]) -> Callable[..., R]:
    """`command` with its parameter `overrides: PlanOverrides` shown to typer as the options of
    LADDER_OPTIONS (--nodes ... --timeout, in that place and order), each None when not given;
    the wrapper builds the PlanOverrides from them and calls command(..., overrides=...)."""
    sig = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    for p in sig.parameters.values():
        if p.name == "overrides":
            params += [inspect.Parameter(n, p.POSITIONAL_OR_KEYWORD, default=None, annotation=a)
                       for n, a in LADDER_OPTIONS.items()]  # fmt: skip
        else:
            params.append(p)

    @functools.wraps(command)
    def with_overrides(**kw: Any) -> R:
        given = {n: kw.pop(n) for n in LADDER_OPTIONS}
        warmup, timeout = given.pop("warmup"), given.pop("timeout")
        return command(**kw, overrides=PlanOverrides(**given, warmup_iters=warmup, timeout_s=timeout))

    # typer reads the options from the signature and their types from the annotations
    with_overrides.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    with_overrides.__annotations__ = {p.name: p.annotation for p in params} | {
        "return": sig.return_annotation
    }
    return with_overrides


@plan_app.command("show")
@ladder_options
def show(
    plan: PlanOpt = None,
    inventory: InventoryOpt = DEFAULT_INVENTORY,
    group: GroupOpt = None,
    overrides: PlanOverrides | None = None,
    as_yaml: Annotated[bool, typer.Option("--yaml", help="Print the resolved plan as YAML.")] = False,
) -> None:
    """Print the resolved plan's steps on the inventory, before anything runs.

    The plan is checked against the inventory in both views (--yaml too): what scale-test would
    refuse, plan show refuses, with the same message and exit code.
    """
    from orchestrator.diagnostics.plan_steps import with_diag_steps

    ov = overrides or PlanOverrides()
    resolved = resolve_plan(plan, ov)
    cluster = load_inventory(inventory)
    for w in cluster.warnings:
        err.print(f"warning: {w}", markup=False, highlight=False, style="yellow")
    steps = with_diag_steps(resolved, cluster, expand_ladder(resolved, cluster, group=group), group=group)
    serving = expand_serving_steps(resolved, cluster, group=group)
    check_serving_steps(resolved, cluster, serving)
    if as_yaml:
        out.out(plan_to_yaml(resolved), highlight=False)
        return
    if steps:
        out.print(steps_table(resolved, steps))
    if resolved.collectives and any(s.diagnostic is None for s in steps):
        out.print(plan_summary(resolved), highlight=False)
    if serving:
        out.print(serving_table(resolved, serving))
        for workload in resolved.serving:
            out.print(serving_summary(workload), highlight=False, markup=False)
    if resolved.quality is not None:
        out.print(quality_summary(resolved.quality), highlight=False, markup=False)
    if resolved.thresholds.detect:
        detect = ", ".join(f"{k} {v:.0%}" for k, v in resolved.thresholds.detect.items())
        out.print(f"migrate compare must detect: {detect} (a wider A-against-A band is blind)",
                  highlight=False, markup=False)  # fmt: skip


@plan_app.command("list")
def list_plans() -> None:
    """List the built-in plans."""
    names = builtin_plans()
    width = max(map(len, names), default=0)
    for name in names:
        out.print(f"{name:{width}s} {resolve_plan(name).description}", highlight=False, markup=False)


def steps_table(plan: Plan, steps: list[Step]) -> Table:
    """One row per step: id, nodes x ranks, world size, node names. Raises nothing."""
    table = Table(title=f"plan {plan.name} — {plural(len(steps), 'step')}")
    for col in ("#", "step", "nodes", "ranks/node", "world", "runs on"):
        table.add_column(col, justify="right" if col in ("#", "nodes", "ranks/node", "world") else "left")
    for s in steps:
        table.add_row(
            f"{'d' if s.diagnostic else ''}{s.index + 1}",
            s.id,
            str(s.nnodes),
            str(s.ranks_per_node),
            str(s.world_size),
            ",".join(s.nodes),
        )
    return table


def plan_summary(plan: Plan) -> str:
    """Collectives, sizes, iterations, timeouts and thresholds in a few lines (a plan with collectives)."""
    sizes = plan.sizes.values()
    th = plan.thresholds
    parts = [f"busbw>={b.min_gbs} GB/s {b.collective}" + (f"@{b.size}B" if b.size else "") for b in th.busbw]
    if th.baseline:
        parts.append(f">={th.baseline.min_fraction:g} x baseline {th.baseline.name}")
    if th.min_scaling_efficiency:
        parts.append(
            f"scaling efficiency>={th.min_scaling_efficiency:g} beyond the noise band (1 node: vs the "
            "fewest ranks above 1; 2+ nodes: vs 2 nodes at the same ranks per node)"
        )
    return "\n".join(
        [
            f"collectives: {', '.join(plan.collectives)}",
            f"sizes: {len(sizes)} from {sizes[0]} to {sizes[-1]} B (x{plan.sizes.factor}), "
            f"dtype {plan.dtype}",
            f"iterations: {plan.warmup_iters} warm-up + {plan.iters} timed, "
            f"check {'on' if plan.check else 'off'}",
            f"backend: {plan.backend}"
            + (f", partition {plan.partition}" if plan.partition else "")
            + f"; on Slurm: {plan.slurm_mode if not plan.concurrent_steps else 'per-step'} mode",
            f"step timeout: {plan.step_timeout_s}s"
            + (f", run timeout {plan.run_timeout_s}s" if plan.run_timeout_s else ""),
            f"steps run {'concurrently on disjoint nodes' if plan.concurrent_steps else 'one at a time'}",
            f"thresholds: {'; '.join(parts) if parts else 'none (correctness only)'}",
        ]
    )


def quality_summary(gate: QualityGate) -> str:
    """The plan's output-quality gate in a few lines: prompts, decoding, floor, thresholds."""
    rules = [f"exact match >= {gate.min_exact_match:.1%}"] if gate.min_exact_match is not None else []
    if gate.min_exact_match_of_floor is not None:
        rules.append(f"exact match >= {gate.min_exact_match_of_floor:g} x the A-against-A floor")
    if gate.tasks is not None:
        rules.append(
            "accuracy not below A's beyond the 95% Wilson interval"
            + (f" minus {gate.max_accuracy_drop:.1%}" if gate.max_accuracy_drop else "")
        )
    return "\n".join(
        [
            f"quality: prompts {gate.prompts or 'built-in (' + BUILTIN_PROMPTS + ')'}"
            + (f", accuracy tasks {gate.tasks}" if gate.tasks else ""),
            f"quality decoding: greedy (temperature 0), seed {gate.seed}, max_tokens {gate.max_tokens}, "
            f"/v1/{'chat/completions' if gate.api == 'chat' else 'completions'}",
            f"quality floor: A against A (A run twice; A at concurrency 1 against {gate.concurrency})",
            f"quality thresholds: {'; '.join(rules)}",
        ]
    )


def serving_table(plan: Plan, steps: list[ServingStep]) -> Table:
    """One row per serving step: id, engine, replicas x nodes x GPUs, load levels, node names."""
    table = Table(title=f"plan {plan.name} — {plural(len(steps), 'serving step')}")
    for col in ("#", "step", "engine", "replicas", "nodes/replica", "gpus/node", "levels", "runs on"):
        table.add_column(
            col, justify="right" if col in ("#", "replicas", "nodes/replica", "gpus/node") else "left"
        )
    for s in steps:
        table.add_row(
            str(s.index + 1), s.id, s.engine, str(s.replicas), str(s.nodes_per_replica),
            str(s.gpus_per_replica_node), " ".join(s.levels), ",".join(s.nodes) or "(external)",
        )  # fmt: skip
    return table


def _lengths(spec: TokenLengths) -> str:
    if isinstance(spec, FixedLengths):
        return str(spec.tokens)
    if isinstance(spec, UniformLengths):
        return f"{spec.min}..{spec.max} uniform"
    return f"from {spec.path} [{spec.field}]"


def _capacity_line(w: ServingWorkload) -> list[str]:
    """The workload's capacity search in one line (none without one)."""
    c = w.load.capacity
    if c is None:
        return []
    return [f"  capacity search: SLO attainment >= {c.target_attainment:.1%} at Poisson rates "
            f"{c.min_rate:g}..{c.max_rate:g}/s, ± {c.precision:g}/s, {c.repeats} repeats of at most "
            f"{probe_bound(c)} probes (docs/serving.md, 'Capacity search')"]  # fmt: skip


def _sessions_line(w: ServingWorkload) -> list[str]:
    """The workload's agentic session level in one line (none without one)."""
    s = w.load.sessions
    return [] if s is None else [f"  sessions {s.level}: {s.sessions} sessions of {s.turns} turns, "
            f"{s.concurrency or s.sessions} at once, system prompt {s.system_prompt_tokens} tokens, "
            f"think time {s.think_time_s:g}s, "
            f"{s.warmup_sessions} warm-up sessions (docs/serving.md, 'Agentic sessions')"]  # fmt: skip


def _procs_line(w: ServingWorkload) -> list[str]:
    """The load generator's processes in one line (none for the default single process)."""
    load = w.load
    if load.procs == 1:
        return []
    auto = " (auto: this controller's cores)" if load.procs == "auto" else ""
    single = ", the session level in one" if load.sessions is not None else ""
    from orchestrator.workloads.loadgen import generator_procs

    return [f"  generator: {generator_procs(load)} processes{auto} per fixed level, rate and capacity "
            f"probe{single} (docs/serving.md, 'Several generator processes')"]  # fmt: skip


def serving_summary(w: ServingWorkload) -> str:
    """A serving workload's model, load, SLOs and thresholds in a few lines. Raises nothing."""
    load, slo, th = w.load, w.slos, w.thresholds
    model = w.model.path or w.url or ""
    rev = f"@{w.model.revision}" if w.model.revision else ""
    counted = " or ".join(
        x
        for x in (
            f"{load.requests} requests" if load.requests else "",
            f"{load.duration_s:g}s" if load.duration_s else "",
        )
        if x
    )
    slos = [
        f"{k.removesuffix('_p99_ms').upper()} p99<={v:g}ms"
        for k, v in slo.model_dump().items()
        if v is not None
    ]
    ths = [f"{k}={v}" for k, v in th.model_dump(exclude_none=True).items()]
    return "\n".join(
        [
            f"serving {w.name}: {w.engine} {model}{rev} as {w.model.served_name}, dtype {w.dtype}, "
            f"tp {w.tensor_parallel} x pp {w.pipeline_parallel}"
            + (f", args {' '.join(w.engine_args)}" if w.engine_args else "")
            + (f", variant {w.variant} (the stack's)" if w.variant else ""),
            f"  load: {load.api}, tokens in {_lengths(load.input_tokens)} / out "
            f"{_lengths(load.output_tokens)}, {counted} per level after {load.warmup_requests} warm-up, "
            f"seed {load.seed}"
            + (f", prompts from {load.prompts.path} [{load.prompts.field}]" if load.prompts else ""),
            *_procs_line(w),
            *_capacity_line(w),
            *_sessions_line(w),
            f"  SLOs (attainment, goodput): {', '.join(slos) or 'none'}; "
            f"thresholds: {', '.join(ths) or 'none'}"
            + (f"; price {w.price_per_node_hour:g}/node-hour" if w.price_per_node_hour else ""),
            f"  restarts: {w.restart.max_restarts} per engine"
            + (f" after {w.restart.delay_s:g}s" if w.restart.delay_s else "")
            + f"; steady after a fault: {w.steady.window} requests ok with TTFT median <= pre-fault "
            f"p95 x {1 + w.steady.tolerance:g}",
        ]
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(plan_app)

"""`orch isolate`: find the bad node or link among nodes, each test a step of the step executor.

A run of its own kind ("isolate") inside RunLifecycle. The search (isolation/search.py) decides
what to test; each test (one node with 2 ranks, a pair, a set) is a step of a short plan (one
collective, one size, a step timeout of a minute at most) run by the step executor
(runs/executor.py: job_spec, the scheduler of make_scheduler, collection and judging), so an
isolation test is run, collected and kept exactly as a ladder step is. A round's steps run
concurrently where their nodes are disjoint (plan.concurrent_steps, `--concurrent`) or one after
another (the default: in the lab they share 2 cores); the mode is journaled and printed.

The pass rule (docs/isolation.md, "The pass rule"; the rules are metrics/decision.py's):
- a single node passes when its step passed (completed, every row, #wrong 0) and its busbw is at
  least (1 - tolerance) x the median single-node busbw of its kind in the round, and at least
  --min-gbs. A single that fails is a suspect; its repeat (the search's confirmation round) is
  held against the singles of its kind that passed before, at r x their median, r = min(1 -
  tolerance, exp(-3 x sigma)), sigma the robust spread (1.4826 x MAD of log busbw) of every
  single its kind gave before, the suspects' first figures included: the node
  is named only when the repeat fails too, beyond the tolerance and beyond its kind's noise band.
  The repeat is a stronger measurement than the test that made the suspect (repeat_settings: 4 x
  the timed iterations, at least 20, and at least 5 warm-ups): on the loaded 8-node lab, 3 timed
  iterations after 1 warm-up of a 2-rank all_reduce at 2M read 0.35-0.80 GB/s on one healthy
  node, the first iterations cold, and a healthy node5 was convicted by two such figures (0.37,
  then 0.19 against a median of 0.51); 20 after 5 read 0.42-0.69 there;
- a multi-node group passes when its step passed and its busbw is at least min_efficiency x the
  reference, the median busbw of the single nodes that passed in the run (the intra-node figure:
  inter-node efficiency against the node alone), and at least --min-gbs. With no single-node
  figure (every node failed alone), only completion and --min-gbs count.
The median, not the best: one single that ran fast (seen on the 8-node lab: 2.1 GB/s among
0.55-1.25) would fail slower healthy nodes alone and healthy groups against it.

`scale-test --isolate` (isolate_after_scale_test) runs it on the nodes of the multi-node steps that
failed their thresholds, as a linked run: its own folder beside the scale-test's, `parent_run` in
its run_started and isolation.json, and a copy of isolation.json in the scale-test's folder.

Results: `isolation_round` and `isolation_result` journal lines, isolation.json in the run folder
(IsolationRun), each test's step folder (steps/<id>/, result.json as a ladder step), and
report.md. `--drain-bad` drains the culprit nodes (runs/drain.py): those confirmed by a repeat
test only; an unconfirmed suspect (failed once, passed its repeat) is reported, never drained.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, EXIT_USAGE, ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.isolation.search import isolate_partitioned, round_bound
from orchestrator.metrics import decision
from orchestrator.models.cluster import Cluster, gpu_model_problem, same_gpu_model
from orchestrator.models.events import Listener, RunStarted
from orchestrator.models.fingerprint import FingerprintSet, gpu_model_of
from orchestrator.models.isolation import (
    Group,
    IsolationRule,
    IsolationRun,
    Mode,
    Outcome,
    Partition,
    Round,
)
from orchestrator.models.plan import Plan, SizeRange, Step
from orchestrator.models.requests import MAX_TIMEOUT_S, IsolateRequest
from orchestrator.models.results import PlanCollective
from orchestrator.models.run import RunResult, StepResult
from orchestrator.report.escape import md
from orchestrator.report.isolation import isolation_markdown as section_markdown
from orchestrator.runs.drain import drain_culprits, drain_reason
from orchestrator.runs.executor import StepExecutor, choose_backend, make_scheduler
from orchestrator.runs.lifecycle import Ending, RunLifecycle
from orchestrator.scheduler.base import backend_traits
from orchestrator.stacks import stack_name, stack_python
from orchestrator.store.load import require_model
from orchestrator.store.rundir import atomic_write, new_run_id

# Kept here for the callers that import them from this module (cli/isolate, runs/node_resume, bench).
__all__ = ["IsolationRun", "Partition", "gpu_model_of"]


def partition_nodes(
    cluster: Cluster, nodes: Sequence[str], known_good: Sequence[str], models: Mapping[str, str] | None = None
) -> list[Partition]:
    """The nodes by kind: gpu_vendor, and the GPU model (the inventory's gpu_model, else models,
    e.g. from a fingerprint; compared without case), in inventory order. CPU nodes (gpu_vendor
    none) are one kind. A node is only ever paired with, and judged against, nodes of its kind."""
    models = models or {}
    kinds: dict[tuple[str, str], Partition] = {}
    for n in cluster.nodes:
        if n.name not in nodes and n.name not in known_good:
            continue
        model = None if n.gpu_vendor == "none" else (n.gpu_model or models.get(n.name))
        key = (n.gpu_vendor, same_gpu_model(model))
        part = kinds.setdefault(key, Partition(vendor=n.gpu_vendor, model=model, nodes=[]))
        (part.nodes if n.name in nodes else part.known_good).append(n.name)
    for part in kinds.values():
        if part.vendor != "none" and part.model is None:
            part.note = "GPU model unknown: set gpu_model in the inventory"
        if len(part.nodes) + len(part.known_good) == 1:
            alone = "one node of this kind: tested alone only, no partner"
            part.note = f"{part.note}; {alone}" if part.note else alone
    return list(kinds.values())


class OneSizeTest(Protocol):
    """What a run of short tests (isolate's, the stragglers matrix's) asks of each test."""

    collective: PlanCollective
    size: int
    warmup_iters: int
    iters: int
    timeout_s: int
    concurrent: bool


def one_size_plan(
    name: str, description: str, req: OneSizeTest, base: Plan | None = None, max_share: float | None = None
) -> Plan:
    """A short plan: one collective at one size, per-step jobs of at most req.timeout_s (base: the
    scale-test plan it follows, for its backend, partition, stack and max_share; without one,
    max_share or the plans' default)."""
    if max_share is None:
        max_share = Plan.model_fields["max_share"].default
    return Plan(
        name=name,
        description=description,
        collectives=[req.collective],
        sizes=SizeRange(min=req.size, max=req.size),
        warmup_iters=req.warmup_iters,
        iters=req.iters,
        step_timeout_s=req.timeout_s,
        concurrent_steps=req.concurrent,
        max_share=base.max_share if base else max_share,
        backend=base.backend if base else "auto",
        partition=base.partition if base else None,
        stack=base.stack if base else None,
        slurm_mode="per-step",
    )


REPEAT_ITERS_FACTOR = 4
REPEAT_MIN_ITERS = 20
REPEAT_MIN_WARMUP = 5


def repeat_settings(iters: int, warmup_iters: int) -> tuple[int, int]:
    """A single's repeat (the test that can name a node): its timed iterations and warm-ups."""
    return max(REPEAT_ITERS_FACTOR * iters, REPEAT_MIN_ITERS), max(warmup_iters, REPEAT_MIN_WARMUP)


def isolation_plan(req: IsolateRequest, base: Plan | None = None) -> Plan:
    """The short plan of isolation tests: one collective at one size, a minute at most per step
    (base: the scale-test plan it follows, for its backend, partition, stack and max_share)."""
    return one_size_plan("isolate", "isolation tests (orch isolate)", req, base, req.max_share)


def rule_text(req: IsolateRequest) -> str:
    floor = f", and >= {req.min_gbs} GB/s" if req.min_gbs else ""
    return (
        f"single node: completes and busbw >= {1 - req.tolerance:.0%} of the round's median single{floor} "
        "(a repeat: or within its kind's noise band, 3 x 1.4826 x MAD of log busbw); named only when "
        f"a repeat of the failing test fails too; group: completes and busbw >= {req.min_efficiency:.0%} "
        f"of the median busbw of the single nodes that passed in the run{floor}"
    )


def test_step(group: Group, cluster: Cluster, plan: Plan, round_no: int, i: int) -> Step:
    """One isolation test as a ladder step: a single node runs 2 ranks (or its GPUs), a group one
    rank per GPU (one per node on CPU nodes)."""
    # In inventory order: Slurm places rank 0 on the first node of its own (sorted) list, and
    # job_spec puts the rendezvous on the step's first node: the two must be the same node.
    order = [n.name for n in cluster.nodes if n.name in group]
    gpus = min(cluster.node(n).gpus_per_node for n in group)
    rpn = max(2, gpus) if len(group) == 1 else gpus
    kind = "single" if len(group) == 1 else "pair" if len(group) == 2 else "set"
    return Step(
        id=f"r{round_no}-t{i + 1}-{kind}",
        index=i,
        nnodes=len(group),
        ranks_per_node=rpn,
        nodes=order,
        world_size=len(group) * rpn,
        collectives=[plan.collectives[0]],
        sizes=[plan.sizes.min],
    )


def judge(
    results: Sequence[StepResult],
    req: IsolateRequest,
    prior: Sequence[float] = (),
    spread: Sequence[float] = (),
) -> list[Outcome]:
    """Each step's outcome by the pass rule (module doc); prior: the busbw of the single nodes that
    passed in earlier rounds (the round's own singles are compared with their median first, and
    those that pass join the groups' reference); spread: every single figure of the kind measured
    in earlier rounds, the suspects' included, whose robust spread (MAD) is the kind's noise band
    at a repeat (prior when empty)."""
    figures = [_busbw(r) for r in results]
    singles = [
        f
        for r, f in zip(results, figures, strict=True)
        if r.step.nnodes == 1 and r.verdict == "pass" and f is not None
    ]
    ratio = 1.0 - req.tolerance
    if singles and prior:  # a repeat (the confirmation round): against the kind's earlier singles,
        ratio = decision.single_ratio(spread or prior, req.tolerance)  # beyond their noise band too
        singles += prior
    mid = statistics.median(singles) if singles else None
    why_of: list[list[str]] = []
    for res, fig in zip(results, figures, strict=True):
        why: list[str] = []
        if res.verdict != "pass":
            why.append(f"step {res.verdict}: " + ("; ".join(res.reasons) or "no result"))
        elif fig is None:
            why.append("no busbw figure")
        else:
            if req.min_gbs is not None and decision.below(fig, req.min_gbs):
                why.append(f"busbw {fig:.4g} < {req.min_gbs} GB/s")
            if res.step.nnodes == 1 and mid and decision.below_share(fig, mid, ratio):
                why.append(f"busbw {fig:.4g} < {ratio:.0%} of the median single ({mid:.4g})")
        why_of.append(why)
    passed = [f for r, f, w in zip(results, figures, why_of, strict=True) if r.step.nnodes == 1 and not w]
    pool = [*prior, *(f for f in passed if f is not None)]
    ref = statistics.median(pool) if pool else None
    outcomes: list[Outcome] = []
    for res, fig, why in zip(results, figures, why_of, strict=True):
        if (
            res.step.nnodes > 1
            and res.verdict == "pass"
            and fig is not None
            and ref
            and decision.below_share(fig, ref, req.min_efficiency)
        ):
            why.append(
                f"efficiency {fig / ref:.1%} < {req.min_efficiency:.0%} of the median single ({ref:.4g})"
            )
        # What the figure was held against, kept with the outcome for the report.
        if res.step.nnodes == 1:
            basis = Outcome(passed=True, against="the round's median single", reference=mid,
                            samples=len(singles), min_ratio=ratio)  # fmt: skip
        else:
            basis = Outcome(passed=True, against="the median single of the run so far", reference=ref,
                            samples=len(pool), min_ratio=req.min_efficiency)  # fmt: skip
        outcomes.append(
            basis.model_copy(
                update={"passed": not why, "figure": fig, "detail": "; ".join(why) or f"step {res.step.id}"}
            )
        )
    return outcomes


def passed_singles(results: Sequence[StepResult], outcomes: Sequence[Outcome]) -> list[float]:
    """The busbw of the round's single nodes that passed: they join the groups' reference."""
    return [
        o.figure
        for res, o in zip(results, outcomes, strict=True)
        if res.step.nnodes == 1 and o.passed and o.figure is not None
    ]


def judge_by_kind(
    results: Sequence[StepResult],
    req: IsolateRequest,
    singles: dict[str, list[float]],
    kind_of: Mapping[str, str],
    measured: dict[str, list[float]],
) -> list[Outcome]:
    """judge() within each partition: a node's single is compared with the singles of its kind,
    a group with the median single of its kind (singles: partition label -> the busbw of its
    single nodes that passed so far, extended here with each round's; measured: the same for every
    single figure, passed or not, the kind's noise sample at a repeat). A round's groups never mix
    kinds (partition_nodes)."""
    outcomes: list[Outcome | None] = [None] * len(results)
    by_kind: dict[str, list[int]] = {}
    for i, res in enumerate(results):
        by_kind.setdefault(kind_of[res.step.nodes[0]], []).append(i)
    for kind, idx in by_kind.items():
        mine = [results[i] for i in idx]
        judged = judge(mine, req, singles.get(kind, []), measured.get(kind, []))
        singles.setdefault(kind, []).extend(passed_singles(mine, judged))
        measured.setdefault(kind, []).extend(
            o.figure for r, o in zip(mine, judged, strict=True) if r.step.nnodes == 1 and o.figure is not None
        )
        for i, o in zip(idx, judged, strict=True):
            outcomes[i] = o
    return [o for o in outcomes if o is not None]


def _busbw(res: StepResult) -> float | None:
    s = next(iter(res.summary.values()), None)
    return s.busbw_gbs if s is not None else None


class _Rounds:
    """The round runner isolate() calls: each round's groups become steps run by the step executor."""

    def __init__(
        self,
        req: IsolateRequest,
        plan: Plan,
        cluster: Cluster,
        life: RunLifecycle,
        python: str,
        env: dict[str, str],
        on_round: Callable[[Round], None],
        parts: Sequence[Partition] = (),
    ) -> None:
        self.req, self.plan, self.cluster, self.life, self.python, self.env = (
            req,
            plan,
            cluster,
            life,
            python,
            env,
        )
        self.backend = choose_backend(plan, cluster)
        self.sched = make_scheduler(self.backend, cluster, plan)
        self.on_round = on_round
        self.index = 0
        self.kind_of = {n: p.label for p in parts for n in (*p.nodes, *p.known_good)}
        # per kind of node: busbw of the single nodes that passed, for the groups' reference
        self.singles: dict[str, list[float]] = {}
        self.measured: dict[str, list[float]] = {}  # every single figure, suspects' too: the noise
        self.mode: Mode = "concurrent" if plan.concurrent_steps else "sequential"

    def __call__(self, groups: Sequence[Group]) -> list[Outcome]:
        self.index += 1
        plan = self.plan
        if any(len(g) == 1 and self.singles.get(self.kind_of[g[0]]) for g in groups):  # a repeat (judge)
            iters, warmup = repeat_settings(plan.iters, plan.warmup_iters)
            plan = plan.model_copy(update={"iters": iters, "warmup_iters": warmup})
        steps = [test_step(g, self.cluster, plan, self.index, i) for i, g in enumerate(groups)]
        self.life.journal(
            "isolation_round_started",
            round=self.index,
            mode=self.mode,
            steps=[s.id for s in steps],
            groups=[list(g) for g in groups],
            iters=plan.iters,
            warmup_iters=plan.warmup_iters,
        )
        runner = StepExecutor(
            plan, self.cluster, steps, self.sched, self.backend, self.life, self.python, self.env
        )
        runner.run()
        return judge_by_kind(runner.results, self.req, self.singles, self.kind_of, self.measured)

    @property
    def reference(self) -> float | None:
        """For the report line: the median busbw of the single nodes that passed so far, over
        every kind (each kind's groups are judged against its own singles' median)."""
        every = [f for fs in self.singles.values() for f in fs]
        return statistics.median(every) if every else None

    def round_done(self, rnd: Round) -> None:
        self.life.journal(
            "isolation_round",
            round=rnd.index,
            mode=self.mode,
            trials=[t.model_dump(mode="json") for t in rnd.trials],
        )
        self.on_round(rnd)


def run_isolation(
    req: IsolateRequest,
    listeners: list[Listener] | None = None,
    on_round: Callable[[Round], None] = lambda _r: None,
    *,
    base_plan: Plan | None = None,
    parent_run: str | None = None,
) -> IsolationRun:
    """Run the isolation search on req.nodes as a run of kind "isolate"; on_round sees each round
    as it ends. base_plan and parent_run: the scale-test it follows (scale-test --isolate).

    Raises ConfigError (unknown node, a backend that runs on one node only, fewer than 2 nodes)
    and Interrupted on Ctrl-C or SIGTERM (jobs cancelled, run_finished journaled)."""
    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    plan = isolation_plan(req, base_plan)
    nodes = req.nodes or [n.name for n in cluster.nodes]
    for n in [*nodes, *req.known_good]:
        cluster.node(n)
    if len(set(nodes) | set(req.known_good)) < 2:
        raise ConfigError("isolation needs at least 2 nodes (suspects and known-good partners)")
    backend = choose_backend(plan, cluster)
    if not backend_traits(backend).multi_node:
        raise ConfigError(f"isolation runs multi-node tests; the {backend} backend runs on one node only")
    parts = partition_nodes(cluster, nodes, req.known_good, req.gpu_models)
    python, env = (req.python, {}) if req.python else stack_python(stack_name(None, plan, cluster))
    run_id = new_run_id("isolate")
    with RunLifecycle.create(req.out_dir, run_id, listeners or [], t0=t0) as life:
        life.write_inputs(plan=plan, inventory=cluster, request=req)
        mode: Mode = "concurrent" if plan.concurrent_steps else "sequential"
        life.started(
            RunStarted(run_id=life.run_id, run_dir=life.root, plan=plan.name, backend=backend, steps=[]),
            kind="isolate",
            nodes=nodes,
            mode=mode,
            parent_run=parent_run,
            rule=rule_text(req),
            partitions=[p.model_dump(mode="json") for p in parts],
        )
        rounds = _Rounds(req, plan, cluster, life, python or sys.executable, env, on_round, parts)
        found = isolate_partitioned(
            [(p.nodes, p.known_good) for p in parts], run_round=rounds, on_round=rounds.round_done
        )
        result = IsolationRun(
            run_id=life.run_id,
            run_dir=life.root,
            parent_run=parent_run,
            mode=mode,
            collective=req.collective,
            size_bytes=req.size,
            rule=rule_text(req),
            rule_params=IsolationRule(
                size_bytes=req.size,
                iters=req.iters,
                warmup_iters=req.warmup_iters,
                repeat_iters=repeat_settings(req.iters, req.warmup_iters)[0],
                repeat_warmup_iters=repeat_settings(req.iters, req.warmup_iters)[1],
                timeout_s=req.timeout_s,
                tolerance=req.tolerance,
                min_efficiency=req.min_efficiency,
                min_gbs=req.min_gbs,
            ),
            reference_gbs=rounds.reference,
            round_bound=max(round_bound(len(p.nodes)) for p in parts),
            partitions=parts,
            isolation=found,
            status="accepted" if not found.culprits and not found.undecided else "failed",
            exit_code=EXIT_OK if not found.culprits and not found.undecided else EXIT_THRESHOLDS,
            wall_s=0.0,
        )
        if req.drain_bad and found.culprits:
            try:
                result.drained = drain_culprits(found, cluster, life.run_id, plan.max_share, force=req.force)
                result.drain_reasons = {
                    n: drain_reason(life.run_id, c.why)
                    for c in found.culprits
                    if c.kind == "node"
                    for n in c.nodes
                    if n in result.drained
                }
            except ConfigError as e:
                result.drain_refused = str(e)
                result.exit_code = EXIT_USAGE
            life.journal("drain", drained=result.drained, refused=result.drain_refused)
        result.wall_s = life.wall_s
        life.journal(
            "isolation_result",
            culprits=[c.model_dump(mode="json") for c in found.culprits],
            unconfirmed=[u.model_dump(mode="json") for u in found.unconfirmed],
            good=found.good,
            undecided=found.undecided,
            rounds=len(found.rounds),
            mode=mode,
            reference_gbs=rounds.reference,
        )
        atomic_write(life.root / "isolation.json", result.model_dump_json(indent=2) + "\n")
        atomic_write(life.root / "report.md", isolation_markdown(result))
        life.finish(Ending(result.status, result.exit_code, result.drain_refused), wall_s=result.wall_s)
        return result


def isolation_markdown(r: IsolationRun) -> str:
    """report.md of an isolate run: the Isolation section of `orch report --format md` (its
    summary, rule, culprits with their evidence, nodes, every round), escaped."""
    return f"# orch isolate {md(r.run_id)}\n\n" + section_markdown(r, r.run_dir) + "\n"


def failed_multinode_nodes(result: RunResult) -> tuple[list[str], list[str]]:
    """(suspects, known good) after a scale-test: the nodes of multi-node steps that failed their
    thresholds, and the nodes of multi-node steps that passed and are in no failing one. Diagnostic
    steps are not collective ones: each judged its nodes on their own (StepResult.diagnostics)."""
    steps = [r for r in result.steps if r.step.nnodes > 1 and r.step.diagnostic is None]
    failed = [r for r in steps if r.verdict == "fail"]
    suspects = sorted({n for r in failed for n in r.step.nodes})
    passed = {n for r in steps if r.verdict == "pass" for n in r.step.nodes}
    return suspects, sorted(passed - set(suspects))


def isolate_after_scale_test(
    result: RunResult,
    inventory: Path,
    on_round: Callable[[Round], None] = lambda _r: None,
    *,
    drain_bad: bool = False,
    force: bool = False,
) -> IsolationRun | None:
    """`scale-test --isolate`: when a multi-node step failed its thresholds, isolate on its nodes
    as a linked run (its own folder beside the scale-test's, parent_run naming the scale-test;
    the scale-test's folder gets a copy of isolation.json). None when no multi-node step failed.
    The tests use the scale-test plan's first collective and its `isolation` section (size: by
    default its largest size up to 64 MiB; timeout: its step timeout up to a minute; the pass
    rule: tolerance, min_efficiency, min_gbs, not the plan's thresholds, whose
    min_scaling_efficiency is against a 2-node step, not against a node alone). Raises as
    run_isolation."""
    suspects, good = failed_multinode_nodes(result)
    if not suspects:
        return None
    base = require_model(Plan, result.run_dir, result.run_dir / "plan.json")
    models: dict[str, str] = {}
    if (result.run_dir / "fingerprint.json").is_file():  # the scale-test's: the GPU models it saw
        fps = require_model(FingerprintSet, result.run_dir, result.run_dir / "fingerprint.json")
        models = {node: gpu_model_of(fp.gpus) for node, fp in fps.nodes.items() if fp.gpus}
    rule = base.isolation
    req = IsolateRequest(
        inventory=inventory,
        nodes=suspects,
        known_good=good,
        collective=base.collectives[0],
        size=rule.size or min(base.sizes.max, 64 * 2**20),
        timeout_s=rule.timeout_s or max(5, min(MAX_TIMEOUT_S, base.step_timeout_s)),
        iters=rule.iters,
        tolerance=rule.tolerance,
        min_efficiency=rule.min_efficiency,
        min_gbs=rule.min_gbs,
        drain_bad=drain_bad,
        force=force,
        out_dir=result.run_dir.parent,
        gpu_models={n: m for n, m in models.items() if gpu_model_problem(m) is None},
    )
    found = run_isolation(req, on_round=on_round, base_plan=base, parent_run=result.run_id)
    atomic_write(result.run_dir / "isolation.json", found.model_dump_json(indent=2) + "\n")
    return found

"""`orch stragglers`: the node-pair matrix, run through Slurm, and the slow nodes it names.

A run of its own kind ("stragglers") inside RunLifecycle. Every pair of nodes of one kind
(gpu_vendor and GPU model, runs/isolate.py::partition_nodes) is a 2-node step of one collective
(sendrecv by default, or alltoall) at one size, run by the same executor isolation uses
(runs/executor.py: job_spec, the scheduler of make_scheduler, collection and judging) in rounds
of disjoint pairs: a round-robin tournament (the circle method), N-1 rounds of N/2 pairs for an
even N, N rounds of (N-1)/2 for an odd N (one node sits each round out). A round's pairs run
concurrently with `--concurrent` (plan concurrent_steps), else one after another (the lab).

On a large cluster `--sample K` runs a bounded, seeded sample: the nodes are shuffled (seed), the
tournament's rounds are shuffled, and rounds are taken until every node is in at least min(K, N-1)
pairs: K rounds for an even N (every node in exactly K pairs), at most K+1 for an odd N (each node
sits out once). At most (K+1) x floor(N/2) pairs instead of N(N-1)/2, and each round is still
disjoint pairs.

The whole schedule is known before the first job: it is written as the run's steps.json, so the
report (`orch report RUN --format html`) reads the pairs' results (steps/<id>/result.json) from
the run folder alone and draws the heatmap (report/stragglers.py, metrics.stragglers).
The verdict uses the same functions: pair_matrix over the pair steps, split_by_kind, and the
robust rule (median + max(k x 1.4826 MAD, 5 % of the median) of the nodes' median pair latency).

Results: `stragglers_round` and `stragglers_result` journal lines, stragglers.json (MatrixRun),
report.md. Exit codes: 0 every node judged and none named; 1 stragglers named, or a pair that
failed, or nodes the rule could not judge (fewer than 3 partners: under 4 nodes of a kind);
2 usage; 3 no pair measured at all (infra). Not resumed: run it again.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.errors import EXIT_INFRA, EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.metrics.stragglers import (
    DEFAULT_FLOOR,
    DEFAULT_K,
    Pair,
    StragglerReport,
    pair_matrix,
    round_robin,
    split_by_kind,
    stragglers,
)
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.events import Listener, RunStarted
from orchestrator.models.isolation import Mode, Partition
from orchestrator.models.plan import Plan, Step
from orchestrator.models.requests import MIN_PARTNERS, StragglersRequest
from orchestrator.models.results import PlanCollective
from orchestrator.models.run import StepResult
from orchestrator.report.sections import Section, sections_markdown
from orchestrator.runs.executor import StepExecutor, choose_backend, make_scheduler, steps_json
from orchestrator.runs.isolate import one_size_plan, partition_nodes, test_step
from orchestrator.runs.lifecycle import Ending, RunLifecycle
from orchestrator.scheduler.base import backend_traits
from orchestrator.stacks import stack_name, stack_python
from orchestrator.store.load import STEPS_FILE
from orchestrator.store.rundir import atomic_write, new_run_id

MatrixCollective = Literal["sendrecv", "alltoall"]


def sample_rounds(nodes: Sequence[str], k: int, seed: int) -> list[list[Pair]]:
    """A seeded sample of the tournament: rounds (of shuffled nodes, in shuffled order) taken until
    every node is in at least min(k, N-1) pairs. Pairs keep the order of `nodes`."""
    if k < 1:
        raise ValueError("k must be at least 1")
    rng = random.Random(seed)  # noqa: S311 - a reproducible sample, not a secret
    shuffled = list(nodes)
    rng.shuffle(shuffled)
    pos = {n: i for i, n in enumerate(nodes)}
    every = [[(a, b) if pos[a] < pos[b] else (b, a) for a, b in r] for r in round_robin(shuffled)]
    rng.shuffle(every)
    want = min(k, len(nodes) - 1)
    count = dict.fromkeys(nodes, 0)
    taken: list[list[Pair]] = []
    for rnd in every:
        if min(count.values(), default=want) >= want:
            break
        taken.append(rnd)
        for a, b in rnd:
            count[a] += 1
            count[b] += 1
    return taken


class KindVerdict(StrictModel):
    """One kind of node: its nodes, and the rule's verdict over its pairs (None: not judged)."""

    label: str
    nodes: list[str]
    report: StragglerReport | None = None
    note: str | None = Field(default=None, description="why the kind was not judged")


class PairFigure(StrictModel):
    a: str
    b: str
    figure: float | None = Field(description="per-iteration latency (us); None: the step failed")
    step: str
    verdict: str


class MatrixRun(StrictModel):
    """stragglers.json: the matrix and what the rule named."""

    run_id: str
    run_dir: Path
    mode: Mode
    collective: PlanCollective
    size_bytes: int
    metric: str
    k: float = DEFAULT_K
    floor: float = DEFAULT_FLOOR
    sample: int | None = None
    seed: int | None = None
    pairs_all: int = Field(description="every pair of nodes of a kind")
    rounds: int
    pairs: list[PairFigure]
    kinds: list[KindVerdict]
    stragglers: list[str]
    failed_pairs: list[list[str]] = Field(default_factory=list)
    not_judged: list[str] = Field(default_factory=list)
    status: Literal["accepted", "failed", "infra"]
    exit_code: int
    wall_s: float

    def sample_line(self) -> str:
        if self.sample is None:
            return f"every pair: {len(self.pairs)} pairs in {self.rounds} rounds"
        return (
            f"sample: {len(self.pairs)} of {self.pairs_all} pairs in {self.rounds} rounds "
            f"(every node in at least {self.sample} pairs where it has that many partners; seed {self.seed})"
        )


def matrix_plan(req: StragglersRequest) -> Plan:
    """The short plan of the matrix: one collective at one size, a minute at most per pair."""
    return one_size_plan("stragglers", "node-pair matrix (orch stragglers)", req)


def schedule(parts: Sequence[Partition], req: StragglersRequest) -> list[list[Pair]]:
    """Each kind's rounds (all pairs, or the sample), merged: round k holds the k-th round of every
    kind (kinds are disjoint, so the round's pairs stay disjoint)."""
    per = [
        sample_rounds(p.nodes, req.sample, req.seed) if req.sample else round_robin(p.nodes)
        for p in parts
        if len(p.nodes) >= 2
    ]
    depth = max((len(r) for r in per), default=0)
    return [[pair for rounds in per if i < len(rounds) for pair in rounds[i]] for i in range(depth)]


def plan_steps(rounds: Sequence[Sequence[Pair]], cluster: Cluster, plan: Plan) -> list[list[Step]]:
    return [
        [test_step(pair, cluster, plan, r + 1, i) for i, pair in enumerate(rnd)]
        for r, rnd in enumerate(rounds)
    ]


def latency(res: StepResult) -> float | None:
    """The pair's figure as pair_matrix reads it (the report's heatmap uses the same)."""
    return pair_matrix([res])[1].get((res.step.nodes[0], res.step.nodes[1]))


def run_stragglers(
    req: StragglersRequest,
    listeners: list[Listener] | None = None,
    on_round: Callable[[int, int, list[StepResult]], None] = lambda _i, _n, _r: None,
) -> MatrixRun:
    """Run the pair matrix as a run of kind "stragglers" and judge it; on_round(index, rounds,
    results) sees each round as it ends.

    Raises ConfigError (an unknown node, a backend that runs on one node only, no kind with two
    nodes) and Interrupted on Ctrl-C or SIGTERM (jobs cancelled, run_finished journaled)."""
    t0 = time.monotonic()
    cluster = load_inventory(req.inventory)
    plan = matrix_plan(req)
    nodes = req.nodes or [n.name for n in cluster.nodes]
    for n in nodes:
        cluster.node(n)
    if len(set(nodes)) != len(nodes):
        raise ConfigError("--nodes lists a node twice")
    backend = choose_backend(plan, cluster)
    if not backend_traits(backend).multi_node:
        raise ConfigError(f"the pair matrix runs 2-node steps; the {backend} backend runs on one node only")
    parts = partition_nodes(cluster, nodes, [])
    if not any(len(p.nodes) >= 2 for p in parts):
        raise ConfigError("the pair matrix needs at least 2 nodes of one kind (gpu_vendor and GPU model)")
    rounds = schedule(parts, req)
    steps = plan_steps(rounds, cluster, plan)
    every = [s for rnd in steps for s in rnd]
    python, env = (req.python, {}) if req.python else stack_python(stack_name(None, plan, cluster))
    mode: Mode = "concurrent" if plan.concurrent_steps else "sequential"
    with RunLifecycle.create(req.out_dir, new_run_id("stragglers"), listeners or [], t0=t0) as life:
        life.write_inputs(plan=plan, inventory=cluster, request=req)
        atomic_write(life.root / STEPS_FILE, steps_json(every))
        life.started(
            RunStarted(
                run_id=life.run_id, run_dir=life.root, plan=plan.name, backend=backend,
                steps=[s.id for s in every],
            ),
            kind="stragglers", nodes=nodes, mode=mode, sample=req.sample, seed=req.seed,
            rounds=[[list(p) for p in rnd] for rnd in rounds],
            partitions=[p.model_dump(mode="json") for p in parts],
        )  # fmt: skip
        sched = make_scheduler(backend, cluster, plan)
        results: list[StepResult] = []
        for i, rnd in enumerate(steps):
            runner = StepExecutor(plan, cluster, rnd, sched, backend, life, python or sys.executable, env)
            runner.run()
            results += runner.results
            life.journal(
                "stragglers_round", round=i + 1, mode=mode,
                pairs=[{"nodes": r.step.nodes, "verdict": r.verdict, "latency_us": latency(r)}
                       for r in runner.results],
            )  # fmt: skip
            on_round(i + 1, len(steps), runner.results)
        result = judge_matrix(req, parts, results, len(rounds), mode, life.run_id, life.root)
        result.wall_s = life.wall_s
        life.journal(
            "stragglers_result", stragglers=result.stragglers, failed_pairs=result.failed_pairs,
            not_judged=result.not_judged, metric=result.metric,
        )  # fmt: skip
        atomic_write(life.root / "stragglers.json", result.model_dump_json(indent=2) + "\n")
        atomic_write(life.root / "report.md", matrix_markdown(result))
        life.finish(Ending(result.status, result.exit_code), wall_s=result.wall_s)
        return result


def judge_matrix(
    req: StragglersRequest,
    parts: Sequence[Partition],
    results: Sequence[StepResult],
    rounds: int,
    mode: Mode,
    run_id: str,
    run_dir: Path,
) -> MatrixRun:
    """The rule per kind over the measured pairs, and the run's status and exit code (module doc)."""
    metric, matrix = pair_matrix(results)
    kind_of = {n: p.label for p in parts for n in p.nodes}
    per, _across = split_by_kind(matrix, kind_of)  # pairs are scheduled within a kind: none across
    kinds: list[KindVerdict] = []
    for p in parts:
        kv = KindVerdict(label=p.label, nodes=list(p.nodes))
        sub = per.get(p.label, {})
        if len(p.nodes) < 2:
            kv.note = "one node of this kind: no partner"
        elif not sub:
            kv.note = "no pair of this kind measured"
        else:
            try:
                kv.report = stragglers(sub, metric=metric or "latency_us")
            except ValueError as e:
                kv.note = f"not judged: {e} (the rule needs {MIN_PARTNERS} partners a node)"
        kinds.append(kv)
    named = [s.node for kv in kinds if kv.report for s in kv.report.stragglers]
    judged = {n for kv in kinds if kv.report for n in kv.report.scores}
    not_judged = [n for p in parts for n in p.nodes if n not in judged]
    pairs = [
        PairFigure(a=r.step.nodes[0], b=r.step.nodes[1], figure=latency(r), step=r.step.id, verdict=r.verdict)
        for r in results
    ]
    failed = [[p.a, p.b] for p in pairs if p.figure is None or p.verdict != "pass"]
    if pairs and all(p.figure is None for p in pairs):
        status: Literal["accepted", "failed", "infra"] = "infra"
        code = EXIT_INFRA
    elif named or failed or not_judged:
        status, code = "failed", EXIT_THRESHOLDS
    else:
        status, code = "accepted", EXIT_OK
    every = sum(len(p.nodes) * (len(p.nodes) - 1) // 2 for p in parts)
    return MatrixRun(
        run_id=run_id, run_dir=run_dir, mode=mode, collective=req.collective, size_bytes=req.size,
        metric=metric or f"{req.collective} latency_us", sample=req.sample,
        seed=req.seed if req.sample else None, pairs_all=every, rounds=rounds, pairs=pairs, kinds=kinds,
        stragglers=named, failed_pairs=failed, not_judged=not_judged, status=status, exit_code=code,
        wall_s=0.0,
    )  # fmt: skip


def _us(v: float) -> str:
    return f"{v:.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def straggler_lines(r: MatrixRun) -> list[str]:
    """The verdict as lines: per kind, the rule's numbers and each straggler against them."""
    lines: list[str] = []
    for kv in r.kinds:
        head = f"{kv.label} ({', '.join(kv.nodes)})"
        if kv.report is None:
            lines.append(f"{head}: {kv.note}")
            continue
        rep = kv.report
        lines.append(
            f"{head}: median {_us(rep.centre)} us, 1.4826 MAD {_us(rep.sigma)} us, bound {_us(rep.bound)} us "
            f"(median + max({rep.k:g} x MAD, {rep.floor:.0%} of the median))"
        )
        for s in rep.stragglers:
            over = (s.score - rep.centre) / rep.sigma if rep.sigma > 0 else None
            lines.append(
                f"  straggler {s.node}: {_us(s.score)} us = "
                + (f"{s.excess:.2f} x the median" if s.excess is not None else "-")
                + (f", {over:.1f} MAD above it" if over is not None else ", MAD 0")
                + f", over {len(s.pairs)} pairs"
            )
        if not rep.stragglers:
            lines.append("  no straggler")
        if rep.too_few:
            lines.append(f"  not judged (under {MIN_PARTNERS} partners): {', '.join(rep.too_few)}")
    if r.failed_pairs:
        lines.append("failed pairs (no figure): " + ", ".join("+".join(p) for p in r.failed_pairs))
    return lines


def matrix_markdown(r: MatrixRun) -> str:
    """report.md of a stragglers run: the verdict, then every pair, as report Sections (rendered by
    report/sections.py, every value escaped)."""
    summary = [
        f"{r.collective} at {r.size_bytes} bytes, 2-node steps; rounds ran {r.mode}; {r.wall_s:.0f} s",
        r.sample_line(),
        f"metric: {r.metric} (larger is worse)",
    ]
    rows = [[f"{p.a}+{p.b}", p.step, p.verdict, "-" if p.figure is None else _us(p.figure)] for p in r.pairs]
    sections = [
        Section(f"orch stragglers {r.run_id}", lines=summary),
        Section("Verdict", lines=straggler_lines(r)),
        Section("Pairs", head=["pair", "step", "verdict", "latency (us)"], rows=rows),
    ]
    return "\n".join(sections_markdown(sections, level=1))

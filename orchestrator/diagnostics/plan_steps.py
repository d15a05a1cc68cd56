"""A plan's diagnostics as steps of its run (docs/diagnostics.md): expanded before the ladder, run by
the step executor like a collective step (runs/executor.py), judged per node.

- ``expand_diag_steps``: one Step per tool that runs on each node (every node of the run), one Step
  per node pair for a perftest test (the straggler pair-rounds, metrics/stragglers.round_robin,
  or each node and the next: ``pairs: ring``). An unknown tool is refused (ConfigError) before a run
  exists.
- ``diag_step_spec``: the step's job (steps.diag_job_spec, steps.perftest_pair_spec).
- ``judge_diag_step``: every task log of the step into one NodeDiag per node (or pair), and the
  step's verdict: a node that fails fails the step; a node without the tool ("not run: no dcgmi on
  node1") or whose output cannot be read makes it infra, never a pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.diagnostics.steps import (
    TOOLS,
    DiagOptions,
    PerftestOptions,
    diag_job_spec,
    perftest_pair_spec,
    read_pair,
    read_step,
)
from orchestrator.errors import ConfigError
from orchestrator.metrics import verdict as V
from orchestrator.metrics.stragglers import Pair, round_robin
from orchestrator.models.cluster import Cluster
from orchestrator.models.diagnostics import PERFTEST_TESTS, NodeDiag, PlanDiagnostic
from orchestrator.models.plan import Plan, Step
from orchestrator.scheduler.base import JobSpec

DEFAULT_BURN_S = 60
DEFAULT_PERFTEST_S = 5


def diag_step_id(d: PlanDiagnostic, pair: Pair | None = None) -> str:
    """`diag-gpu-burn`, or `diag-ib_write_bw-node1-node2` for a pair."""
    return f"diag-{d.tool}" if pair is None else f"diag-{d.tool}-{pair[0]}-{pair[1]}"


def _check(plan: Plan, d: PlanDiagnostic) -> None:
    where = f"plan {plan.name}: diagnostic {d.tool}"
    if not d.over_pairs:
        if d.tool not in TOOLS:
            raise ConfigError(f"{where}: unknown tool", hint=f"one of {', '.join([*TOOLS, *PERFTEST_TESTS])}")
        if d.device is not None or "pairs" in d.model_fields_set:
            raise ConfigError(f"{where}: device and pairs are options of the perftest tests",
                              hint=f"perftest tests: {', '.join(PERFTEST_TESTS)}")  # fmt: skip
    default = DEFAULT_PERFTEST_S if d.over_pairs else DEFAULT_BURN_S if d.tool == "gpu-burn" else 0
    seconds = d.duration_s or default
    if seconds >= plan.step_timeout_s:
        raise ConfigError(f"{where}: {seconds} s does not fit in step_timeout_s {plan.step_timeout_s}",
                          hint="raise step_timeout_s or lower duration_s")  # fmt: skip


def _pairs(d: PlanDiagnostic, nodes: Sequence[str]) -> list[Pair]:
    if len(nodes) < 2:
        return []
    if d.pairs == "ring":
        ring = [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))]
        return ring[:1] if len(nodes) == 2 else ring
    return [p for rnd in round_robin(nodes) for p in rnd]


def expand_diag_steps(plan: Plan, cluster: Cluster, *, group: str | None = None) -> list[Step]:
    """The plan's diagnostics as steps on the nodes of `group` (default: every node), numbered from
    0 (the caller numbers the ladder after them). Raises ConfigError on an unknown tool, an option
    of another tool, a duration that does not fit in step_timeout_s, or a perftest test on one node;
    InventoryError when the group is unknown."""
    if not plan.diagnostics:
        return []
    nodes = [n.name for n in (cluster.select(group) if group else cluster.nodes)]
    steps: list[Step] = []
    for d in plan.diagnostics:
        _check(plan, d)
        if not d.over_pairs:
            units: list[tuple[str, list[str]]] = [(diag_step_id(d), nodes)]
        else:
            pairs = _pairs(d, nodes)
            if not pairs:
                raise ConfigError(f"plan {plan.name}: diagnostic {d.tool} runs over node pairs, and the run "
                                  f"has {len(nodes)} node")  # fmt: skip
            units = [(diag_step_id(d, p), list(p)) for p in pairs]
        for sid, on in units:
            steps.append(Step(id=sid, index=len(steps), nnodes=len(on), ranks_per_node=1, nodes=on,
                              world_size=len(on), collectives=[], sizes=[], diagnostic=d))  # fmt: skip
    return steps


def diag_step_spec(step: Step, plan: Plan, cluster: Cluster, *, name: str, workdir: Path) -> JobSpec:
    """The job of a diagnostic step: the tool once on each node, or a perftest pair."""
    d = step.diagnostic
    if d is None:
        raise ValueError(f"step {step.id} is not a diagnostic step")
    if d.over_pairs:
        opts = PerftestOptions(test=d.tool, device=d.device, size=d.size,
                               duration_s=d.duration_s or DEFAULT_PERFTEST_S)  # fmt: skip
        spec = perftest_pair_spec((step.nodes[0], step.nodes[1]), opts, name=name, step_id=step.id,
                                  workdir=workdir, time_limit_s=plan.step_timeout_s)  # fmt: skip
    else:
        nodes = [cluster.node(n) for n in step.nodes]
        gpus = 0 if any(n.gpu_vendor == "none" for n in nodes) else min(n.gpus_per_node for n in nodes)
        opts_ = DiagOptions(level=d.level, duration_s=d.duration_s or DEFAULT_BURN_S, preset=d.preset)
        spec = diag_job_spec(TOOLS[d.tool], opts_, name=name, step_id=step.id, nodes=step.nodes,
                             workdir=workdir, gpus_per_node=gpus,
                             time_limit_s=plan.step_timeout_s)  # fmt: skip
    return spec.model_copy(update={"partition": plan.partition or cluster.vars.orch_partition})


@dataclass
class DiagJudgement:
    """A diagnostic step's verdict, its reasons, each node's (or pair's) result and the nodes to blame."""

    verdict: V.Verdict
    nodes: list[NodeDiag]
    reasons: list[str] = field(default_factory=list)
    blamed: list[str] = field(default_factory=list)


def judge_diag_step(step: Step, logs: Mapping[str, str]) -> DiagJudgement:
    """Every task log of the step (log name -> text) judged against its thresholds: one NodeDiag per
    node (a node whose log is absent or names no node is unreadable), or one per pair."""
    d = step.diagnostic
    if d is None:
        raise ValueError(f"step {step.id} is not a diagnostic step")
    if d.over_pairs:
        results = [read_pair((step.nodes[0], step.nodes[1]), logs, d.thresholds)]
    else:
        results = read_step(TOOLS[d.tool], logs, d.thresholds)
        results = [r for r in results if r.node in step.nodes]
        seen = {r.node for r in results}
        results += [NodeDiag(node=n, status="unreadable", reasons=["no output from the node"])
                    for n in step.nodes if n not in seen]  # fmt: skip
        results.sort(key=lambda r: step.nodes.index(r.node))
    bad = [r for r in results if r.status != "pass"]
    verdict = V.worst([r.verdict for r in results])
    blamed = [r.node for r in bad] if not d.over_pairs else list(step.nodes) if bad else []
    return DiagJudgement(verdict=verdict, nodes=results, reasons=[r.note for r in bad], blamed=blamed)


def with_diag_steps(
    plan: Plan, cluster: Cluster, ladder: Sequence[Step], *, group: str | None = None
) -> list[Step]:
    """The plan's diagnostic steps (expand_diag_steps), then the ladder: a node is proven before it
    is measured. Each keeps its own numbering (a ladder step's index is still its place in the
    ladder, which a plan fault's `step: N` names). Raises what expand_diag_steps raises."""
    return [*expand_diag_steps(plan, cluster, group=group), *ladder]

"""Migration from stack A to stack B: the compatibility matrix (`orch migrate plan`) and the A/B
decision (interleaved schedule, A-against-A band, changes per size and per serving figure).

The matrix uses the fingerprint's four compatibility verdicts (models/fingerprint.py), read here
as "what it takes to go from A's pin to B's": unchanged, needs config change, needs porting,
unavailable.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.decision import WORSE, Direction, FigureChange, InteractiveVerdict, QualityJudgement
from orchestrator.models.fingerprint import COMPATS, Compat
from orchestrator.models.names import Name

__all__ = ["Compat"]  # the fingerprint's verdict, by the name migrate code uses

Component = Literal[
    "os",
    "driver",
    "runtime",
    "communication library",
    "framework",
    "python",
    "serving engine",
    "kernels/backends",
    "container image",
    "tests",
    "environment",
    "python packages",
]
COMPONENTS: tuple[Component, ...] = (
    "os", "driver", "runtime", "communication library", "framework", "python", "serving engine",
    "kernels/backends", "container image", "tests", "environment", "python packages",
)  # fmt: skip


class NodeValue(StrictModel):
    """What one node has for a row, from its saved fingerprint, judged against A's and B's pins."""

    node: str
    found: str | None = Field(description="the node's value; None when its fingerprint lacks it")
    vs_from: Compat | None = Field(default=None, description="the node against A's pin (is it on A?)")
    vs_to: Compat | None = Field(default=None, description="the node against B's pin (what B takes)")


class MatrixRow(StrictModel):
    """One item of one component: A's pin, B's pin, and what it takes to go from one to the other."""

    component: Component
    item: str = Field(description="e.g. rccl, NCCL_IB_TIMEOUT, numpy")
    from_value: str | None = Field(description="A's pin; None when A has no such item")
    to_value: str | None = Field(description="B's pin; None when B has no such item")
    verdict: Compat
    note: str = ""
    nodes: list[NodeValue] = Field(default_factory=list, description="empty without fingerprints")


class Question(StrictModel):
    """Something orch cannot judge from manifests and fingerprints: the team answers it."""

    topic: str
    question: str


class MigrationMatrix(StrictModel):
    """`orch migrate plan`: every component of A against B, the nodes' values, the open questions."""

    from_stack: str
    to_stack: str
    rows: list[MatrixRow]
    questions: list[Question]
    nodes: list[str] = Field(default_factory=list, description="node columns, in inventory order")
    missing: list[str] = Field(default_factory=list, description="nodes without a saved fingerprint")
    fingerprints_from: str | None = Field(default=None, description="the run folder or file read")

    @property
    def verdict(self) -> Compat:
        """The worst verdict of the rows (unchanged when there are none)."""
        rank = {v: i for i, v in enumerate(COMPATS)}
        return max((r.verdict for r in self.rows), key=lambda v: rank[v], default="unchanged")

    def counts(self) -> dict[str, int]:
        """Rows per verdict, every verdict named (0 included), in COMPATS order."""
        return {v: sum(r.verdict == v for r in self.rows) for v in COMPATS}


# --- the A/B decision ------------------------------------------------------------------------------

Arm = Literal["A", "B", "A-control"]


class Slot(StrictModel):
    """One run of an interleaved A/B schedule: which arm, which round, on which nodes."""

    order: int = Field(ge=0, description="0-based position in time")
    round: int = Field(ge=0)
    arm: Arm
    stack: str
    nodes: list[str]


class SizeChange(StrictModel):
    """One message size of a collective, A against B, with its A-against-A band."""

    size_bytes: int = Field(ge=0)
    n_a: int
    n_b: int
    n_control: int
    control_log_ratio: float | None = Field(description="ln(control / A): the A-against-A gap")
    change: FigureChange


class CollectiveDecision(StrictModel):
    """A collective's verdict: a change counts only beyond the band at >= min_adjacent adjacent sizes."""

    collective: str
    direction: Direction
    flagged_sizes: list[int] = Field(description="sizes in runs of >= min_adjacent adjacent changes")
    lone_sizes: list[int] = Field(description="sizes beyond the band alone (not flagged)")
    min_adjacent: int
    sizes: list[SizeChange]


class ServingDecision(StrictModel):
    """A serving plan's verdict from throughput and p99 latency (metrics/decision.serving_verdict)."""

    interactive: bool
    throughput: FigureChange
    p99: FigureChange
    direction: InteractiveVerdict = Field(description="worse for interactive: more throughput, worse p99")
    reason: str


class SizeSamples(StrictModel):
    """One message size of a collective: the figure (e.g. busbw) of every repeat of each arm."""

    size_bytes: int = Field(ge=0)
    a: list[float]
    b: list[float]
    control: list[float] = Field(default_factory=list, description="the A-against-A control arm")


# --- certify: the proof that a rollback restored the reference -------------------------------------


def arm_ref(stack: str, variant: str | None) -> str:
    """An arm as `--from/--to` give it and the plan runs name it: STACK, or STACK:VARIANT."""
    return f"{stack}:{variant}" if variant else stack


class ArmEngine(StrictModel):
    """One serving workload's engine on one arm, as orch renders it (workloads/engines.py): its
    argv and environment, and the variant read back from them (migrate/arms.py: read_variant)."""

    workload: str
    engine: str
    node: str = Field(description="the node it was rendered for (host and port are that node's)")
    argv: list[str]
    env: dict[str, str] = Field(description="the stack's environment, then the variant's")
    variant: str | None = Field(
        default=None, description="the stack's variant whose settings the argv and env show; None: none does"
    )


class ArmRecord(StrictModel):
    """One arm of a migration (`--from/--to STACK[:VARIANT]`): the stack, the variant asked for,
    and each serving engine as rendered. A fingerprint cannot see a runtime switch (a variant is
    environment and engine arguments, not an installation): this is what says which one ran."""

    side: Literal["A", "B"]
    stack: str
    variant: str | None = Field(default=None, description="asked for: the arm's :VARIANT, else the plan's")
    engines: list[ArmEngine] = Field(default_factory=list, description="none for a collective-only plan")

    @property
    def ref(self) -> str:
        """STACK or STACK:VARIANT, as the command line gives it."""
        return arm_ref(self.stack, self.variant)


class NodeProof(StrictModel):
    """One node after a rollback: its package and environment hashes against the reference's."""

    node: str
    ok: bool
    stack_record: str | None = Field(default=None, description="the stack the node says it runs")
    packages_hash: str | None = None
    env_hash: str | None = None
    expected_packages_hash: str | None = Field(default=None, description="the frozen reference's")
    expected_env_hash: str | None = None
    differences: list[str] = Field(default_factory=list, description="why not ok, one line each")
    notes: list[str] = Field(default_factory=list, description="differences that do not count, and why")


class Certification(StrictModel):
    """Every node of a rollback held to the frozen reference (or, without one, the manifest)."""

    stack: str
    against: Literal["reference", "manifest"]
    reference_from: str | None = Field(
        default=None, description="the migrate run whose freeze is the reference"
    )
    nodes: list[NodeProof]
    arm: ArmRecord | None = Field(
        default=None, description="A's variant and engines as rendered at certify (serving plans)"
    )

    @property
    def ok(self) -> bool:
        return bool(self.nodes) and all(n.ok for n in self.nodes)

    @property
    def failed(self) -> list[str]:
        return [n.node for n in self.nodes if not n.ok]


# --- `orch migrate run`: phases, gates, figures --------------------------------------------------

PhaseName = Literal["freeze", "canary", "scale", "faults", "compare", "rollback", "certify"]
PHASES: tuple[PhaseName, ...] = ("freeze", "canary", "scale", "faults", "compare", "rollback", "certify")
PhaseState = Literal["passed", "failed", "skipped"]


class PhaseRecord(StrictModel):
    """One phase of a migrate run as the journal tells it: its gate and the time it took."""

    phase: PhaseName
    state: PhaseState
    gate: str = Field(description="what the gate checked")
    reason: str = Field(description="why it passed, failed or was skipped")
    wall_s: float = Field(ge=0)
    attempts: int = Field(default=1, ge=1, description="more than 1 when a resume ran it again")


class ServingFigures(StrictModel):
    """One load level of one serving step of a plan run: the figures the compare judges, each p99
    with its n (from the level's LevelSummary, metrics/serving.py)."""

    step: str = Field(description="the plan's step id, without the plan run's label")
    level: str
    n: int = Field(ge=0, description="counted requests")
    ttft_p99_ms: float | None = None
    ttft_n: int = Field(default=0, ge=0)
    itl_p99_ms: float | None = None
    itl_n: int = Field(default=0, ge=0)
    tpot_p99_ms: float | None = None
    tpot_n: int = Field(default=0, ge=0)
    log_se: dict[str, float] = Field(
        default_factory=dict,
        description="each figure's own se of its log within the run (tput: its drift; ttft, itl, tpot: "
        "metrics/serving.run_log_se, the larger of the p99's order statistics and its drift); "
        "empty in runs of older orch",
    )
    output_tokens_per_s: float | None = None
    slo_attainment: float | None = None
    error_rate: float | None = None
    abort_rate: float | None = Field(default=None, description="aborted / n: timed out or cancelled")
    timeout_rate: float | None = Field(
        default=None, description="timed out / n, a part of abort_rate (None in runs of older orch)"
    )
    truncated_rate: float | None = Field(
        default=None, description="answer streams cut short / n, a part of error_rate (None in older runs)"
    )


class PlanRun(StrictModel):
    """One run of the migration's plan on one stack: the verdict and busbw per series and size,
    and the serving figures per step and level.

    A series is a collective on one ladder step (`all_reduce@n3xg1`): A and B are compared series
    by series, size by size; serving steps level by level, figure by figure."""

    label: str
    stack: str
    nodes: list[str]
    verdict: Literal["pass", "fail", "infra", "skipped"]
    reasons: list[str] = Field(default_factory=list)
    busbw: dict[str, dict[int, float]] = Field(default_factory=dict, description="series -> size -> GB/s")
    throughput: float | None = Field(default=None, description="serving: output tokens/s")
    p99_s: float | None = Field(default=None, description="serving: p99 latency, s")
    serving: list[ServingFigures] = Field(default_factory=list, description="per serving step and level")
    quality_outputs: dict[str, str] = Field(
        default_factory=dict,
        description="serving step (without the label) -> the folder of its quality gate's outputs, "
        "relative to the run folder",
    )
    quality: dict[str, QualityJudgement] = Field(
        default_factory=dict, description="serving step -> this run's outputs (B) judged against A's"
    )
    serving_faults: list[ServingFaultFigures] = Field(
        default_factory=list, description="per serving step and injected fault: its outage and time to steady"
    )
    wall_s: float = Field(default=0.0, ge=0)


class ServingFaultFigures(StrictModel):
    """One injection of a plan fault into a serving step of a plan run, as its recovery measured it
    (models/serving_recovery.py): the outage and the time to steady, None where it did not happen."""

    step: str = Field(description="the plan's step id, without the plan run's label")
    fault: str = Field(description="kind and target as the plan writes them, e.g. kill-worker node1:engine")
    level: str
    repeat: int = Field(default=1, ge=1)
    status: str | None = Field(default=None, description="the recovery's status; None: not measured")
    outage_s: float | None = Field(default=None, description="first failure -> first success again")
    to_steady_s: float | None = Field(default=None, description="fault -> the first steady window")


class ServingFaultDecision(StrictModel):
    """One plan fault of one serving step, B's outage and time to steady against A's
    (metrics/decision.recovery_figure_change over the repeats)."""

    step: str
    fault: str
    outage: FigureChange
    to_steady: FigureChange
    verdict: Literal[Direction, "n/a"]
    reason: str


CompareMode = Literal["interleaved", "sequential"]
ServingFigureVerdict = Literal[Direction, "n/a", "blind"]
"""blind: the A-against-A band is wider than the smallest change the plan must detect (`detect:`):
the compare cannot see that change, so the figure is not "same", and B is not accepted on it."""


class ServingFigureDecision(StrictModel):
    """One serving figure of one step and level, B against A with the A-against-A band."""

    figure: str = Field(description="ttft_p99, itl_p99, tpot_p99, output_tokens_per_s, slo_attainment")
    change: FigureChange
    detect: float | None = Field(default=None, description="the plan's smallest change to detect")
    verdict: ServingFigureVerdict


class ServingLevelDecision(StrictModel):
    """One serving step and level: each figure's decision and the level's verdict by the
    interactive rule (metrics/decision.serving_verdict); rates beside, not judged."""

    step: str
    level: str
    figures: list[ServingFigureDecision]
    direction: InteractiveVerdict
    reason: str
    blind: list[str] = Field(default_factory=list, description="figures the compare cannot see")
    rates: dict[str, list[float | None]] = Field(
        default_factory=dict,
        description="error_rate, abort_rate, timeout_rate, truncated_rate: A's runs, then B's",
    )


class Comparison(StrictModel):
    """The compare phase: how A and B were run, each series' decision, the serving decision."""

    mode: CompareMode
    why_mode: str
    order: list[str] = Field(description="the plan runs compared, in time order (labels)")
    rounds: int | None = Field(
        default=None, description="interleaved rounds run (more than asked when a figure was blind)"
    )
    collectives: list[CollectiveDecision] = Field(default_factory=list)
    serving: ServingDecision | None = None
    serving_levels: list[ServingLevelDecision] = Field(default_factory=list)
    quality: dict[str, QualityJudgement] = Field(
        default_factory=dict, description="serving step -> B's outputs judged against A's"
    )

    @property
    def worse(self) -> list[str]:
        """One line per series flagged worse, naming its sizes and the change."""
        out = []
        for d in self.collectives:
            if d.direction != "worse":
                continue
            worst = min(
                (s for s in d.sizes if s.size_bytes in d.flagged_sizes),
                key=lambda s: s.change.log_ratio or 0.0,
            )
            pct = ((worst.change.ratio or 1.0) - 1) * 100
            band = worst.change.log_band or 0.0
            lo, hi = (math.exp(-band) - 1) * 100, (math.exp(band) - 1) * 100
            out.append(
                f"{d.collective} worse at sizes {', '.join(map(str, d.flagged_sizes))} "
                f"(busbw B/A {pct:+.0f}% at {worst.size_bytes} B; {_runs(worst.n_b)} of B against "
                f"{_runs(worst.n_a)} of A; the noise band from A against A is {lo:+.0f}%..{hi:+.0f}%)"
            )
        if self.serving is not None and self.serving.direction in WORSE:
            out.append(f"serving {self.serving.direction}: {self.serving.reason}")
        for lv in self.serving_levels:
            if lv.direction in WORSE:
                out.append(f"serving {lv.step} level {lv.level} {lv.direction}: {lv.reason}")
            if lv.blind:
                out.append(f"serving {lv.step} level {lv.level} blind: {'; '.join(lv.blind)}")
        for step, j in self.quality.items():
            if not j.passed:
                out.append(f"output quality of {step} failed: {'; '.join(j.reasons)}")
        return out


class NodeState(StrictModel):
    """Which stack a node holds, as resume or certify found it."""

    node: str
    holds: Literal["A", "B", "mixed"]
    detail: str = ""


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


class MigrateRun(StrictModel):
    """migrate.json: the whole procedure, its phases, the compare and the rollback proof."""

    run_id: str
    run_dir: Path
    kind: Literal["migrate", "rollback"] = "migrate"
    from_stack: str
    to_stack: str | None = Field(default=None, description="None for `orch rollback`")
    from_variant: Name | None = Field(default=None, description="--from STACK:VARIANT")
    to_variant: Name | None = Field(default=None, description="--to STACK:VARIANT")
    arms: list[ArmRecord] = Field(
        default_factory=list, description="A and B as rendered when the run began (migrate/arms.py)"
    )
    rolled_back_to: ArmRecord | None = Field(
        default=None, description="the arm the rollback phase put back, as rendered then"
    )
    plan: str | None = None
    nodes: list[str]
    canary: list[str] = Field(default_factory=list)
    phases: list[PhaseRecord] = Field(default_factory=list)
    failed_phase: PhaseName | None = None
    failure: str | None = None
    rolled_back: bool = False
    comparison: Comparison | None = None
    certification: Certification | None = None
    plan_runs: list[PlanRun] = Field(default_factory=list)
    fault_compare: list[ServingFaultDecision] = Field(
        default_factory=list, description="the faults phase: B's serving faults against A's (faults-A)"
    )
    resumes: list[list[NodeState]] = Field(default_factory=list, description="what each resume found")
    stopped_playbooks: list[int] = Field(default_factory=list, description="PIDs resume stopped")
    status: Literal["running", "accepted", "failed", "infra", "interrupted"] = Field(
        default="running", description="running until the procedure settles (seen mid-run in migrate.json)"
    )
    exit_code: int = 1
    wall_s: float = 0.0

    @property
    def from_ref(self) -> str:
        """A as --from gave it: STACK or STACK:VARIANT."""
        return arm_ref(self.from_stack, self.from_variant)

    @property
    def to_ref(self) -> str | None:
        """B as --to gave it (None for a rollback)."""
        return arm_ref(self.to_stack, self.to_variant) if self.to_stack else None

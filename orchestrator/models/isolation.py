"""What an isolation search gives back: each test's outcome, the rounds, the culprits and their
evidence (orchestrator.isolation.search makes them), and what an isolate run keeps of them
(isolation.json: IsolationRun, read by the run's report)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import kind_label
from orchestrator.models.results import PlanCollective

Group = tuple[str, ...]
Kind = Literal["single", "pair", "set"]
Purpose = Literal["single", "whole", "half", "cross", "link", "grow", "mix", "confirm"]


class Outcome(StrictModel):
    """What one test of a group gave: pass/fail, and the figure it was judged on."""

    passed: bool
    figure: float | None = Field(default=None, description="e.g. busbw GB/s, or the pair latency")
    detail: str = ""
    against: str = Field(default="", description="what the figure was compared with")
    reference: float | None = Field(default=None, description="that figure; None: none")
    samples: int | None = Field(default=None, ge=0, description="single-node figures in the median")
    min_ratio: float | None = Field(default=None, description="the share of the reference the rule asks for")


class Trial(StrictModel):
    """One test of one group in one round."""

    round: int = Field(ge=1)
    group: list[str]
    kind: Kind
    purpose: Purpose
    outcome: Outcome

    def line(self) -> str:
        """'round 3: pair node6+node1 FAIL (0.61)' for evidence lists and progress output."""
        verdict = "pass" if self.outcome.passed else "FAIL"
        fig = f" ({self.outcome.figure:.4g})" if self.outcome.figure is not None else ""
        return f"round {self.round}: {self.kind} {'+'.join(self.group)} {verdict}{fig}"


class Round(StrictModel):
    index: int = Field(ge=1)
    trials: list[Trial]


class Culprit(StrictModel):
    """A bad node, or a bad link between two nodes that each pass with other partners."""

    kind: Literal["node", "link"]
    nodes: list[str]
    why: str
    evidence: list[Trial] = Field(description="the tests that convicted it, failing and clearing")


class Unconfirmed(StrictModel):
    """A node or link the search would have named, whose repeat test passed: not named (noise),
    reported with both figures."""

    kind: Literal["node", "link"]
    nodes: list[str]
    why: str = Field(description="what the search would have named it for")
    first: Trial = Field(description="the failing test")
    repeat: Trial = Field(description="the same group tested again: it passed")

    def line(self) -> str:
        """'node node1: failed once (0.35), passed the repeat (0.52)'."""

        def fig(t: Trial) -> str:
            return f" ({t.outcome.figure:.4g})" if t.outcome.figure is not None else ""

        return (
            f"{self.kind} {'+'.join(self.nodes)}: failed once{fig(self.first)} in round {self.first.round}, "
            f"passed the repeat{fig(self.repeat)} in round {self.repeat.round}"
        )


class Isolation(StrictModel):
    """The result of a search: rounds in order, culprits (each confirmed by a repeat test), the
    suspects whose repeat passed, and the nodes cleared."""

    rounds: list[Round]
    culprits: list[Culprit]
    unconfirmed: list[Unconfirmed] = Field(
        default_factory=list, description="failed once, passed the repeat: not named"
    )
    good: list[str] = Field(description="nodes that passed a test with others (or were known good)")
    undecided: list[str] = Field(default_factory=list, description="suspects the tests could not settle")


Mode = Literal["concurrent", "sequential"]


class Partition(StrictModel):
    """Nodes of one kind (gpu_vendor and GPU model): isolated among themselves only."""

    vendor: str
    model: str | None = Field(description="as the inventory (or the fingerprint) names it; None: unknown")
    nodes: list[str] = Field(description="the suspects of this kind")
    known_good: list[str] = Field(default_factory=list, description="known-good partners of this kind")
    note: str | None = None

    @property
    def label(self) -> str:
        return kind_label(self.vendor, self.model)


class IsolationRule(StrictModel):
    """The tests' settings and the pass rule's numbers, as the run used them."""

    size_bytes: int = Field(ge=1)
    iters: int = Field(ge=1, description="timed iterations per test: each busbw figure is their mean")
    warmup_iters: int = Field(ge=0)
    repeat_iters: int | None = Field(
        default=None, ge=1, description="a single's repeat: its timed iterations (None: as the others)"
    )
    repeat_warmup_iters: int | None = Field(default=None, ge=0, description="a single's repeat: its warm-ups")
    timeout_s: int = Field(ge=1)
    tolerance: float = Field(description="singles: at least 1 - tolerance of the median single")
    min_efficiency: float = Field(description="groups: at least this share of the median single")
    min_gbs: float | None = None


class IsolationRun(StrictModel):
    """isolation.json: what an isolate run found, and how."""

    run_id: str
    run_dir: Path
    parent_run: str | None = Field(default=None, description="the scale-test whose step failed")
    mode: Mode
    collective: PlanCollective
    size_bytes: int
    rule: str
    rule_params: IsolationRule | None = Field(default=None, description="None: an older run")
    reference_gbs: float | None = Field(
        default=None, description="median busbw of the single nodes that passed in the run"
    )
    round_bound: int = Field(
        description="2 + ceil(log2 N): the rounds one bad node should take (the search, then its repeat)"
    )
    partitions: list[Partition] = Field(
        default_factory=list, description="kinds of node isolated apart, in the same rounds"
    )
    isolation: Isolation
    drained: list[str] = Field(default_factory=list)
    drain_reasons: dict[str, str] = Field(default_factory=dict, description="node -> reason given")
    drain_refused: str | None = None
    status: Literal["accepted", "failed", "infra", "interrupted"]
    exit_code: int
    wall_s: float


def partitions_line(parts: list[Partition]) -> str:
    """'isolated 2 kinds apart: nvidia H100 (node1-…), amd MI300X (…)' for output and report.md."""
    if not parts:
        return "kinds of node: not recorded"
    each = [
        f"{p.label} ({', '.join(p.nodes)}"
        + (f"; partners {', '.join(p.known_good)}" if p.known_good else "")
        + (f"; {p.note}" if p.note else "")
        + ")"
        for p in parts
    ]
    head = "one kind of node" if len(parts) == 1 else f"{len(parts)} kinds of node, isolated apart"
    return f"{head}: " + "; ".join(each)

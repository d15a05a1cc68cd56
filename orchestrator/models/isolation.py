"""What an isolation search gives back: each test's outcome, the rounds, the culprits and their
evidence (orchestrator.isolation.search makes them; the run and its report will keep them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Group = tuple[str, ...]
Kind = Literal["single", "pair", "set"]
Purpose = Literal["single", "whole", "half", "cross", "link", "grow", "mix"]


class Outcome(StrictModel):
    """What one test of a group gave: pass/fail, and the figure it was judged on."""

    passed: bool
    figure: float | None = Field(default=None, description="e.g. busbw GB/s, or the pair latency")
    detail: str = ""


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


class Isolation(StrictModel):
    """The result of a search: rounds in order, culprits, and the nodes cleared."""

    rounds: list[Round]
    culprits: list[Culprit]
    good: list[str] = Field(description="nodes that passed a test with others (or were known good)")
    undecided: list[str] = Field(default_factory=list, description="suspects the tests could not settle")

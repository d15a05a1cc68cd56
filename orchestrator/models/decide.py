"""`orch decide A B`: the decision on one page (report/decide.py builds it, cli/decide.py prints it).

One row per line of the matrix a buyer compares two clusters or stacks by, each with A's and B's
figure, the verdict and why; a row that cannot be judged from the runs is `missing` and says why.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.decision import Direction

RowName = Literal[
    "model compatibility",
    "output quality",
    "latency",
    "capacity at SLO",
    "cost per 1M tokens at capacity",
    "fault behaviour",
    "network",
    "operational effort",
]
"""The rows, in the order the page shows them (report/decide.py ROWS builds each)."""

RowVerdict = Literal[Direction, "missing"]
Overall = Literal[Direction, "undecided"]


class DecideRow(StrictModel):
    """One line of the decision: each side's figure as shown, the call and why."""

    row: RowName
    a: str | None = Field(description="A's figure, as shown; None when A has none")
    b: str | None = Field(description="B's figure, as shown; None when B has none")
    verdict: RowVerdict
    why: str = Field(description="what the call rests on (bands, n), or why the row is missing")
    details: list[str] = Field(default_factory=list, description="the figures behind the row, one a line")


class DecidePage(StrictModel):
    """The whole page: the runs behind each side, the rows and the overall call."""

    a: str = Field(description="A's run id (the first of its runs)")
    b: str
    runs_a: list[str] = Field(description="every run of A (repeats after the first)")
    runs_b: list[str]
    plan_a: str
    plan_b: str
    rows: list[DecideRow]
    overall: Overall
    why: str = Field(description="the rule's answer in words: the rows that made it, or those missing")

    @property
    def missing(self) -> list[str]:
        return [r.row for r in self.rows if r.verdict == "missing"]

"""What one run of a GPU or NIC diagnostic said on one node: checks with a status, figures with a unit.

The parsers (orchestrator/provision/diagtools.py) fill these from each tool's own output; the figures
keep the value and unit as printed, so that a figure can be checked against the raw log it came from.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

DiagStatus = Literal["pass", "fail", "warn", "skip"]


class DiagCheck(StrictModel):
    """One verdict the tool printed (a test, a GPU's burn result)."""

    name: str
    status: DiagStatus
    gpu: int | None = Field(default=None, description="the GPU index when the verdict is per GPU")
    detail: str | None = None


class DiagFigure(StrictModel):
    """One number the tool printed, as printed: the value and its unit."""

    name: str
    value: float
    unit: str
    gpu: int | None = Field(default=None, description="the GPU index when the figure is per GPU")
    where: str | None = Field(default=None, description="what else places it: a matrix row, a size, a path")


class DiagReport(StrictModel):
    """One diagnostic tool's output on one node."""

    tool: str
    version: str | None = None
    node: str | None = None
    checks: list[DiagCheck] = Field(default_factory=list)
    figures: list[DiagFigure] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        """No check failed (warnings and skips do not fail a node)."""
        return all(c.status != "fail" for c in self.checks)

    def figure(self, name: str, *, gpu: int | None = None, where: str | None = None) -> DiagFigure:
        """The one figure of that name (and GPU, and place); raises KeyError naming what is missing."""
        found = [f for f in self.figures if f.name == name and f.gpu == gpu and f.where == where]
        if len(found) != 1:
            raise KeyError(f"{self.tool}: {len(found)} figures named {name!r} (gpu {gpu}, {where})")
        return found[0]

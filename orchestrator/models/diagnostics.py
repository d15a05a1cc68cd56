"""What one run of a GPU or NIC diagnostic said on one node: checks with a status, figures with a unit.

The parsers (orchestrator/provision/diagtools.py) fill these from each tool's own output; the figures
keep the value and unit as printed, so that a figure can be checked against the raw log it came from.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.names import Name
from orchestrator.models.results import Verdict

DiagStatus = Literal["pass", "fail", "warn", "skip"]
PERFTEST_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
"""The perftest tests a plan may run over node pairs (the others run once on each node)."""
PerftestTest = Literal["ib_write_bw", "ib_read_bw", "ib_send_bw"]


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


class DiagThreshold(StrictModel):
    """A limit on one figure of one tool: the figure fails below min or above max."""

    figure: str
    where: str | None = None
    min: float | None = None
    max: float | None = None


NodeStatus = Literal["pass", "fail", "missing", "unreadable"]
# what a node's status makes of its step (the worst one wins): a node without the tool, or whose
# output cannot be read, was not judged: never a pass, and not the node's failure either
NODE_VERDICT: dict[NodeStatus, Verdict] = {
    "pass": "pass", "fail": "fail", "missing": "infra", "unreadable": "infra",
}  # fmt: skip


class NodeDiag(StrictModel):
    """One node's (or one perftest pair's, named 'server-client') result of a diagnostic step."""

    node: str
    status: NodeStatus
    reasons: list[str] = Field(default_factory=list)
    report: DiagReport | None = None

    @property
    def verdict(self) -> Verdict:
        """The node's verdict (NODE_VERDICT)."""
        return NODE_VERDICT[self.status]

    @property
    def note(self) -> str:
        """One line for a report or a step's reasons: 'not run: no dcgmi on node1', 'node2: fail: ...'."""
        if self.status == "missing":
            return f"not run: {'; '.join(self.reasons)}"
        return f"{self.node}: {self.status}: {'; '.join(self.reasons) or 'no reason given'}"


class PlanDiagnostic(StrictModel):
    """One diagnostic a plan runs (docs/diagnostics.md): a registered tool once on every node
    (diagnostics/steps.py TOOLS; an unknown name is refused when the plan meets a cluster), or a
    perftest test over node pairs. Its values reach the nodes as argv (quoted by the scheduler's
    `sh` filter), never inside a script's text."""

    tool: Name = Field(description="dcgmi-diag, gpu-burn, nvbandwidth, transferbench, ib_write_bw ...")
    level: int = Field(default=1, ge=1, le=4, description="dcgmi diag -r LEVEL")
    duration_s: int | None = Field(
        default=None, ge=1, le=86_400, description="gpu-burn's burn time (default 60), perftest's -D (5)"
    )
    preset: Name = Field(
        default="p2p", description="TransferBench's preset (p2p, a2a ...); rvs: a suite's conf (gst_single)"
    )
    pairs: Literal["all", "ring"] = Field(
        default="all",
        description="perftest: every pair, in the straggler pair-rounds (all); each node and the next (ring)",
    )
    device: Name | None = Field(default=None, description="perftest -d: the RDMA device; None: the first")
    size: int = Field(default=1 << 20, ge=1, le=1 << 30, description="perftest -s: message size in bytes")
    thresholds: list[DiagThreshold] = Field(default_factory=list)

    @property
    def over_pairs(self) -> bool:
        """Whether it runs over node pairs (a perftest test) rather than once on each node."""
        return self.tool in PERFTEST_TESTS

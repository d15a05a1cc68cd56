"""The fleet baseline (docs/fleet.md): each kind of node's figures over its own certified nodes,
and the nodes whose figure lies below their kind's band (certs/fleet.py builds both)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, Field

from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import kind_label

Scope = Literal["single", "pair"]
"""single: a node alone (its ranks on one node); pair: two nodes of a kind together, over the
fabric (a fabric throttle moves pair figures and not single ones)."""


class NodeSample(StrictModel):
    """One stored busbw figure of a passed single-node or node-pair step (ResultsStore.node_samples)."""

    run_id: str
    started_at: datetime | None
    step_id: str
    nodes: list[str] = Field(min_length=1, max_length=2)
    ranks_per_node: int = Field(ge=1)
    collective: str
    size_bytes: int = Field(ge=0)
    busbw_gbs: float


class NodeKind(StrictModel):
    """A node's kind in one run: the inventory's gpu_vendor, and its GPU model (the inventory's
    gpu_model, else the fingerprint's GPU names)."""

    vendor: str
    model: str | None = None

    @property
    def label(self) -> str:
        return kind_label(self.vendor, self.model)


class FleetFigure(StrictModel):
    """One figure of one kind at one size: the median over the kind's certified nodes (each node's
    own figure: the median of its samples in its newest certified run) and its robust spread."""

    kind: str = Field(description="'nvidia H100', 'amd MI300X', 'cpu'")
    scope: Scope
    collective: str
    ranks_per_node: int = Field(ge=1)
    size_bytes: int = Field(ge=0)
    nodes: int = Field(ge=1, description="certified nodes in the figure")
    median_gbs: float
    mad: float = Field(ge=0, description="median absolute deviation of ln busbw (a relative spread)")
    sigma: float = Field(ge=0, description="1.4826 x mad: the robust standard deviation of ln busbw")


class FleetBaseline(StrictModel):
    """What `orch fleet baseline` builds and stores; sha256 covers every field but itself and
    built_at (the same figures and rule give the same hash)."""

    sha256: str = Field(default="", description="'sha256:' + hex digest (certs.digest) of the rest")
    built_at: AwareDatetime
    k: float = Field(gt=0, description="an outlier lies below median x exp(-max(ln(1 + floor), k x sigma))")
    floor: float = Field(ge=0, description="the least band, a share of the median")
    runs: list[str] = Field(description="the stored runs whose certified figures it holds")
    figures: list[FleetFigure]
    notes: list[str] = Field(default_factory=list, description="what was left out, and why")


class FleetOutlier(StrictModel):
    """A node's figure below its kind's band: named even when it passed every fixed threshold."""

    node: str
    figure: FleetFigure = Field(description="its kind's figure in the baseline: median, MAD")
    value_gbs: float = Field(description="the node's figure: median of its samples in its newest run")
    run_id: str = Field(description="the run the node's figure comes from")
    k: float
    limit_gbs: float = Field(description="below this the node is an outlier")

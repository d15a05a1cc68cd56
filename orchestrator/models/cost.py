"""What running a service costs (docs/serving.md, "Cost at a rate, by part"): the cost model a
plan gives, and the cost at a request rate that orchestrator.metrics.cost derives from it.

Every part is per node and converted to per hour of the nodes that serve. A part the model does not
give is named missing, never counted as zero; a total over missing parts says it is partial.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from orchestrator.models.base import StrictModel

MONTH_HOURS = 730.0
"""Hours in a month: 365 x 24 / 12, the month of every per-month price and failure rate."""

CostPartName = Literal[
    "node-hour", "hardware", "network", "storage", "licences", "staff", "energy", "downtime"
]
"""The parts of a cost, in the order they are shown. node-hour is an all-in price (a rental)."""

IN_NODE_HOUR: tuple[CostPartName, ...] = ("hardware", "network", "storage", "licences", "energy")
"""The parts a node-hour price (a rental) includes; staff and downtime stay the user's own."""

CostPartStatus = Literal["given", "measured", "included", "missing"]
"""given: from prices alone; measured: from a figure of the run (watts, outage) and prices;
included: inside the node-hour price; missing: not known, named, not counted."""


class CostModel(StrictModel):
    """The prices of running one node; every field optional (a part not given is missing)."""

    node_hour: float | None = Field(
        default=None,
        gt=0,
        description="an all-in price of one node for one hour (a rental): it includes hardware, network, "
        "storage, licences and energy",
    )
    hardware: float | None = Field(default=None, gt=0, description="purchase price of one node")
    amortisation_months: float | None = Field(
        default=None, gt=0, le=240, description="months over which the hardware is written off"
    )
    network_per_month: float | None = Field(default=None, ge=0, description="per node")
    storage_per_month: float | None = Field(default=None, ge=0, description="per node")
    licences_per_month: float | None = Field(default=None, ge=0, description="licences and support, per node")
    staff_per_month: float | None = Field(default=None, ge=0, description="the staff's cost, per node")
    energy_per_kwh: float | None = Field(default=None, gt=0, description="price of one kWh")
    pue: float | None = Field(
        default=None, ge=1, le=5, description="power usage effectiveness of the site (facility / IT power)"
    )
    failures_per_month: float | None = Field(
        default=None, ge=0, description="expected failures of one node per month (downtime = these x outage)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> CostModel:
        if (self.hardware is None) != (self.amortisation_months is None):
            raise ValueError("cost: hardware and amortisation_months go together")
        if self.node_hour is not None:
            both = [f for f in ("hardware", "network_per_month", "storage_per_month", "licences_per_month",
                                "energy_per_kwh", "pue") if getattr(self, f) is not None]  # fmt: skip
            if both:
                raise ValueError(
                    f"cost: node_hour includes hardware, network, storage, licences and energy; "
                    f"drop {', '.join(both)} or node_hour"
                )
        return self


class CostPart(StrictModel):
    """One part of the cost, for the nodes that serve, per hour; None when missing."""

    name: CostPartName
    status: CostPartStatus
    per_hour: float | None = Field(ge=0, description="None when missing or included")
    basis: str = Field(description="the arithmetic, or why the part is missing")


class CostAtRate(StrictModel):
    """The cost of serving at one rate: every part, the total per hour, per successful request and
    per 1M output tokens (metrics.cost.cost_at)."""

    nodes: int = Field(ge=1)
    rate: str = Field(description="which rate: a level's measured rate, or the capacity")
    requests_per_s: float | None = Field(ge=0, description="successful requests per second at the rate")
    output_tokens_per_s: float | None = Field(ge=0, description="output tokens per second at the rate")
    parts: list[CostPart]
    per_hour: float = Field(ge=0, description="the sum of the known parts")
    missing: list[CostPartName] = Field(description="the parts not known: the total is partial without them")
    per_request: float | None = Field(description="None without a successful request per second")
    per_million_output_tokens: float | None = Field(description="None without an output token per second")

    @property
    def complete(self) -> bool:
        return not self.missing

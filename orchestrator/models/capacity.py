"""What a capacity search finds (orchestrator.metrics.capacity decides, runs/capacity.py drives):
the highest Poisson rate at which SLO attainment stays at or above the target, ± the search's
precision, repeated on several seeds with the spread shown, or why no capacity is reported.

A probe is one open-loop level at one rate, its records in the step's folder like any level's.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.serving import CapacitySearch
from orchestrator.models.serving_results import LevelSummary

SearchStatus = Literal["found", "below_min", "at_least_max", "generator_limited", "incomplete"]
"""found: capacity lies in [capacity, upper) with upper - capacity <= precision; below_min: even
min_rate missed the target; at_least_max: max_rate met it (the capacity is at least max_rate);
generator_limited: the load generator fell behind its schedule, so the search refused to go on;
incomplete: the search was stopped before it ended (the step's time limit, an interruption)."""


class CapacityProbe(StrictModel):
    """One probe: an open-loop level at `rate`, judged against the target attainment."""

    rate: float = Field(gt=0, description="requests/s of the Poisson schedule")
    seed: int = Field(ge=0, description="the schedule's seed")
    records: str | None = Field(default=None, description="its records file, relative to the run directory")
    planned: int = Field(ge=1, description="counted requests the probe was to send")
    n: int = Field(ge=0, description="counted requests that ended (fewer when it stopped early)")
    good: int = Field(ge=0, description="counted requests that succeeded and met every SLO")
    attainment: float | None = Field(description="good / n; None when no counted request ended")
    met: bool = Field(description="attainment >= target over the whole planned count")
    stopped_early: bool = Field(
        default=False, description="stopped once attainment could no longer reach the target"
    )
    lateness_p95_ms: float | None = Field(
        default=None, description="p95 of send - scheduled over its counted requests: the generator's lag"
    )
    generator_limit: str | None = Field(
        default=None, description="why the load generator, not the engine, limited this probe"
    )
    summary: LevelSummary | None = Field(default=None, description="its figures (p50/p95/p99, attainment)")


class CapacityRepeat(StrictModel):
    """One whole search (bracket, then bisect) on one seed."""

    repeat: int = Field(ge=0)
    status: SearchStatus
    capacity: float | None = Field(description="the highest rate that met the target (None: none did)")
    upper: float | None = Field(description="the lowest rate that missed it (None: none did)")
    probes: list[CapacityProbe] = Field(default_factory=list)
    reason: str = Field(description="what the search found or why it refused, one line")


class CapacityResult(StrictModel):
    """A serving step's capacity: the median of its repeats' capacities, ± precision, with the spread
    between repeats; or none, with the reason (refused when any repeat was generator-limited)."""

    search: CapacitySearch
    probe_bound: int = Field(ge=2, description="2 + ceil(log2((max_rate - min_rate) / precision)) per repeat")
    repeats: list[CapacityRepeat] = Field(default_factory=list)
    capacity: float | None = Field(default=None, description="requests/s; None when not reported")
    spread: float | None = Field(default=None, description="largest minus smallest repeat capacity")
    refused: str | None = Field(default=None, description="why no capacity is reported")

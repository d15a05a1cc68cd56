"""What a fault during a serving step did to the service: the outage and the way back, from the
request records (orchestrator.metrics.serving_recovery computes it; runs/serving.py stores it in
ServingStepResult.faults).

All times are seconds after the fault was injected (``injected_at``, wall clock of the controller,
the same clock as RequestRecord's times). None means the event did not happen within the records
(no request failed; the service never answered again; it never got back to steady state).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.decision import RecoveryStatus, recovery_word
from orchestrator.models.results import Percentiles


class SteadyRule(StrictModel):
    """When the service counts as back to steady state (docs/serving.md, "Faults during serving").

    The pre-fault band is taken from the last ``window`` successful counted requests sent before the
    fault: its TTFT p95 (or the largest when fewer than 20) times (1 + ``tolerance``). The service is
    steady again at the send time of the first request that starts a run of ``window`` consecutive
    requests (by send time) which all succeeded and whose TTFT median is within that band.
    """

    window: int = Field(default=20, ge=5, le=1000, description="requests in the sliding window")
    tolerance: float = Field(default=0.5, ge=0, le=10, description="headroom over the pre-fault TTFT p95")


class ServingRecovery(StrictModel):
    """The outage one fault caused, measured from the request records of its level."""

    level: str = Field(description="the load level running when the fault was injected")
    rule: SteadyRule
    pre_fault_n: int = Field(ge=0, description="successful requests that made the pre-fault band")
    pre_fault_ttft_band_ms: float | None = Field(
        description="upper edge of the pre-fault TTFT band; None: no request before"
    )
    to_first_failure_s: float | None = Field(description="fault → end of the first failed or aborted request")
    to_first_success_s: float | None = Field(
        description="fault → end of the first successful request sent after the first failure"
    )
    to_steady_s: float | None = Field(
        description="fault → send of the first request of the first steady window"
    )
    outage_s: float | None = Field(description="first failure → first success again (end times)")
    failed: int = Field(
        ge=0, description="requests that failed between the fault and steady state (or the level's end)"
    )
    aborted: int = Field(ge=0, description="requests aborted in that span")
    ttft_during_ms: Percentiles | None = Field(
        description="TTFT of requests sent between the fault and steady state"
    )
    ttft_after_ms: Percentiles | None = Field(description="TTFT of requests sent after steady state")
    status: RecoveryStatus = Field(
        description="recovered: steady again; not-recovered: not within the level; no-interruption: "
        "nothing failed and TTFT stayed in the band (older versions wrote no-impact); no-data: no counted "
        "request around the fault"
    )


class EngineRestart(StrictModel):
    """The restart policy at work: an engine ended during a step and orch started it again."""

    node: str
    ended_at: float = Field(description="wall clock when orch saw the engine gone")
    reason: str = Field(description="how it ended: exit code, job state")
    attempt: int = Field(ge=1, description="1 for the first restart")
    started_at: float
    healthy_at: float | None = Field(description="its /health answered 200 again; None: it did not")
    job_id: str | None = None


class ServingFaultResult(StrictModel):
    """One injection of a plan fault into a serving step, and what it did."""

    kind: str = Field(description="the fault kind (kill-worker, pause-worker, link-delay, ...)")
    target: str = Field(description="as written in the plan: node1:engine")
    repeat: int = Field(ge=1, description="1 for the first injection of this plan fault")
    level: str
    injected_at: float
    reverted_at: float | None = Field(
        default=None,
        description="when its hold ended: reverted (outcome reverted), or for a kill or a restart, which "
        "nothing undoes (outcome done), the end of its duration",
    )
    outcome: str = Field(description="the fault engine record's outcome (reverted, done, failed, ...)")
    record: str | None = Field(default=None, description="its record file, relative to the run directory")
    restarts: list[EngineRestart] = Field(default_factory=list)
    recovery: ServingRecovery | None = None


class SpreadStat(StrictModel):
    """One recovery figure over the repeats that had it (None where it did not happen)."""

    n: int = Field(ge=0, description="repeats that had the figure")
    min: float | None = None
    median: float | None = None
    max: float | None = None


class RecoverySpread(StrictModel):
    """The spread of one plan fault's recovery figures over its repeats
    (orchestrator.metrics.serving_recovery.recovery_spread)."""

    repeats: int = Field(ge=0, description="repeats with a recovery measurement")
    statuses: dict[str, int] = Field(default_factory=dict, description="repeats per status")

    @field_validator("statuses", mode="before")
    @classmethod
    def _one_spelling(cls, v: Any) -> Any:
        """Counts stored by older versions under an old spelling (no-impact) count under the one spelling."""
        if not isinstance(v, dict) or not all(isinstance(n, int) for n in v.values()):
            return v  # validation says what is wrong
        out: dict[Any, int] = {}
        for key, n in v.items():
            out[recovery_word(key)] = out.get(recovery_word(key), 0) + n
        return dict(sorted(out.items()))

    to_first_failure_s: SpreadStat
    to_first_success_s: SpreadStat
    to_steady_s: SpreadStat
    outage_s: SpreadStat
    failed: SpreadStat
    aborted: SpreadStat

"""Fault and recovery records as the fault stage writes them into the run directory.

Contract (for the fault engine): one file per injected fault, `runs/<id>/recovery/<fault_id>.json`,
holding a RecoveryRecord, written atomically (orchestrator.store.rundir.atomic_write) once the
fault has been reverted and its timings are known. Repeats of the same fault on the same step are
separate records with the same `fault` name and increasing `repeat`. Reports, the store and
`orch compare` read these files and nothing else.

Times: `*_s` fields are seconds from the injection instant on orch's monotonic clock (node clocks
corrected by the measured offset); heartbeats carry the same relative time.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.decision import RecoveryOutcome, RecoveryStatus


class Heartbeat(StrictModel):
    """One step of the recovery probe as a rank reported it."""

    rank: int = Field(ge=0)
    step: int = Field(ge=0, description="probe step (iteration) number")
    t_s: float = Field(description="seconds from the injection instant (negative = before)")
    restart_count: int = Field(default=0, ge=0)
    busbw_gbs: float | None = Field(default=None, ge=0)
    ok: bool = True


class RecoveryTimings(StrictModel):
    """The figures of one fault: seconds from injection to each milestone; None = never reached."""

    detect_s: float | None = Field(
        default=None, ge=0, description="first error line or restart; None: nothing detected the fault"
    )
    recover_s: float | None = Field(
        default=None, ge=0, description="first step every rank began after the fault (and stall) completed"
    )
    restore_s: float | None = Field(default=None, ge=0, description="busbw back within 5% of pre-fault")
    steps_lost: int | None = Field(default=None, ge=0)


class RecoveryRecord(StrictModel):
    """One injected fault and what the probe saw around it."""

    fault_id: str = Field(min_length=1, description="unique in the run; also the file name")
    fault: str = Field(min_length=1, description="fault kind, e.g. kill_worker, link_flap, roce_drop")
    target: str = Field(description="node (and device) the fault hit")
    step: str | None = Field(default=None, description="ladder step id the fault ran under")
    repeat: int = Field(default=0, ge=0)
    injected_at: datetime
    reverted_at: datetime | None = None
    duration_s: float | None = Field(
        default=None, ge=0, description="how long the fault was held: measured (revert - inject) when known"
    )
    timings: RecoveryTimings = Field(default_factory=RecoveryTimings)
    outcome: RecoveryOutcome = "recovered"
    max_recovery_s: float | None = Field(default=None, description="the plan's limit, when it had one")
    heartbeats: list[Heartbeat] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    # What the probe analysis adds (orch recovery-test); absent in records of older runs.
    verdict: RecoveryStatus | None = None
    restarts: int | None = Field(default=None, ge=0, description="worker generations started")
    step_median_s: float | None = Field(default=None, description="probe step period before the fault")
    busbw_pre_gbs: float | None = Field(default=None, description="median busbw before the fault")
    busbw_min_ratio: float | None = Field(default=None, description="worst rolling busbw / pre-fault")
    clock_offsets_s: dict[str, float] = Field(default_factory=dict, description="node wall - orch mono")
    inject_latency_s: float | None = None
    stall_s: float | None = Field(default=None, description="longest gap between completed steps")
    stall_at_s: float | None = Field(default=None, description="when that gap began, from the injection")
    steady: bool | None = Field(default=None, description="False: injected before steady state came")
    heartbeats_total: int | None = Field(
        default=None, description="heartbeats in the window before thinning to `heartbeats`"
    )

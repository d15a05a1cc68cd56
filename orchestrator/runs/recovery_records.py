"""From one repeat of a recovery test to the RecoveryRecord that reports, the store and compare read.

Pure functions (no I/O): the probe's heartbeat lines are put on the injection's time axis and
thinned to a size a report can draw; the analysis (RecoveryResult) and the fault's own record
(FaultRecord) become one RecoveryRecord, the run directory's single per-repeat file.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.metrics.recovery import to_mono
from orchestrator.models.decision import RecoveryOutcome, RecoveryStatus
from orchestrator.models.fault import FaultKind, FaultRecord, RecoveryResult
from orchestrator.models.recovery import Heartbeat, RecoveryRecord, RecoveryTimings

PRE_S = 10.0
POST_PAD_S = 3.0
MAX_POINTS_PER_RANK = 300


def outcome(verdict: RecoveryStatus) -> RecoveryOutcome:
    """The record's outcome for a probe verdict: the same word, except no-data, which is aborted."""
    return "aborted" if verdict == "no-data" else verdict

# The figures a repeat (RecoveryResult) and its record (RecoveryRecord) hold under the same name.
_SAME_FIELDS = (
    "verdict",
    "step_median_s",
    "busbw_pre_gbs",
    "busbw_min_ratio",
    "stall_s",
    "stall_at_s",
    "steady",
)


def _mono(rec: dict[str, Any], offsets: dict[str, float]) -> float | None:
    """The line's time on orch's clock; None for a line without a readable time. Raises
    FaultError when its node has no measured clock offset (never offset 0)."""
    try:
        return to_mono(rec, offsets)
    except (KeyError, TypeError, ValueError):
        return None


def _thin(points: list[Heartbeat], cap: int) -> list[Heartbeat]:
    """Every k-th heartbeat so that at most ``cap`` remain; failed ones are always kept."""
    if len(points) <= cap:
        return points
    k = math.ceil(len(points) / cap)
    return [p for i, p in enumerate(points) if i % k == 0 or not p.ok or i == len(points) - 1]


def probe_heartbeats(
    recs: list[dict[str, Any]],
    offsets: dict[str, float],
    *,
    t0: float,
    end_s: float,
    pre_s: float = PRE_S,
    cap: int = MAX_POINTS_PER_RANK,
) -> tuple[list[Heartbeat], int]:
    """Heartbeats from ``pre_s`` before the injection to ``end_s`` after it, and how many there were.

    ``recs`` are the probe's raw lines (``load_heartbeats``); ``t0`` is the injection instant on
    orch's monotonic clock. Steps become ok heartbeats (restart count = the probe's generation);
    error lines become failed ones at the rank's last step. Each rank keeps at most ``cap`` points.
    """
    by_rank: dict[int, list[Heartbeat]] = defaultdict(list)
    last_step: dict[int, int] = {}
    for r in sorted(recs, key=lambda x: float(x.get("wall", 0.0) or 0.0)):
        ev, t = r.get("ev"), _mono(r, offsets)
        if ev not in ("step", "error") or t is None or "rank" not in r:
            continue
        rank = int(r["rank"])
        if ev == "step":
            last_step[rank] = int(r["step"])
        rel = t - t0
        if not -pre_s <= rel <= end_s:
            continue
        by_rank[rank].append(
            Heartbeat(
                rank=rank,
                step=int(r["step"]) if ev == "step" else last_step.get(rank, 0),
                t_s=round(rel, 6),
                restart_count=max(int(r.get("gen", 0)), 0),
                busbw_gbs=max(float(r["busbw_gbs"]), 0.0) if ev == "step" and "busbw_gbs" in r else None,
                ok=ev == "step",
            )
        )
    total = sum(len(v) for v in by_rank.values())
    out = [hb for rank in sorted(by_rank) for hb in _thin(by_rank[rank], cap)]
    return out, total


def heartbeat_window_end(r: RecoveryResult, window_s: float) -> float:
    """How far after the injection the record's heartbeats reach: past the last milestone."""
    last = max((v for v in (r.detect_s, r.recover_s, r.restore_s) if v is not None), default=None)
    return window_s if last is None else min(window_s, last + POST_PAD_S)


def to_record(
    r: RecoveryResult,
    fault: FaultRecord | None,
    *,
    target: str,
    duration_s: float,
    window_s: float,
    heartbeats: list[Heartbeat],
    heartbeats_total: int | None = None,
    mono_to_wall: Callable[[float], datetime],
) -> RecoveryRecord:
    """The run directory's record of one repeat: timings, verdict, probe figures, heartbeats.

    ``duration_s`` is the nominal hold, recorded only when the measured one (``r.held_s``) is not known.
    """
    t0 = r.injected_at_mono
    reverted = fault.t_revert_mono if fault is not None else None
    return RecoveryRecord(
        fault_id=r.fault_id,
        fault=r.kind.replace("-", "_"),
        target=target,
        repeat=r.repeat,
        injected_at=mono_to_wall(t0) if t0 is not None else datetime.now(UTC),
        reverted_at=mono_to_wall(reverted) if reverted is not None else None,
        duration_s=r.held_s if r.held_s is not None else duration_s,
        timings=RecoveryTimings(
            detect_s=r.detect_s, recover_s=r.recover_s, restore_s=r.restore_s, steps_lost=r.steps_lost
        ),
        outcome=outcome(r.verdict),
        max_recovery_s=window_s,
        heartbeats=heartbeats,
        notes=list(r.notes),
        restarts=r.restarts,
        clock_offsets_s=dict(r.clock_offsets_s),
        **{k: getattr(r, k) for k in _SAME_FIELDS},
        inject_latency_s=fault.inject_latency_s if fault is not None else None,
        heartbeats_total=heartbeats_total,
    )


def mono_to_wall_now() -> Callable[[float], datetime]:
    """A mapping of orch's monotonic clock to UTC wall time, taken once (now)."""
    import time

    wall, mono = datetime.now(UTC), time.monotonic()
    return lambda m: wall - timedelta(seconds=mono - m)


def from_record(rec: RecoveryRecord, kind: FaultKind) -> RecoveryResult | None:
    """A repeat read back from its record (a resumed run's summary covers every repeat), or None
    for a record without the probe's analysis (not a repeat of recovery-test). The monotonic
    injection instant belongs to the process that took it and is not kept."""
    if rec.verdict is None:
        return None
    t = rec.timings
    return RecoveryResult(
        fault_id=rec.fault_id,
        kind=kind,
        repeat=rec.repeat,
        detect_s=t.detect_s,
        recover_s=t.recover_s,
        restore_s=t.restore_s,
        steps_lost=t.steps_lost or 0,
        restarts=rec.restarts or 0,
        clock_offsets_s=dict(rec.clock_offsets_s),
        held_s=rec.duration_s,
        notes=list(rec.notes),
        **{k: getattr(rec, k) for k in _SAME_FIELDS},
    )

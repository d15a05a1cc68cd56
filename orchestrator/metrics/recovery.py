"""Recovery timings from the probe's heartbeats.

Times are put on orch's monotonic clock: a heartbeat's node wall time minus the node's measured
offset (node wall - orch monotonic, taken over the kept-open SSH shell at the lowest round trip).

With t0 the injection instant:
- detect: the first error line (or first start of a new generation, or, with neither, the moment
  a stall became visible: last completion before the gap + 3 step periods) after t0;
- recover: the completion (by the last rank) of the first step that every rank began after t0;
- restore: the first completion from recover on where the rolling median busbw (5 steps) is
  back within 5% of the pre-fault median;
- steps lost: step numbers completed before and done again after a restart;
- no interruption: no error, no new generation, and no gap between completions longer than
  ``gap_s`` — the probe rode through; the busbw dip is then the figure to read.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import RemoteError
from orchestrator.metrics.percentiles import percentile
from orchestrator.models.fault import RecoveryResult, Stat

ROLL = 5
RESTORE_FRACTION = 0.95


@dataclass(frozen=True)
class Completed:
    """One step completed by every rank of one generation."""

    gen: int
    step: int
    start_last: float
    end_last: float
    busbw: float


def load_heartbeats(out_dir: Path) -> list[dict[str, Any]]:
    """Every JSON line of every ``hb-rank*.jsonl`` in the probe's folder (torn lines skipped)."""
    recs: list[dict[str, Any]] = []
    for path in sorted(out_dir.glob("hb-rank*.jsonl")):
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    recs.append(rec)
    return recs


def measure_offset(
    ask_wall: Callable[[], float], clock: Callable[[], float] = time.monotonic, samples: int = 7
) -> float:
    """node wall - orch monotonic, from the sample with the smallest round trip.

    ``ask_wall`` returns the node's wall clock (e.g. ``date +%s.%N`` over the kept-open shell).
    """
    best: tuple[float, float] | None = None
    for _ in range(samples):
        m0 = clock()
        wall = ask_wall()
        m1 = clock()
        rtt = m1 - m0
        if best is None or rtt < best[0]:
            best = (rtt, wall - (m0 + m1) / 2)
    assert best is not None
    return best[1]


def node_wall_asker(shell: Any) -> Callable[[], float]:
    """ask_wall for a NodeShell; raises RemoteError when the node does not answer."""

    def ask() -> float:
        res = shell.run_script("date +%s.%N", timeout=10)
        try:
            return float(res.stdout.strip())
        except ValueError as e:
            raise RemoteError(f"unreadable node clock: {res.stdout!r}") from e

    return ask


def _to_mono(rec: dict[str, Any], offsets: dict[str, float], key: str = "wall") -> float:
    return float(rec[key]) - offsets.get(str(rec.get("node", "")), 0.0)


def completed_steps(recs: Iterable[dict[str, Any]], offsets: dict[str, float]) -> list[Completed]:
    """Steps every rank of their generation completed, in order of completion."""
    by: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    worlds: dict[int, int] = {}
    for r in recs:
        if r.get("ev") == "step":
            by[(int(r["gen"]), int(r["step"]))].append(r)
            worlds[int(r["gen"])] = int(r["world"])
    out = []
    for (gen, step), rs in by.items():
        if len({int(r["rank"]) for r in rs}) < worlds[gen]:
            continue
        starts = [_to_mono(r, offsets, "t_start") for r in rs]
        ends = [_to_mono(r, offsets) for r in rs]
        out.append(Completed(gen, step, max(starts), max(ends), min(float(r["busbw_gbs"]) for r in rs)))
    out.sort(key=lambda c: c.end_last)
    return out


def _rolling_median(values: list[float], i: int) -> float:
    return statistics.median(values[max(0, i - ROLL + 1) : i + 1])


def analyse(
    recs: list[dict[str, Any]],
    *,
    t0: float,
    offsets: dict[str, float],
    fault_id: str,
    kind: Any,
    repeat: int = 0,
    window_s: float = 60.0,
    gap_s: float = 1.0,
    fault_end: float | None = None,
    now: float | None = None,
) -> RecoveryResult:
    """Recovery of the probe around one injection at ``t0`` (orch monotonic). Raises nothing.

    ``now`` (orch monotonic) is given while the probe still runs: a probe whose newest completed
    step ended more than max(gap_s, 3 steps) before ``now`` is stalled at this moment, and the
    result is "not-recovered" (still stalled), whatever steps completed between ``t0`` and the
    stall. Without it, the end of the heartbeats is the end of the data (an offline analysis).
    A restart-container call takes about a second and the container dies somewhere inside it:
    steps that finish in between used to read as "recovered, no interruption" while the probe
    was in fact down (seen once in CI, reproduced by hand in 1 of 3 runs).
    """
    steps = completed_steps(recs, offsets)
    pre = [c for c in steps if c.end_last < t0][-50:]
    post = [c for c in steps if t0 <= c.end_last <= t0 + window_s]
    base = RecoveryResult(
        fault_id=fault_id, kind=kind, repeat=repeat, verdict="no-data", clock_offsets_s=offsets
    )
    if len(pre) < 3:
        base.notes.append("fewer than 3 steps before the fault")
        return base
    period = statistics.median(b.end_last - a.end_last for a, b in itertools.pairwise(pre))
    busbw_pre = statistics.median(c.busbw for c in pre)
    base.step_median_s = period
    base.busbw_pre_gbs = busbw_pre
    gen_before = pre[-1].gen
    errors = sorted(
        _to_mono(r, offsets)
        for r in recs
        if r.get("ev") == "error" and t0 <= _to_mono(r, offsets) <= t0 + window_s
    )
    starts = sorted(
        _to_mono(r, offsets)
        for r in recs
        if r.get("ev") == "start" and int(r.get("gen", 0)) > gen_before and _to_mono(r, offsets) >= t0
    )
    gens_after = {c.gen for c in post}
    restarts = max(gens_after | {gen_before}) - gen_before
    # Stall: the longest gap between completions once the fault started; while the probe runs,
    # the gap from its newest completion to `now` is one too, and it is still open.
    seq = [pre[-1], *post]
    gaps = [(b.end_last - a.end_last, a.end_last) for a, b in itertools.pairwise(seq)]
    open_gap = now - seq[-1].end_last if now is not None and now <= t0 + window_s else 0.0
    stalled = open_gap > max(gap_s, 3 * period)
    if stalled:
        gaps.append((open_gap, seq[-1].end_last))
    if fault_end is not None:
        gaps = [g for g in gaps if g[1] <= fault_end + gap_s]
    worst_gap = max(gaps, default=(0.0, t0))
    interrupted = bool(errors or starts or restarts or worst_gap[0] > gap_s)
    if errors or starts:
        base.detect_s = min([*errors, *starts]) - t0
    elif worst_gap[0] > gap_s:
        base.detect_s = max(worst_gap[1] + 3 * period - t0, 0.0)
    base.restarts = restarts
    if stalled:
        base.verdict = "not-recovered"
        base.notes.append(f"stalled: no step completed for {open_gap:.1f} s")
        return base
    # After a restart only the new generation's steps count (the old one may finish a step or two
    # between the call and the moment the fault lands, e.g. podman restart's stop timeout).
    rec_i = next(
        (i for i, c in enumerate(post) if c.start_last >= t0 and (not restarts or c.gen > gen_before)), None
    )
    if rec_i is None:
        base.verdict = "not-recovered"
        base.notes.append(f"no step begun after the fault completed within {window_s:g} s")
        return base
    base.recover_s = post[rec_i].end_last - t0
    bw = [c.busbw for c in seq]
    offset = 1  # seq = [pre[-1], *post]
    ratios = [_rolling_median(bw, i) / busbw_pre for i in range(offset, len(seq))]
    base.busbw_min_ratio = min(ratios) if ratios else None
    for i in range(rec_i + offset, len(seq)):
        if _rolling_median(bw, i) >= RESTORE_FRACTION * busbw_pre:
            base.restore_s = seq[i].end_last - t0
            break
    done_before = {c.step for c in steps if c.gen <= gen_before and c.end_last < t0 + window_s}
    done_before |= {int(r["step"]) for r in recs if r.get("ev") == "step" and int(r["gen"]) <= gen_before}
    redone = {c.step for c in post if c.gen > gen_before} & done_before
    base.steps_lost = len(redone)
    base.verdict = "recovered" if interrupted else "no-interruption"
    if not interrupted:
        base.notes.append(
            f"no interruption; busbw dip to {base.busbw_min_ratio or 0:.0%} of the pre-fault median"
        )
    return base


def stat(values: Iterable[float | None]) -> Stat:
    """median, p95 and spread of the values that are not None; p95 only from 20 values on
    (orchestrator.metrics.percentiles: under that it would be the maximum)."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return Stat(n=0)
    return Stat(n=len(xs), median=statistics.median(xs), p95=percentile(xs, 0.95), spread=xs[-1] - xs[0])

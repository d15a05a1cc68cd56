"""Recovery timings from the probe's heartbeats.

Times are put on orch's monotonic clock: a heartbeat's node wall time minus the node's measured
offset (node wall - orch monotonic, taken over the kept-open SSH shell at the lowest round trip).
A heartbeat whose node has no measured offset is an error, never offset 0.

With t0 the injection instant (docs/faults.md says the same, in the same words):
- stall: the longest gap between two completions (by every rank) from the last one before t0
  until the fault ended (+ ``gap_s``); a gap longer than ``gap_s`` interrupts the probe;
- detect: the first error line of a rank, or the first start of a new generation, after t0.
  With neither, nothing detected the fault: detect is absent (None) and a note says why; the
  stall is recorded as what it is (``stall_at_s``, ``stall_s``);
- recover: the completion, by the last rank, of the first step that *every* rank began at or
  after t0; after a restart it must be a step of a new generation; after a stall (the last one
  longer than ``gap_s``) it must have been begun by every rank less than ``gap_s`` before the
  stall ended: the step in flight across the stall is not a recovery;
- restore: the first completion from recover on where the rolling median busbw (5 steps) is
  back within 5% of the pre-fault median, and after every completion below that band while the
  fault was held (a flap dips again and again while held); one rank moves no bytes (busbw 0):
  step speed instead;
- steps lost: step numbers completed before and done again after a restart;
- no interruption: no error, no new generation, and no gap longer than ``gap_s``: the probe rode
  through. Then nothing recovered (recover is None); restore is the end of the busbw dip (as
  above, from the first completion below the band), if the rolling median left the band at all.
"""

from __future__ import annotations

import itertools
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import FaultError, RemoteError
from orchestrator.metrics.percentiles import percentile
from orchestrator.models.fault import RecoveryResult, Stat
from orchestrator.safefs import json_lines

ROLL = 5
RESTORE_FRACTION = 0.95
PHASES = ("detect", "recover", "restore")


@dataclass(frozen=True)
class Completed:
    """One step completed by every rank of one generation."""

    gen: int
    step: int
    start_first: float
    start_last: float
    end_last: float
    busbw: float
    dt: float = 0.0  # the slowest rank's step time

    @property
    def speed(self) -> float:
        """Steps per second of the slowest rank (the level when busbw is 0: one rank)."""
        return 1.0 / self.dt if self.dt > 0 else 0.0


def load_heartbeats(out_dir: Path) -> list[dict[str, Any]]:
    """Every JSON line of every ``hb-rank*.jsonl`` in the probe's folder (torn lines skipped).

    Each file is one rank's: a line without a node (error lines of older probes) gets the node
    the file's other lines name, when they name exactly one.
    """
    recs: list[dict[str, Any]] = []
    for path in sorted(out_dir.glob("hb-rank*.jsonl")):
        mine = list(json_lines(path))
        nodes = {str(r["node"]) for r in mine if r.get("node")}
        if len(nodes) == 1:
            (node,) = nodes
            for r in mine:
                if not r.get("node"):
                    r["node"] = node
        recs += mine
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


def slurm_node_aliases(scontrol_show_node: str, names_addresses: dict[str, set[str]]) -> dict[str, str]:
    """Slurm node name -> inventory name, from ``scontrol show node -o`` output.

    Under Slurm the probe names its node with ``$SLURMD_NODENAME``, Slurm's NodeName, which need
    not be the inventory's name. A Slurm node is the inventory node whose name or address equals
    its NodeName, NodeHostName or NodeAddr (or whose short name equals its NodeName).
    ``names_addresses`` maps each inventory name to its name and addresses. Unmatched nodes are
    left out (their heartbeats then fail loudly in ``to_mono``).
    """
    aliases: dict[str, str] = {}
    for line in scontrol_show_node.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        slurm = fields.get("NodeName")
        if not slurm:
            continue
        seen = {slurm, fields.get("NodeHostName", ""), fields.get("NodeAddr", "")} - {""}
        for inv, idents in names_addresses.items():
            if idents & seen or inv.split(".")[0] == slurm:
                aliases.setdefault(slurm, inv)
                break
    return aliases


def to_mono(rec: dict[str, Any], offsets: dict[str, float], key: str = "wall") -> float:
    """A heartbeat's ``key`` time on orch's monotonic clock.

    Raises FaultError when the heartbeat's node has no measured clock offset: an offset of 0
    would shift every timing by the node's clock (seconds, or the whole epoch).
    """
    node = str(rec.get("node", ""))
    try:
        off = offsets[node]
    except KeyError:
        raise FaultError(
            f"a heartbeat of rank {rec.get('rank', '?')} names node {node!r}, which has no measured"
            f" clock offset (measured: {', '.join(sorted(offsets)) or 'none'})",
            hint="the probe names its node with ORCH_NODE, or under Slurm $SLURMD_NODENAME; each must"
            " be an inventory host or a Slurm node matched to one (scontrol show node)",
        ) from None
    return float(rec[key]) - off


def completed_steps(recs: Iterable[dict[str, Any]], offsets: dict[str, float]) -> list[Completed]:
    """Steps every rank of their generation completed, in order of completion.

    Raises FaultError when a heartbeat names a node without a clock offset."""
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
        starts = [to_mono(r, offsets, "t_start") for r in rs]
        ends = [to_mono(r, offsets) for r in rs]
        dt = max(e - s for s, e in zip(starts, ends, strict=True))
        busbw = min(float(r["busbw_gbs"]) for r in rs)
        out.append(Completed(gen, step, min(starts), max(starts), max(ends), busbw, dt))
    out.sort(key=lambda c: c.end_last)
    return out


@dataclass(frozen=True)
class Band:
    """The probe's pre-fault band: its step period and level (busbw, or step speed at one rank)."""

    period_s: float
    level: float
    by_speed: bool

    def level_of(self, c: Completed) -> float:
        return c.speed if self.by_speed else c.busbw


def band_of(steps: Sequence[Completed]) -> Band | None:
    """The band of up to the last 50 completed steps; None with fewer than 3."""
    pre = list(steps)[-50:]
    if len(pre) < 3:
        return None
    period = statistics.median(b.end_last - a.end_last for a, b in itertools.pairwise(pre))
    busbw = statistics.median(c.busbw for c in pre)
    if busbw > 0:
        return Band(period, busbw, by_speed=False)
    return Band(period, statistics.median(c.speed for c in pre), by_speed=True)


def steady_run(steps: Sequence[Completed], band: Band, n: int, *, after: float, gap_s: float) -> str | None:
    """None when the newest ``n`` steps completed after ``after`` are a steady run, else why not.

    Steady: one generation, no gap between completions longer than ``gap_s`` (what would read as
    an interruption), and a median level within the restore band (>= 95% of the band's level).
    """
    recent = [c for c in steps if c.end_last > after]
    if len(recent) < n + 1:
        return f"{max(len(recent) - 1, 0)} of {n} steps since the wait began"
    run = recent[-(n + 1) :]
    if len({c.gen for c in run}) > 1:
        return "a new generation started within the last steps"
    worst = max(b.end_last - a.end_last for a, b in itertools.pairwise(run))
    if worst > gap_s:
        return f"a {worst:.2f} s gap between steps (more than {gap_s:g} s)"
    level = statistics.median(band.level_of(c) for c in run[1:])
    if level < RESTORE_FRACTION * band.level:
        what = "step speed" if band.by_speed else "busbw"
        return f"median {what} {level / band.level:.0%} of the pre-fault band (needs {RESTORE_FRACTION:.0%})"
    return None


def _rolling_median(values: list[float], i: int) -> float:
    return statistics.median(values[max(0, i - ROLL + 1) : i + 1])


def _back_in_band(seq: Sequence[Completed], in_band: list[bool], first: int, held_until: float) -> int | None:
    """The first index from ``first`` on that is in band and after every out-of-band completion
    up to ``held_until`` (a flap or throttle dips again and again while it is held)."""
    outs = [i for i in range(first, len(seq)) if not in_band[i] and seq[i].end_last <= held_until]
    start = max(first, outs[-1] + 1) if outs else first
    return next((i for i in range(start, len(seq)) if in_band[i]), None)


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
    """Recovery of the probe around one injection at ``t0`` (orch monotonic).

    ``now`` (orch monotonic) is given while the probe still runs: a probe whose newest completed
    step ended more than max(gap_s, 3 steps) before ``now`` is stalled at this moment, and the
    result is "not-recovered" (still stalled), whatever steps completed between ``t0`` and the
    stall. Without it, the end of the heartbeats is the end of the data (an offline analysis).
    A restart-container call takes about a second and the container dies somewhere inside it:
    steps that finish in between used to read as "recovered, no interruption" while the probe
    was in fact down (seen once in CI, reproduced by hand in 1 of 3 runs).

    Raises FaultError when a heartbeat names a node without a measured clock offset.
    """
    steps = completed_steps(recs, offsets)
    pre = [c for c in steps if c.end_last < t0][-50:]
    post = [c for c in steps if t0 <= c.end_last <= t0 + window_s]
    base = RecoveryResult(
        fault_id=fault_id, kind=kind, repeat=repeat, verdict="no-data", clock_offsets_s=offsets
    )
    if fault_end is not None:
        base.held_s = max(fault_end - t0, 0.0)
    band = band_of(pre)
    if band is None:
        base.notes.append("fewer than 3 steps before the fault")
        return base
    period = band.period_s
    base.step_median_s = period
    base.busbw_pre_gbs = statistics.median(c.busbw for c in pre)
    if band.by_speed:
        base.notes.append(
            "one rank: all_reduce moves no bytes between ranks (busbw 0), so the dip and restore"
            " are judged on step speed"
        )
    gen_before = pre[-1].gen
    errors = sorted(
        t for r in recs if r.get("ev") == "error" and t0 <= (t := to_mono(r, offsets)) <= t0 + window_s
    )
    starts = sorted(
        t
        for r in recs
        if r.get("ev") == "start" and int(r.get("gen", 0)) > gen_before and (t := to_mono(r, offsets)) >= t0
    )
    gens_after = {c.gen for c in post}
    restarts = max(gens_after | {gen_before}) - gen_before
    # Gaps between completions once the fault started, as (length, start, end); while the probe
    # runs, the gap from its newest completion to `now` is one too, and it is still open.
    seq = [pre[-1], *post]
    gaps = [(b.end_last - a.end_last, a.end_last, b.end_last) for a, b in itertools.pairwise(seq)]
    open_gap = now - seq[-1].end_last if now is not None and now <= t0 + window_s else 0.0
    stalled = open_gap > max(gap_s, 3 * period)
    if stalled:
        gaps.append((open_gap, seq[-1].end_last, math.inf))
    if fault_end is not None:
        gaps = [g for g in gaps if g[1] <= fault_end + gap_s]
    long_gaps = [g for g in gaps if g[0] > gap_s]
    interrupted = bool(errors or starts or restarts or long_gaps)
    base.restarts = restarts
    if long_gaps:
        worst = max(long_gaps)
        base.stall_s, base.stall_at_s = worst[0], worst[1] - t0
    if errors or starts:
        base.detect_s = min([*errors, *starts]) - t0
    elif interrupted:
        stall = (
            f"; the probe stalled {base.stall_s:.3f} s from {base.stall_at_s:+.3f} s" if base.stall_s else ""
        )
        base.notes.append(f"detect —: no error line and no restart after the injection{stall}")
    if stalled:
        base.verdict = "not-recovered"
        base.notes.append(f"stalled: no step completed for {open_gap:.1f} s")
        return base
    levels = [band.level_of(c) for c in seq]
    held_until = t0 if fault_end is None else max(fault_end, t0)
    in_band = [_rolling_median(levels, i) >= RESTORE_FRACTION * band.level for i in range(len(seq))]
    ratios = [_rolling_median(levels, i) / band.level for i in range(1, len(seq))]
    base.busbw_min_ratio = min(ratios) if ratios else None
    if not interrupted:
        base.verdict = "no-interruption"
        dip = next((i for i in range(1, len(seq)) if not in_band[i]), None)
        back = None if dip is None else _back_in_band(seq, in_band, dip, held_until)
        if back is not None:
            base.restore_s = seq[back].end_last - t0
        tail = ", not back within the window" if dip is not None and back is None else ""
        base.notes.append(
            "no interruption: nothing to recover from; busbw dip to"
            f" {base.busbw_min_ratio or 0:.0%} of the pre-fault median{tail}"
        )
        return base
    last_stall = max(long_gaps, key=lambda g: g[1]) if long_gaps else None

    def recovers(c: Completed) -> bool:
        if c.start_first < t0 or (restarts and c.gen <= gen_before):
            return False
        # The step in flight across the stall (begun more than gap_s before it ended) is not one.
        return last_stall is None or c.start_first >= last_stall[2] - gap_s

    # After a restart only the new generation's steps count (the old one may finish a step or two
    # between the call and the moment the fault lands, e.g. podman restart's stop timeout).
    rec_i = next((i for i, c in enumerate(post) if recovers(c)), None)
    if rec_i is None:
        base.verdict = "not-recovered"
        base.notes.append(f"no step begun by every rank after the fault completed within {window_s:g} s")
        return base
    base.recover_s = post[rec_i].end_last - t0
    back = _back_in_band(seq, in_band, rec_i + 1, held_until)  # seq = [pre[-1], *post]
    if back is not None:
        base.restore_s = seq[back].end_last - t0
    done_before = {c.step for c in steps if c.gen <= gen_before and c.end_last < t0 + window_s}
    done_before |= {int(r["step"]) for r in recs if r.get("ev") == "step" and int(r["gen"]) <= gen_before}
    redone = {c.step for c in post if c.gen > gen_before} & done_before
    base.steps_lost = len(redone)
    base.verdict = "recovered"
    base.notes += order_notes(base.detect_s, base.recover_s, base.restore_s)
    return base


def order_notes(detect_s: float | None, recover_s: float | None, restore_s: float | None) -> list[str]:
    """Why a repeat breaks detect <= recover <= restore, when it does (else nothing)."""
    notes = []
    if detect_s is not None and recover_s is not None and recover_s < detect_s:
        notes.append(
            f"order: recover ({recover_s:.3f} s) precedes detect ({detect_s:.3f} s): the first error line"
            " or restart came after every rank had already completed a step begun after the fault"
        )
    if recover_s is not None and restore_s is not None and restore_s < recover_s:
        notes.append(f"order: restore ({restore_s:.3f} s) precedes recover ({recover_s:.3f} s)")
    return notes


def watch_done(r: RecoveryResult, *, now: float, t0: float, fault_end: float, gap_s: float) -> bool:
    """Whether a live repeat's reading can no longer change: stop re-reading the heartbeats.

    Recovered: 2 s after restore. No interruption: once a stall that could still count (one
    starting up to ``gap_s`` after the fault ended) would be visible, and the busbw dip (if any)
    has ended. A repeat that never gets there is watched until the window closes.
    """
    if r.verdict == "recovered":
        return r.restore_s is not None and now > t0 + r.restore_s + 2.0
    if r.verdict == "no-interruption":
        visible = fault_end + gap_s + max(gap_s, 3 * (r.step_median_s or 0.0)) + 0.5
        dipped = r.busbw_min_ratio is not None and r.busbw_min_ratio < RESTORE_FRACTION
        return now > visible and (not dipped or (r.restore_s is not None and now > t0 + r.restore_s + 2.0))
    return False


def stat(values: Iterable[float | None]) -> Stat:
    """median, p95 and spread of the values that are not None; p95 only from 20 values on
    (orchestrator.metrics.percentiles: under that it would be the maximum)."""
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return Stat(n=0)
    return Stat(n=len(xs), median=statistics.median(xs), p95=percentile(xs, 0.95), spread=xs[-1] - xs[0])


def summary_notes(results: Sequence[RecoveryResult]) -> list[str]:
    """What a reader of the medians must know: repeats left out of a phase, and why the medians
    are out of order when they are (each repeat keeps detect <= recover <= restore, or says why;
    medians of different sets of repeats need not)."""
    notes: list[str] = []
    calm = [str(r.repeat) for r in results if r.verdict == "no-interruption"]
    if calm:
        notes.append(
            f"{len(calm)} of {len(results)} repeats had no interruption (repeat {', '.join(calm)}):"
            " nothing to detect or recover, so they are not in those medians"
        )
    silent = [
        str(r.repeat) for r in results if r.verdict in ("recovered", "not-recovered") and r.detect_s is None
    ]
    if silent:
        notes.append(
            f"detect is absent in repeat {', '.join(silent)}: no error line and no restart"
            " (the probe only stalled; stall_s in their records)"
        )
    medians = {p: stat(getattr(r, f"{p}_s") for r in results) for p in PHASES}
    for a, b in itertools.pairwise(PHASES):
        ma, mb = medians[a].median, medians[b].median
        if ma is None or mb is None or ma <= mb:
            continue
        pairs = [(getattr(r, f"{a}_s"), getattr(r, f"{b}_s")) for r in results]
        both = [(x, y) for x, y in pairs if x is not None and y is not None]
        notes.append(
            f"the {a} median ({ma:.3f} s, n={medians[a].n}) is above the {b} median ({mb:.3f} s,"
            f" n={medians[b].n}): medians of different repeats; {a} <= {b} holds in"
            f" {sum(x <= y for x, y in both)} of the {len(both)} repeats that have both"
        )
    return notes

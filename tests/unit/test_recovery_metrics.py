"""Recovery timings from synthetic heartbeats (no torch, no network)."""

from __future__ import annotations

import itertools
import json
import lzma
import statistics
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import FaultError
from orchestrator.metrics.recovery import (
    Band,
    analyse,
    band_of,
    completed_steps,
    measure_offset,
    order_notes,
    slurm_node_aliases,
    stat,
    steady_run,
    summary_notes,
    watch_done,
)
from orchestrator.models.fault import RecoveryResult
from orchestrator.runs import recovery_records as records
from orchestrator.runs.recovery import wait_steady

STEP = 0.02
WORLD = 2
SCONTROL_NODES = Path(__file__).parents[1] / "fixtures" / "probe" / "scontrol-show-node-o.txt"


def hb(gen: int, step: int, start: float, dt: float = STEP, bw: float = 1.0) -> list[dict[str, Any]]:
    return [{"ev": "step", "gen": gen, "step": step, "rank": r, "world": WORLD, "node": "n",
             "t_start": start, "wall": start + dt, "busbw_gbs": bw} for r in range(WORLD)]


def test_pause_recovery_is_outage_plus_one_step() -> None:
    recs: list[dict[str, Any]] = []
    t = 0.0
    for s in range(100):
        recs += hb(0, s, t)
        t += STEP
    # paused at t0 = 2.0 while step 100 runs; resumes 5 s later.
    recs += hb(0, 100, 2.0 - 0.001, dt=5.001 + 0.002)
    t = 2.0 + 5.0 + 0.002
    for s in range(101, 140):
        recs += hb(0, s, t)
        t += STEP
    r = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="pause-worker", fault_end=7.0)
    assert r.verdict == "recovered" and r.held_s == 5.0
    assert r.recover_s is not None and abs(r.recover_s - (5.0 + STEP + 0.002)) < 1e-6
    assert r.restarts == 0 and r.steps_lost == 0
    # Nothing detected the pause (no error line, no restart): detect is absent, the stall is named.
    assert r.detect_s is None and any(n.startswith("detect —") for n in r.notes)
    assert r.stall_s is not None and abs(r.stall_s - 5.002) < 1e-6 and r.stall_at_s is not None


def test_restart_counts_lost_steps_and_errors_detect() -> None:
    recs: list[dict[str, Any]] = []
    for s in range(50):
        recs += hb(0, s, s * STEP)
    recs.append({"ev": "error", "rank": 0, "wall": 1.2, "node": "n"})
    recs.append({"ev": "start", "gen": 1, "rank": 0, "wall": 4.0, "node": "n"})
    for i, s in enumerate(range(48, 80)):
        recs += hb(1, s, 5.0 + i * STEP)
    r = analyse(recs, t0=1.0, offsets={"n": 0.0}, fault_id="f", kind="kill-worker")
    assert r.verdict == "recovered" and r.restarts == 1 and r.steps_lost == 2
    assert r.detect_s is not None and abs(r.detect_s - 0.2) < 1e-9


def test_ride_through_records_dip() -> None:
    recs: list[dict[str, Any]] = []
    for s in range(100):
        recs += hb(0, s, s * STEP, bw=0.5 if 50 <= s < 60 else 1.0)
    r = analyse(recs, t0=1.0, offsets={"n": 0.0}, fault_id="f", kind="throttle")
    assert r.verdict == "no-interruption"
    assert r.busbw_min_ratio == 0.5 and r.restore_s is not None
    # nothing to recover from: no recovery "of one step"; restore is the end of the dip
    assert r.recover_s is None and r.detect_s is None
    assert r.restore_s > (60 - 50) * STEP


def test_offset_uses_lowest_round_trip() -> None:
    clock = iter([0.0, 0.5, 1.0, 1.01, 2.0, 2.2])
    walls = iter([100.2, 101.005, 102.1])
    off = measure_offset(lambda: next(walls), clock=lambda: next(clock), samples=3)
    assert abs(off - 100.0) < 1e-9


def test_stat() -> None:
    s = stat([1.0, 2.0, 3.0, None])
    # p95 of 3 repeats would be their maximum: hidden (None), n says why
    assert s.n == 3 and s.median == 2.0 and s.spread == 2.0 and s.p95 is None
    assert stat([float(i) for i in range(20)]).p95 == pytest.approx(18.05)
    assert stat([]).n == 0


def test_steps_between_the_call_and_the_kill_are_not_a_recovery_while_the_probe_is_stalled() -> None:
    # restart-container: the call takes about a second and the container dies inside it; two
    # steps finish after t0 = 2.0, then nothing until the restarted generation runs at 7.0.
    recs: list[dict[str, Any]] = []
    for s in range(102):
        recs += hb(0, s, s * STEP)
    live = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="restart-container", now=4.4)
    assert live.verdict == "not-recovered" and live.restore_s is None and live.recover_s is None
    assert live.detect_s is None and any("stalled" in n for n in live.notes)
    assert live.stall_s is not None and live.stall_s > 2.0
    # Offline (no `now`), the end of the data is not a stall: the old reading stays.
    assert analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="restart-container").verdict == (
        "no-interruption"
    )
    recs.append({"ev": "start", "gen": 1, "rank": 0, "wall": 6.5, "node": "n"})
    for i, s in enumerate(range(95, 140)):
        recs += hb(1, s, 7.0 + i * STEP)
    now = 7.0 + 46 * STEP
    done = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="restart-container", now=now)
    assert done.verdict == "recovered" and done.restarts == 1
    assert done.recover_s is not None and abs(done.recover_s - (5.0 + STEP)) < 1e-6


def test_a_probe_that_keeps_stepping_is_not_stalled() -> None:
    recs: list[dict[str, Any]] = []
    for s in range(200):
        recs += hb(0, s, s * STEP, bw=0.5 if 100 <= s < 110 else 1.0)
    r = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="throttle", now=200 * STEP + 0.3)
    assert r.verdict == "no-interruption" and r.restore_s is not None


def _steady(n: int, start: float = 0.0, world: int = WORLD, bw: float = 1.0, gen: int = 0,
            first: int = 0) -> list[dict[str, Any]]:  # fmt: skip
    recs: list[dict[str, Any]] = []
    for i in range(n):
        t = start + i * STEP
        recs += [{"ev": "step", "gen": gen, "step": first + i, "rank": r, "world": world, "node": "n",
                  "t_start": t, "wall": t + STEP, "busbw_gbs": bw} for r in range(world)]  # fmt: skip
    return recs


def test_recover_needs_every_rank_to_have_begun_after_the_fault() -> None:
    # Step 50: rank 0 began it 5 ms before t0, rank 1 just after. An error line is seen (so the
    # repeat is interrupted) but no stall and no restart: the recovery is step 51, not step 50.
    t0 = 1.0
    recs = _steady(50)
    recs += [{"ev": "step", "gen": 0, "step": 50, "rank": r, "world": WORLD, "node": "n",
              "t_start": start, "wall": 1.3, "busbw_gbs": 1.0}
             for r, start in ((0, t0 - 0.005), (1, t0 + 0.001))]  # fmt: skip
    recs.append({"ev": "error", "rank": 0, "node": "n", "wall": t0 + 0.05})
    recs += _steady(40, start=1.3, first=51)
    r = analyse(recs, t0=t0, offsets={"n": 0.0}, fault_id="f", kind="kill-worker")
    assert r.verdict == "recovered" and r.detect_s == pytest.approx(0.05)
    assert r.recover_s == pytest.approx(0.3 + STEP)  # step 51, begun by every rank at 1.3


def test_a_flap_that_stalls_late_is_detected_nowhere_and_recovers_after_its_stall() -> None:
    # The link-flap repeat 2: steps go on for 1.5 s after t0, then a 2 s stall. The old
    # reading: detect 3 periods after the stall began, "recover" 6 ms (the first step after t0).
    t0 = 2.0
    recs = _steady(100) + _steady(75, start=2.0, first=100)  # up to 3.5
    recs += _steady(100, start=5.5, first=175)
    r = analyse(recs, t0=t0, offsets={"n": 0.0}, fault_id="f", kind="link-flap", fault_end=t0 + 3.0)
    assert r.verdict == "recovered" and r.detect_s is None
    assert r.stall_s == pytest.approx(2.02) and r.stall_at_s == pytest.approx(1.5)
    assert r.recover_s is not None and r.recover_s >= r.stall_at_s + r.stall_s
    assert r.restore_s is not None and r.restore_s >= r.recover_s
    assert not [n for n in r.notes if n.startswith("order:")]


def test_a_repeat_without_interruption_has_no_recovery_and_no_restore_without_a_dip() -> None:
    recs = _steady(200)
    r = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="roce-drop", fault_end=3.0)
    assert r.verdict == "no-interruption"
    assert r.recover_s is None and r.detect_s is None and r.restore_s is None
    assert r.busbw_min_ratio == 1.0 and any(n.startswith("no interruption") for n in r.notes)


def test_a_heartbeat_from_a_node_without_a_clock_offset_fails_loudly() -> None:
    recs = _steady(100)
    with pytest.raises(FaultError, match=r"'n'.*no measured clock offset"):
        analyse(recs, t0=1.0, offsets={"node1": 0.0}, fault_id="f", kind="pause-worker")
    with pytest.raises(FaultError, match="no measured clock offset"):
        records.probe_heartbeats(recs, {"node1": 0.0}, t0=1.0, end_s=5.0)


def test_slurm_names_map_to_inventory_names_from_scontrol_show_node() -> None:
    text = "\n".join(ln for ln in SCONTROL_NODES.read_text().splitlines() if not ln.startswith("#"))
    # The lab's inventory names are Slurm's; an inventory naming the hosts otherwise (FQDN here)
    # is matched through NodeAddr, and heartbeats naming $SLURMD_NODENAME find their offset.
    same = slurm_node_aliases(text, {f"node{i}": {f"node{i}", f"198.18.0.{10 + i}"} for i in (1, 2, 3)})
    assert same == {"node1": "node1", "node2": "node2", "node3": "node3"}
    fqdn = slurm_node_aliases(text, {f"gpu{i}.example": {f"gpu{i}.example", f"198.18.0.{10 + i}"}
                                     for i in (1, 2, 3)})  # fmt: skip
    assert fqdn == {"node1": "gpu1.example", "node2": "gpu2.example", "node3": "gpu3.example"}
    assert slurm_node_aliases(text, {"other": {"other", "10.0.0.1"}}) == {}


def test_a_one_rank_probe_is_analysed_on_step_speed() -> None:
    # One rank: all_reduce's busbw factor is 0, so every heartbeat says busbw 0.
    recs = _steady(100, world=1, bw=0.0)
    recs += [{"ev": "step", "gen": 0, "step": 100, "rank": 0, "world": 1, "node": "n",
              "t_start": 2.0, "wall": 7.0, "busbw_gbs": 0.0}]  # fmt: skip
    recs += _steady(50, start=7.0, world=1, bw=0.0, first=101)
    r = analyse(recs, t0=2.0, offsets={"n": 0.0}, fault_id="f", kind="pause-worker", fault_end=7.0)
    assert r.verdict == "recovered" and r.busbw_pre_gbs == 0.0
    assert r.recover_s == pytest.approx(5.0 + STEP)  # the step in flight across the pause is not it
    assert r.restore_s is not None and r.restore_s >= r.recover_s
    assert any("one rank" in n for n in r.notes)


def test_steady_state_is_a_run_of_steps_in_the_pre_fault_band() -> None:
    steps = completed_steps(_steady(100), {"n": 0.0})
    band = band_of(steps)
    assert band is not None and band.period_s == pytest.approx(STEP) and not band.by_speed
    assert steady_run(steps, band, 30, after=0.0, gap_s=1.0) is None
    assert "of 30 steps" in (steady_run(steps, band, 30, after=1.5, gap_s=1.0) or "")
    stalled = completed_steps(_steady(50) + _steady(50, start=2.5, first=50), {"n": 0.0})
    assert "gap" in (steady_run(stalled, band, 60, after=0.0, gap_s=1.0) or "")
    slow = completed_steps(_steady(50, bw=0.8), {"n": 0.0})
    assert "80% of the pre-fault band" in (steady_run(slow, band, 30, after=0.0, gap_s=1.0) or "")


def test_waiting_for_steady_state_is_bounded_and_says_why(tmp_path: Path) -> None:
    (tmp_path / "hb-rank0.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _steady(50, bw=0.5) if r["rank"] == 0)
    )
    (tmp_path / "hb-rank1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in _steady(50, bw=0.5) if r["rank"] == 1)
    )
    band = Band(period_s=STEP, level=1.0, by_speed=False)
    now = [0.0]

    def sleep(dt: float) -> None:
        now[0] += dt

    why = wait_steady(tmp_path, {"n": 0.0}, band, 30, after=0.0, timeout=5.0, gap_s=1.0, sleep=sleep,
                      clock=lambda: now[0])  # fmt: skip
    assert why is not None and "50%" in why and 5.0 <= now[0] < 5.5


def test_watching_a_calm_repeat_ends_once_a_late_stall_would_show() -> None:
    r = RecoveryResult(fault_id="f", kind="roce-drop", verdict="no-interruption", step_median_s=STEP,
                       busbw_min_ratio=1.0)  # fmt: skip
    assert not watch_done(r, now=10.0, t0=5.0, fault_end=10.0, gap_s=1.0)
    assert watch_done(r, now=12.6, t0=5.0, fault_end=10.0, gap_s=1.0)
    dipped = r.model_copy(update={"busbw_min_ratio": 0.5})
    assert not watch_done(dipped, now=20.0, t0=5.0, fault_end=10.0, gap_s=1.0)


def test_medians_out_of_order_and_left_out_repeats_are_explained() -> None:
    def res(k: int, verdict: str, d: float | None, rc: float | None, rs: float | None) -> RecoveryResult:
        return RecoveryResult(fault_id=f"f{k}", kind="link-flap", repeat=k, verdict=verdict,  # type: ignore[arg-type]
                              detect_s=d, recover_s=rc, restore_s=rs)  # fmt: skip

    results = [res(0, "recovered", None, 1.0, 1.2), res(1, "recovered", 3.0, 3.5, 3.6),
               res(2, "recovered", 2.5, 2.6, 2.7), res(3, "no-interruption", None, None, None)]  # fmt: skip
    notes = summary_notes(results)
    assert any("1 of 4 repeats had no interruption (repeat 3)" in n for n in notes)
    assert any("detect is absent in repeat 0" in n for n in notes)
    (order,) = [n for n in notes if "median" in n and "above" in n]
    assert "detect median (2.750 s, n=2)" in order and "holds in 2 of the 2" in order
    assert order_notes(3.0, 1.0, 2.0) and not order_notes(1.0, 2.0, 3.0)


PROBE = Path(__file__).parents[1] / "fixtures" / "probe"


def _lab_flap() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, float]]:
    with lzma.open(PROBE / "lab-link-flap-hb.jsonl.xz", "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    fault = json.loads((PROBE / "lab-link-flap-fault.json").read_text())
    offsets = json.loads((PROBE / "lab-link-flap-offsets.json").read_text())["offsets"]
    return recs, fault, offsets


def test_recorded_lab_link_flap_reads_as_what_it_was() -> None:
    recs, fault, offsets = _lab_flap()
    t0, end = fault["injected_at_mono"], fault["t_revert_mono"]
    r = analyse(recs, t0=t0, offsets=offsets, fault_id=fault["id"], kind="link-flap", fault_end=end)
    steps = completed_steps(recs, offsets)
    seq = [c for c in steps if c.end_last < t0][-1:] + [c for c in steps if c.end_last >= t0]
    worst_gap = max(b.end_last - a.end_last for a, b in itertools.pairwise(seq))
    assert r.held_s == pytest.approx(end - t0)
    assert worst_gap <= 1.0  # so the probe rode through: no error, no restart, no stall
    assert r.verdict == "no-interruption" and r.detect_s is None and r.recover_s is None
    # the flap dipped busbw again and again while held: restore is after the deepest dip, not
    # the first return to the band a few steps after the injection
    bw = [c.busbw for c in seq]
    rolling = [statistics.median(bw[max(0, i - 4) : i + 1]) for i in range(len(seq))]
    deepest = seq[min(range(1, len(seq)), key=lambda i: rolling[i])].end_last - t0
    assert r.busbw_min_ratio is not None and r.busbw_min_ratio < 0.95
    assert r.restore_s is not None and r.restore_s > deepest
    # the same lines with node1's offset missing: refused, never read with offset 0
    with pytest.raises(FaultError, match="node1"):
        analyse(recs, t0=t0, offsets={k: v for k, v in offsets.items() if k != "node1"}, fault_id="f",
                kind="link-flap")  # fmt: skip


def test_recorded_lab_pause_recovers_one_step_after_the_measured_hold() -> None:
    # The planted-pause lab test, offline on a recorded pause: SIGSTOP of node2's rank 3 for 3 s.
    with lzma.open(PROBE / "lab-pause-worker-hb.jsonl.xz", "rt", encoding="utf-8") as fh:
        recs = [json.loads(line) for line in fh]
    fault = json.loads((PROBE / "lab-pause-worker-fault.json").read_text())
    offsets = json.loads((PROBE / "lab-pause-worker-offsets.json").read_text())["offsets"]
    t0, end = fault["injected_at_mono"], fault["t_revert_mono"]
    r = analyse(recs, t0=t0, offsets=offsets, fault_id=fault["id"], kind="pause-worker", fault_end=end)
    assert r.verdict == "recovered" and r.held_s == pytest.approx(end - t0)
    assert r.recover_s is not None and r.step_median_s is not None
    assert abs(r.recover_s - (r.held_s + r.step_median_s)) <= 0.100
    assert r.detect_s is None and r.stall_s is not None and r.stall_s > r.held_s - 0.1
    assert r.restore_s is not None and r.restore_s >= r.recover_s
    assert not [n for n in r.notes if n.startswith("order:")]

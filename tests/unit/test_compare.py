"""orch compare: 'same' within noise, 'worse' on exactly the rows made slower; history regressions."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from test_store_build import make_run, real_rows

from orchestrator.models.recovery import RecoveryRecord, RecoveryTimings
from orchestrator.report.compare import compare_runs
from orchestrator.report.history import history
from orchestrator.store.db import ResultsStore
from orchestrator.store.load import load_run
from orchestrator.store.rundir import atomic_write

KEYS = [(s, r.collective, r.size_bytes) for s in ("n1xg1", "n1xg2", "n1xg4") for r in real_rows()]


def _jitter(seed: int, spread: float) -> dict[tuple[str, str, int], float]:
    rng = random.Random(seed)
    return {k: 1.0 + rng.uniform(-spread, spread) for k in KEYS}


def test_same_setup_twice_is_same_on_every_row(tmp_path: Path) -> None:
    a = load_run(make_run(tmp_path, "a", scale=_jitter(1, 0.03)))
    b = load_run(make_run(tmp_path, "b", scale=_jitter(2, 0.03)))
    c = compare_runs(a, b)
    counts = c.counts()
    assert counts.get("worse", 0) == 0 and counts.get("better", 0) == 0
    assert counts["same"] > 0 and not c.worse


def test_slowed_rows_are_worse_and_only_those(tmp_path: Path) -> None:
    slow = {("n1xg4", "alltoall", s): 0.5 for s in (1 << 16, 1 << 18, 1 << 20)}
    scale = {**_jitter(2, 0.03), **{k: v * _jitter(2, 0.03)[k] for k, v in slow.items()}}
    a = load_run(make_run(tmp_path, "a", scale=_jitter(1, 0.03)))
    b = load_run(make_run(tmp_path, "b", scale=scale))
    c = compare_runs(a, b)
    worse = {(r.step, r.collective, r.size_bytes) for r in c.rows if r.verdict == "worse"}
    assert worse == set(slow)
    assert c.worse


def test_a_uniformly_slower_run_is_worse_everywhere_it_is_measurable(tmp_path: Path) -> None:
    a = load_run(make_run(tmp_path, "a", scale=_jitter(1, 0.03)))
    b = load_run(make_run(tmp_path, "b", factor=0.6, scale=_jitter(2, 0.03)))
    verdicts = {r.verdict for r in compare_runs(a, b).rows}
    assert verdicts <= {"worse", "n/a"} and "worse" in verdicts


def test_large_run_to_run_noise_widens_the_band(tmp_path: Path) -> None:
    a = load_run(make_run(tmp_path, "a", scale=_jitter(1, 0.03)))
    a2 = load_run(make_run(tmp_path, "a2", factor=0.7, scale=_jitter(3, 0.03)))
    b = load_run(make_run(tmp_path, "b", factor=0.85, scale=_jitter(2, 0.03)))
    assert compare_runs(a, b).worse
    assert not compare_runs(a, b, repeats_a=[a2]).worse


def test_recovery_times_are_compared(tmp_path: Path) -> None:
    runs = []
    for name, recover in (("a", (2.0, 2.1, 2.2)), ("b", (4.0, 4.1, 4.3))):
        run = make_run(tmp_path, name)
        for i, r in enumerate(recover):
            rec = RecoveryRecord(
                fault_id=f"f{i}",
                fault="kill_worker",
                target="localhost",
                repeat=i,
                injected_at=datetime(2026, 11, 1, tzinfo=UTC),
                timings=RecoveryTimings(detect_s=0.5, recover_s=r),
            )
            atomic_write(run / "recovery" / f"f{i}.json", rec.model_dump_json())
        runs.append(load_run(run))
    rows = {(r.fault, r.phase): r.verdict for r in compare_runs(runs[0], runs[1]).recovery}
    assert rows == {("kill_worker", "detect"): "same", ("kill_worker", "recover"): "worse"}


def _history_store(
    tmp_path: Path, n: int, gap: timedelta, spread: float = 0.02, last_factor: float = 0.5
) -> ResultsStore:
    """n runs of 'nightly', gap apart; the last one has all_reduce on n1xg4 scaled by last_factor."""
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    s = ResultsStore.open(tmp_path / "orch.db")
    for i in range(n):
        scale = _jitter(i, spread)
        if i == n - 1:
            hit = ("n1xg4", "all_reduce")
            scale = {k: v * (last_factor if k[:2] == hit else 1.0) for k, v in scale.items()}
        s.ingest(make_run(tmp_path, f"night{i}", plan_name="nightly", scale=scale, started=t0 + gap * i))
    return s


def test_history_flags_a_regression_of_the_latest_night(tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    with _history_store(tmp_path, 7, timedelta(days=1)) as s:
        h = history(s, plan="nightly")
        assert [n.run_id for n in h.nights] == [f"night{i}" for i in range(7)]
        assert h.earlier_runs == 6 and not h.notes
        assert {r.figure for r in h.regressions} == {"all_reduce@n1xg4"}
        assert {r.against for r in h.regressions} == {"previous night"}
        s.set_baseline("golden", "night0")
        h0 = history(s, plan="nightly", baseline="golden")
        assert {r.against for r in h0.regressions} == {"previous night", "baseline golden"}
        # a window with fewer than 5 earlier runs flags nothing and says how many there are
        short = history(s, plan="nightly", since=t0 + timedelta(days=3))
        assert short.earlier_runs == 3 and not short.regressions
        assert "3 earlier runs" in short.notes[0] and "5" in short.notes[0]


def test_history_of_three_runs_started_together_flags_nothing(tmp_path: Path) -> None:
    # The issue: three identical local runs started together read as 4 REGRESSIONs "of the
    # previous night", 0.25x to 0.82x, against a band of +-5%. With so few runs the noise is unknown.
    with _history_store(tmp_path, 3, timedelta(minutes=1), spread=0.6, last_factor=1.0) as s:
        h = history(s, plan="nightly")
        assert not h.regressions
        assert h.earlier_runs == 2 and "2 earlier runs" in h.notes[0]


def test_history_of_runs_minutes_apart_says_previous_run_and_takes_its_band_from_the_noise(
    tmp_path: Path,
) -> None:
    with _history_store(tmp_path, 8, timedelta(minutes=5)) as s:
        h = history(s, plan="nightly")
        assert {r.against for r in h.regressions} == {"previous run"}
        assert {r.figure for r in h.regressions} == {"all_reduce@n1xg4"}
    # the same drop inside a history whose own spread is +-40% is within its band
    with _history_store(tmp_path / "noisy", 8, timedelta(minutes=5), spread=0.4) as s:
        h = history(s, plan="nightly")
        assert not h.regressions
    # a drop far beyond that spread is flagged, with the history's own (wide) band
    with _history_store(tmp_path / "noisy2", 8, timedelta(minutes=5), spread=0.4, last_factor=0.02) as s:
        (r,) = history(s, plan="nightly").regressions
        assert r.figure == "all_reduce@n1xg4" and r.band > 0.5 and r.earlier == 7


def test_with_repeats_a_change_of_only_the_large_sizes_is_worse(tmp_path: Path) -> None:
    # Like a tbf throttle: sizes under its burst keep their speed, large ones drop 20x. Within the
    # pair that looks like row-to-row jitter (the neighbour rule's band grows to cover it); the
    # repeats say how noisy a row really is.
    big = [k for k in KEYS if k[2] >= 1 << 18]
    slow = {**_jitter(2, 0.03), **{k: 0.05 for k in big}}
    a = load_run(make_run(tmp_path, "a", scale=_jitter(1, 0.03)))
    a2 = load_run(make_run(tmp_path, "a2", scale=_jitter(3, 0.03)))
    b = load_run(make_run(tmp_path, "b", scale=slow))
    c = compare_runs(a, b, repeats_a=[a2])
    worse = {(r.step, r.collective, r.size_bytes) for r in c.rows if r.verdict == "worse"}
    measurable = {(r.step, r.collective, r.size_bytes) for r in c.rows if r.verdict != "n/a"}
    assert worse == set(big) & measurable and worse
    assert {r.verdict for r in c.rows if (r.step, r.collective, r.size_bytes) not in worse} <= {"same", "n/a"}


def test_a_repeat_that_agreed_by_chance_does_not_shrink_its_row_band(tmp_path: Path) -> None:
    noisy = {k: 1.0 + (0.6 if i % 2 else -0.4) for i, k in enumerate(KEYS)}
    lucky = KEYS[4]
    noisy[lucky] = 1.0  # a2 agrees with a on this row only
    a = load_run(make_run(tmp_path, "a"))
    a2 = load_run(make_run(tmp_path, "a2", scale=noisy))
    b = load_run(make_run(tmp_path, "b", scale={lucky: 0.6}))
    rows = compare_runs(a, b, repeats_a=[a2]).rows
    row = next(r for r in rows if (r.step, r.collective, r.size_bytes) == lucky)
    assert row.verdict == "same" and row.band is not None and row.band > 0.5

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


def test_history_flags_a_regression_of_the_latest_night(tmp_path: Path) -> None:
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    with ResultsStore.open(tmp_path / "orch.db") as s:
        for i in range(5):
            scale = _jitter(i, 0.02)
            if i == 4:
                scale = {k: v * (0.5 if k[:2] == ("n1xg4", "all_reduce") else 1.0) for k, v in scale.items()}
            s.ingest(
                make_run(
                    tmp_path, f"night{i}", plan_name="nightly", scale=scale, started=t0 + timedelta(days=i)
                )
            )
        h = history(s, plan="nightly")
        assert [n.run_id for n in h.nights] == [f"night{i}" for i in range(5)]
        assert {r.figure for r in h.regressions} == {"all_reduce@n1xg4"}
        s.set_baseline("golden", "night0")
        h0 = history(s, plan="nightly", since=t0 + timedelta(days=1), baseline="golden")
        assert {r.against for r in h0.regressions} == {"previous night", "baseline golden"}
        assert not history(s, plan="nightly", since=t0 + timedelta(days=10)).regressions


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

"""compare holds against one wild repeat (issue #12, Figures 2), on recorded busbw.

Two recordings of six collbench runs each with the same setup (SOURCE.md in each folder): runs
1-3 are side A, runs 4-6 side B, so every difference between the sides is noise. a-vs-a repeats
within about 1.5% (as GPU runs do); a-vs-a-2ranks spreads by about 30% (a loaded 2-CPU VM).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.models.plan import Step
from orchestrator.models.results import CollRow
from orchestrator.models.run import RunRecord, StepResult
from orchestrator.report.compare import Comparison, compare_runs
from orchestrator.workloads.nccltests import parse_nccl_tests

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "collbench"
QUIET, NOISY = "a-vs-a", "a-vs-a-2ranks"
Key = tuple[str, str, int]


def _rows(i: int, which: str = QUIET) -> list[CollRow]:
    return parse_nccl_tests((FIXTURES / which / f"run{i}-rank0.log").read_text()).rows


def _record(run_id: str, rows: list[CollRow], scale: dict[Key, float] | None = None) -> RunRecord:
    scaled = []
    for r in rows:
        f = (scale or {}).get(("n1xg2", r.collective, r.size_bytes), 1.0)
        oop = r.out_of_place.model_copy(update={"busbw_gbs": r.out_of_place.busbw_gbs * f})
        scaled.append(r.model_copy(update={"out_of_place": oop}))
    colls, sizes = sorted({r.collective for r in rows}), sorted({r.size_bytes for r in rows})
    step = Step(id="n1xg2", index=0, nnodes=1, ranks_per_node=2, nodes=["localhost"], world_size=2,
                collectives=colls, sizes=sizes)  # fmt: skip
    return RunRecord(run_id=run_id, run_dir=Path("/nonexistent") / run_id, plan_name="a-vs-a",
                     backend="local", status="accepted", step_ids=["n1xg2"],
                     steps=[StepResult(step=step, rows=scaled, verdict="pass")])  # fmt: skip


def _compare(
    scale_a2: dict[Key, float] | None = None, scale_b: dict[Key, float] | None = None, which: str = QUIET
) -> Comparison:
    a = [_record(f"a{i}", _rows(i, which), scale_a2 if i == 2 else None) for i in (1, 2, 3)]
    b = [_record(f"b{i}", _rows(i, which), scale_b) for i in (4, 5, 6)]
    return compare_runs(a[0], b[0], repeats_a=a[1:], repeats_b=b[1:])


def _by_key(c: Comparison) -> dict[Key, tuple[str, float | None]]:
    return {(r.step, r.collective, r.size_bytes): (r.verdict, r.band) for r in c.rows}


def _keys(which: str = QUIET) -> list[Key]:
    return [("n1xg2", r.collective, r.size_bytes) for r in _rows(1, which)]


@pytest.fixture(scope="module")
def keys() -> list[Key]:
    return _keys()


@pytest.mark.parametrize("which", [QUIET, NOISY])
def test_the_recording_is_a_against_a_and_reads_same(which: str) -> None:
    keys = _keys(which)
    assert len(keys) >= 12 and all(len(_rows(i, which)) == len(keys) for i in range(1, 7))
    c = _compare(which=which)
    assert c.runs_a == c.runs_b == 3
    assert {r.verdict for r in c.rows} == {"same"}


@pytest.mark.parametrize("which", [QUIET, NOISY])
def test_one_wild_repeat_widens_no_band_of_the_rows_it_did_not_touch(which: str) -> None:
    keys = _keys(which)
    base = _by_key(_compare(which=which))
    for wild in keys:  # repeat 2 of A made 5x fast at one size, each size in turn
        hit = _by_key(_compare(scale_a2={wild: 5.0}, which=which))
        for key in keys:
            b0, b1 = base[key][1], hit[key][1]
            assert b0 is not None and b1 is not None
            assert hit[key][0] == base[key][0] == "same", (wild, key)  # the median of three ignores it
            if key == wild:
                continue
            if which == QUIET:
                assert b1 <= b0 + 1e-12, (wild, key, b0, b1)
            else:
                # A median moves by at most one order statistic: when the wild row's own spread
                # crosses the median over rows, the pooled spread steps to the next row's. On this
                # 30%-noise recording that is at most +10% of the band (in ln), where the earlier
                # rule (variance, mean over rows) multiplied every band.
                assert math.log1p(b1) <= 1.15 * math.log1p(b0), (wild, key, b0, b1)


def test_with_a_wild_repeat_the_quiet_rows_keep_a_band_of_a_few_percent() -> None:
    # The issue: with one repeat 5x fast, the band reached 1,483% on that row and 210% on every
    # other row, so every row read "same". Here the rows that repeat within a few percent keep
    # the 5% floor, and the pooled spread stays that of the recording.
    keys = _keys()
    for wild in keys:
        c = _compare(scale_a2={wild: 5.0})
        assert c.sigma is not None and c.sigma < 0.03
        floor_rows = [r for r in c.rows if r.band is not None and r.band <= 0.05 + 1e-9]
        assert len(floor_rows) >= len(keys) // 2


# Two adjacent sizes where this recording repeats within about 1% (1.4826 x MAD of ln busbw
# 0.013 and 0.007): a 20% change there is far outside the noise. (Its 32 MiB rows spread by 6-22%
# run to run: a 20% change there is within the noise, and compare rightly calls it "same".)
K1: Key = ("n1xg2", "sendrecv", 4 << 20)
K2: Key = ("n1xg2", "sendrecv", 8 << 20)


def test_a_20_percent_drop_at_two_adjacent_sizes_is_worse(keys: list[Key]) -> None:
    assert K1 in keys and K2 in keys
    wild = ("n1xg2", "broadcast", 8 << 20)
    got = _by_key(_compare(scale_a2={wild: 5.0}, scale_b={K1: 0.8, K2: 0.8}))
    assert (got[K1][0], got[K2][0]) == ("worse", "worse")
    assert {got[k][0] for k in keys if k not in (K1, K2)} == {"same"}


def test_a_20_percent_drop_at_one_size_only_is_not_flagged(keys: list[Key]) -> None:
    c = _compare(scale_b={K1: 0.8})
    row = next(r for r in c.rows if (r.step, r.collective, r.size_bytes) == K1)
    assert row.ratio is not None and row.ratio < 0.85 and row.band is not None and row.band < 0.1
    assert row.verdict == "same" and not c.worse
    assert row.note is not None and "2 adjacent sizes" in row.note

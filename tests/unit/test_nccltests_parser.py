"""The nccl-tests / rccl-tests parser on verbatim outputs of real runs (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import fuzz_settings, mutate
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import ParseError
from orchestrator.metrics.busbw import busbw_gbs, busbw_tolerance
from orchestrator.models.results import CollRow, PlaceResult
from orchestrator.workloads.nccltests import ParsedRun, parse_nccl_tests, program_collective

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BENCH = sorted([*FIXTURES.glob("nccl-tests/*.txt"), *FIXTURES.glob("rccl-tests/*.txt")])


def _parse(path: Path) -> ParsedRun:
    return parse_nccl_tests(path.read_text(), collective=program_collective(path.name.split("-")[0]))


def test_fixtures_name_their_source() -> None:
    assert BENCH
    for path in BENCH:
        assert path.read_text().startswith("# source: "), path


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_busbw_recomputed_matches_printed(path: Path) -> None:
    run = _parse(path)
    for row, text in zip(run.rows, run.row_text, strict=True):
        places = [row.out_of_place, row.in_place]
        for k, place in enumerate(p for p in places if p is not None):
            mine = busbw_gbs(row.collective, row.size_bytes, place.time_us, row.nranks)
            tol = busbw_tolerance(row.collective, row.size_bytes, text.time[k], text.busbw[k], row.nranks)
            assert abs(mine - place.busbw_gbs) <= tol, (path.name, row.size_bytes, k, mine, place.busbw_gbs)


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.name)
def test_complete_runs_have_rows_and_footer(path: Path) -> None:
    run = _parse(path)
    if "aborted" in path.name:
        return
    assert run.rows
    assert not run.truncated
    assert run.avg_busbw_gbs is not None
    assert run.nranks == len({r.nranks for r in run.rows}) * run.rows[0].nranks


def test_legacy_header_8_ranks() -> None:
    run = _parse(FIXTURES / "nccl-tests/all_reduce-a100x8-legacy.txt")
    assert run.tool == "nccl-tests" and run.vendor == "nvidia"
    assert run.nranks == 8 and run.collective == "all_reduce"
    assert len(run.rows) == 34
    assert run.rows[0].out_of_place.wrong is None  # validation off: N/A
    assert run.redop == "sum" and run.rows[0].root is None
    assert run.avg_busbw_gbs == pytest.approx(68.4048)
    assert run.ok is False or run.wrong_total == 0


def test_legacy_alltoall_blank_redop_and_broadcast_root() -> None:
    a2a = _parse(FIXTURES / "nccl-tests/alltoall-a100x8-legacy.txt")
    assert a2a.rows and a2a.rows[0].redop is None
    bc = _parse(FIXTURES / "nccl-tests/broadcast-a100x8-legacy.txt")
    assert bc.rows[0].root == 0 and bc.rows[0].redop is None


def test_wrong_values_recorded_and_counted() -> None:
    run = _parse(FIXTURES / "nccl-tests/all_reduce-gh200x2-2.17.8-wrong.txt")
    assert run.version == "2.17.8"
    assert run.nranks == 2
    assert run.wrong_total == 96 + 32
    assert run.rows_with_wrong == 1
    assert run.out_of_bounds == 4
    bad = next(r for r in run.rows if r.size_bytes == 1048576)
    assert bad.out_of_place.wrong == 96 and bad.in_place is not None and bad.in_place.wrong == 32
    assert not run.ok


def test_aborted_run_is_truncated_and_not_a_pass() -> None:
    run = _parse(FIXTURES / "nccl-tests/all_reduce-gh200x8-2.17.8-aborted.txt")
    assert run.truncated
    assert run.aborted is not None and "busy or unavailable" in run.aborted
    assert run.rows == []
    assert run.avg_busbw_gbs is None  # never recorded as zero
    assert not run.ok


def test_rccl_tests_variant() -> None:
    run = _parse(FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt")
    assert run.tool == "rccl-tests" and run.vendor == "amd"
    assert run.version == "develop:33cc4df"
    assert run.nranks == 2 and len(run.rows) == 25
    assert run.ok


def test_cut_last_row_marks_truncated() -> None:
    text = (FIXTURES / "rccl-tests/all_reduce-r9700x2-develop-33cc4df.txt").read_text()
    cut = text[: text.index("   134217728      33554432") + 60]
    run = parse_nccl_tests(cut)
    assert run.truncated and not run.ok
    assert len(run.rows) == 24


def test_orch_json_lines_take_precedence() -> None:
    row = CollRow(
        collective="all_reduce", size_bytes=1024, count=256, dtype="float", redop="sum", nranks=2,
        out_of_place=PlaceResult(time_us=10.0, algbw_gbs=0.1, busbw_gbs=0.1, wrong=0),
    )  # fmt: skip
    text = "# Collective test starting: all_reduce_perf\n#orch-json " + row.model_dump_json() + "\n"
    run = parse_nccl_tests(text)
    assert run.tool == "collbench"
    assert run.rows == [row]
    assert run.truncated  # no footer yet


def test_unparseable_raises_parse_error_with_raw() -> None:
    with pytest.raises(ParseError) as info:
        parse_nccl_tests("hello world\n")
    assert info.value.raw == "hello world\n"


def test_missing_collective_is_an_error() -> None:
    text = (FIXTURES / "nccl-tests/all_reduce-a100x8-legacy.txt").read_text()
    with pytest.raises(ParseError):
        parse_nccl_tests(text)


@fuzz_settings
@given(index=st.integers(min_value=0), seed=st.integers(), ops=st.integers(min_value=1, max_value=8))
def test_mutations_raise_only_parse_error(index: int, seed: int, ops: int) -> None:
    path = BENCH[index % len(BENCH)]
    text = mutate(path.read_text(), seed, ops)
    try:
        run = parse_nccl_tests(text, collective=program_collective(path.name.split("-")[0]))
    except ParseError as e:
        assert e.raw == text
        return
    assert isinstance(run, ParsedRun)


def test_collbench_latency_percentiles_reach_the_rows_with_their_n() -> None:
    # a recorded collbench run of 20 iterations (tests/fixtures/collbench/a-vs-a/SOURCE.md)
    from orchestrator.metrics.verdict import summarize

    path = Path(__file__).resolve().parents[1] / "fixtures" / "collbench" / "a-vs-a" / "run1-rank0.log"
    text = path.read_text()
    rows = parse_nccl_tests(text).rows
    assert rows and all(r.out_of_place.latency_us is not None for r in rows)
    for r in rows:
        lat = r.out_of_place.latency_us
        assert lat is not None and lat.n == 20 and lat.p50 is not None and lat.p95 is not None
        assert lat.p99 is None  # 20 samples: p99 would be the maximum
        assert lat.p50 <= lat.p95
    summ = summarize(rows)
    assert {c.latency_us.n for c in summ.values() if c.latency_us} == {20}
    # the nccl-tests text table is unchanged: 13 columns per data line
    data = [ln.split() for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert data and all(len(d) == 13 for d in data)

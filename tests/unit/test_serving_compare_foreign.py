"""`orch compare RUN FILE`: an orch run's serving levels against a result read from elsewhere.

The files are the verbatim recorded outputs of tests/fixtures/serving/ (each with its source; see
test_serving_parse). The orch run is made here by scale-test on the local backend with the
stand-in engine (tests/unit/sse_server.py, as in test_serving_run) at concurrency 1 and 8, fast
(a few ms to the first token) against the Jetson Thor vLLM run's 2.2 s TTFT p99 at concurrency 8,
so that the direction of each verdict does not depend on this machine's load. Other cases use
summaries built from records made in the test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_cli_usage import one_error_line, run_cli
from test_serving_baseline import _summary
from test_serving_run import setup

from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS
from orchestrator.metrics import decision
from orchestrator.parse import parse_file
from orchestrator.report.compare_foreign import compare_foreign
from orchestrator.runs.scale_test import scale_test

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "serving"
JETSON_C8 = FIX / "vllm-bench-qwen3-8b-jetson-thor-c8.txt"  # vLLM console, max concurrency 8, 100 requests


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    req, _ = setup(tmp_path_factory.mktemp("fast"), engine_flags="--ttft 0.002 --itl 0.002")
    plan = Path(req.plan)
    plan.write_text(plan.read_text().replace("concurrency: [1, 4]", "concurrency: [1, 8]"))
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    return result.run_dir


def test_run_against_a_slower_vllm_result_flags_the_file_side(
    run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "c.json"
    code, out, err = run_cli(capsys, "compare", str(run), str(JETSON_C8), "--json", str(out_json))
    assert code == EXIT_THRESHOLDS, err  # B (the file) is worse
    c = json.loads(out_json.read_text())
    assert c["file_side"] == "b" and c["tool"] == "vllm bench serve"
    (row,) = c["rows"]  # c8 only: the file states concurrency 8
    assert (row["step"], row["level"], row["result"]) == ("fake-r1", "c8", 1)
    figs = {f["figure"]: f for f in row["figures"]}
    ttft = figs["TTFT p99"]
    assert ttft["b"] == 2200.61 and ttft["change"] == "worse" and ttft["n_a"] == 100 and ttft["n_b"] == 100
    assert figs["ITL p99"]["b"] == 361.74 and figs["ITL p99"]["n_b"] is None  # ITL's n is not stated
    assert figs["TPOT p99"]["b"] == 90.57
    assert figs["E2E p99"]["change"] == "n/a" and "states no E2E p99" in figs["E2E p99"]["note"]
    assert figs["output tokens/s"]["b"] == 82.47
    assert row["verdict"] in ("worse", "worse for interactive")
    assert c["unmatched"] == ["fake-r1 c1"]
    text = " ".join(out.split())
    assert "states no noise estimate" in text
    assert f"not compared (no result at that load in {JETSON_C8}): fake-r1 c1" in text
    assert "serving step fake-r1, level c8 vs" in text and "TTFT p99 +" in text


def test_file_as_a_and_the_run_as_b(run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_json = tmp_path / "c.json"
    code, _, err = run_cli(capsys, "compare", str(JETSON_C8), str(run), "--json", str(out_json))
    c = json.loads(out_json.read_text())
    (row,) = c["rows"]
    ttft = next(f for f in row["figures"] if f["figure"] == "TTFT p99")
    assert (
        c["file_side"] == "a" and ttft["a"] == 2200.61 and ttft["change"] == "better" and ttft["ratio"] < 0.5
    )
    assert row["verdict"] != "worse" and row["verdict"] != "worse for interactive"
    assert code == EXIT_OK, err


def test_nothing_matches_is_refused_naming_the_levels_and_what_the_file_states(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = FIX / "vllm-bench-llama3b-l40s-10qps.txt"  # Poisson at 10 requests/s, no cap
    code, _, err = run_cli(capsys, "compare", str(run), str(f))
    assert code == 2
    line = one_error_line(err)
    assert "no orch level matches a result of" in line
    assert "the run has fake-r1 c1, fake-r1 c8" in line and "the file states #1 rate 10/s" in line


def test_guidellm_and_sglang_p99_on_fewer_than_100_requests_are_not_compared(
    run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for name, n in (("guidellm-benchmarks-stripped.json", 46), ("sglang-bench-deepseek-ocr.txt", 10)):
        out_json = tmp_path / f"{name}.json"
        code, _, err = run_cli(capsys, "compare", str(run), str(FIX / name), "--json", str(out_json))
        assert code == EXIT_OK, err
        (row,) = json.loads(out_json.read_text())["rows"]
        assert row["level"] == "c1" and row["verdict"] == "n/a"  # concurrency 1: synchronous / max 1
        for f in row["figures"][1:]:
            assert f["change"] == "n/a", f
        assert f"rests on n={n} < 100: not defined" in row["reason"]
        assert row["figures"][0]["change"] != "n/a"  # throughput is compared


def test_two_results_at_one_load_need_result_n() -> None:
    results = list(parse_file(FIX / "vllm-save-result-llama3b-l40s.jsonl").serving)  # 3 runs at 10 req/s
    mine = [("w-r1", [_summary("r10", 100)])]
    with pytest.raises(
        ValueError, match=r"states 3 results at the load of w-r1 r10 \(#1, #4, #7\).*--result N"
    ):
        compare_foreign(mine, results, a="run", b="f", file_side="b", file="f", floor=0.05, k=3.0)
    c = compare_foreign(mine, results, a="run", b="f", file_side="b", file="f", floor=0.05, k=3.0, pick=4)
    (row,) = c.rows
    assert row.result == 4 and row.figures[1].b == pytest.approx(89.80040712966002)
    with pytest.raises(ValueError, match="--result 10: f states 9 result"):
        compare_foreign(mine, results, a="run", b="f", file_side="b", file="f", floor=0.05, k=3.0, pick=10)


def test_a_stated_zero_p99_is_not_a_ratio() -> None:
    # SGLang issue 12389's line: concurrency 16, TTFT and ITL p99 stated as 0.0
    (theirs,) = parse_file(FIX / "sglang-bench-issue12389-c16.jsonl").serving
    c = compare_foreign([("w-r1", [_summary("c16", 100)])], [theirs], a="run", b="f", file_side="b", file="f",
                        floor=0.05, k=3.0)  # fmt: skip
    figs = {f.figure: f for f in c.rows[0].figures}
    assert figs["TTFT p99"].change == "n/a" and "states TTFT p99 0 ms: no ratio" in (
        figs["TTFT p99"].note or ""
    )
    assert figs["TPOT p99"].change != "n/a" and figs["E2E p99"].change != "n/a"


def test_both_sides_files_or_kind_without_a_file_are_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "compare", str(JETSON_C8), str(JETSON_C8))
    assert code == 2 and "are both files" in one_error_line(err)
    code, _, err = run_cli(capsys, "compare", str(run), str(run), "--result", "1")
    assert code == 2 and "apply to a FILE side only" in one_error_line(err)
    code, _, err = run_cli(capsys, "compare", str(run), str(JETSON_C8), "--repeat-b", str(run))
    assert code == 2 and "one result without repeats" in one_error_line(err)


def test_run_against_a_guidellm_0_8_report(
    run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """guidellm 0.8.1's report (schema version 2: concurrent@1 and @4 on a stand-in paced 20 ms to
    the first token): c1 matches concurrent@1; the figures are the ones its JSON states."""
    f = FIX / "guidellm-0.8.1-report-v2-c1-c4.json"
    out_json = tmp_path / "g.json"
    code, _, err = run_cli(capsys, "compare", str(run), str(f), "--json", str(out_json))
    c = json.loads(out_json.read_text())
    assert c["tool"] == "guidellm" and c["unmatched"] == ["fake-r1 c8"]
    (row,) = c["rows"]
    # the file's 20 ms TTFT against the run's 2 ms is worse, unless a loaded machine slowed the
    # run's stand-in as much: the exit code follows the row's own verdict
    assert code == (EXIT_THRESHOLDS if decision.is_worse(row["verdict"]) else EXIT_OK), (err, row["verdict"])
    assert (row["level"], row["result"]) == ("c1", 1)
    figs = {x["figure"]: x for x in row["figures"]}
    assert figs["output tokens/s"]["b"] == 143.8462390355844
    ttft = figs["TTFT p99"]
    assert (ttft["b"], ttft["n_b"]) == (44.258832931518555, 120)
    # The run's side is measured here, its band from its own noise: on a loaded machine its TTFT
    # p99 and band vary, so the call is checked against its own figures (beyond the band: worse).
    assert ttft["ratio"] == pytest.approx(ttft["b"] / ttft["a"])
    d, half = math.log(ttft["ratio"]), math.log1p(ttft["band"])
    assert ttft["change"] == ("worse" if d > half else "better" if d < -half else "same"), ttft
    assert figs["E2E p99"]["b"] == 0.1490333080291748 * 1000 and figs["E2E p99"]["n_b"] == 120
    assert figs["ITL p99"]["change"] == "n/a"  # guidellm states no distribution of the gaps


def test_an_mlperf_server_summary_is_read_and_matched_by_its_rate(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """loadgen's Server scenario runs Poisson arrivals at target_qps (75): only an orch level r75
    would match; this run's c1 and c8 do not, and the refusal says what the file states."""
    f = FIX / "mlperf-summary-llama2-70b-server-h100.txt"
    code, _, err = run_cli(capsys, "compare", str(run), str(f))
    assert code == 2 and "Traceback" not in err
    line = one_error_line(err)
    assert "the run has fake-r1 c1, fake-r1 c8" in line and "the file states #1 rate 75/s" in line


@pytest.mark.parametrize(
    "name", ["genai-perf-export-c100-streaming.json", "aiperf-export-gpt-oss-20b-c100.json"]
)
def test_a_genai_perf_or_aiperf_export_is_matched_by_its_concurrency(
    run: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    f = FIX / name  # concurrency 100: not a level of this run
    code, _, err = run_cli(capsys, "compare", str(run), str(f))
    assert code == 2 and "Traceback" not in err
    assert "the file states #1 concurrency 100" in one_error_line(err)


def test_guidellm_03_tables_match_the_runs_c1(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """guidellm 0.3's synchronous benchmark is concurrency 1: set beside this run's c1."""
    f = FIX / "guidellm-0.3.0-console-stripped.txt"
    code, out, err = run_cli(capsys, "compare", str(run), str(f))
    assert code == 0 and "Traceback" not in err, err
    flat = " ".join(out.split())
    assert "│ fake-r1 │ c1 │ 1 │" in flat and "TTFT p99 of the file (result #1) rests on n=46 < 100" in flat
    assert "not compared (no result at that load in" in flat and "): fake-r1 c8" in flat


def test_a_vllm_summary_with_a_speculative_decoding_section_is_compared(
    run: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """vLLM v0.25.0's summary with its Speculative Decoding section (kept aside): matched at
    concurrency 1, its p99s on 20 requests not defined, its throughput compared as printed."""
    f = FIX / "vllm-bench-glm52-mtp5-spec-decode.txt"
    out_json = tmp_path / "c.json"
    code, _, err = run_cli(capsys, "compare", str(run), str(f), "--json", str(out_json))
    assert "Traceback" not in err and code in (EXIT_OK, EXIT_THRESHOLDS), err
    (row,) = json.loads(out_json.read_text())["rows"]
    assert (row["step"], row["level"]) == ("fake-r1", "c1")
    figs = {x["figure"]: x for x in row["figures"]}
    assert figs["output tokens/s"]["b"] == 69.24 and figs["output tokens/s"]["change"] != "n/a"
    assert figs["TTFT p99"]["change"] == "n/a" and figs["TTFT p99"]["n_b"] == 20  # 20 requests: no p99
    assert "rests on n=20 < 100: not defined" in row["reason"]


SERVING_FIXTURES = sorted(p for p in FIX.iterdir() if p.suffix != ".source")


@pytest.mark.parametrize("f", SERVING_FIXTURES, ids=[p.name for p in SERVING_FIXTURES])
def test_every_recorded_serving_output_is_compared_or_refused_in_one_line(
    run: Path, capsys: pytest.CaptureFixture[str], f: Path
) -> None:
    """Issue 27's must-show: `orch compare RUN FILE` on each recorded output of tests/fixtures/serving
    (every tool and version orch parse reads) ends with a comparison or one error line that says why,
    never a traceback (an exception other than orch's own would leave main() here)."""
    code, out, err = run_cli(capsys, "compare", str(run), str(f))
    assert "Traceback" not in err + out
    if code == 2:  # nothing at this run's loads: the refusal names the run's levels and the file's
        line = one_error_line(err)
        assert "the run has fake-r1 c1, fake-r1 c8" in line and "the file states" in line, line
    else:
        assert code in (EXIT_OK, EXIT_THRESHOLDS), err
        assert "serving step fake-r1, level c" in " ".join(out.split()), out

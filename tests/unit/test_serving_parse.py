"""`orch parse` on serving-benchmark results from elsewhere (vLLM, SGLang, guidellm).

Every figure each recorded output states (tests/fixtures/serving/, each with its source) is
asserted as read; then detection, and the refusals of what cannot be read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli import main
from orchestrator.errors import ParseError
from orchestrator.models.serving_results import ServingSummary
from orchestrator.parse import PARSERS, detect_kind, parse_file
from orchestrator.workloads.servingbench import (
    parse_console,
    parse_guidellm,
    parse_sglang_jsonl,
    parse_vllm_json,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "serving"


def source_of(path: Path) -> str:
    """A fixture's source line: its first line (`# source: ...`) or, for a format that cannot carry a
    comment (JSON), its `.source` file beside it (`source: ...`)."""
    side = path.with_name(path.name + ".source")
    line = side.read_text() if side.exists() else path.read_text().partition("\n")[0]
    return line.removeprefix("# ").strip()


GITHUB_FILE = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+/(?:blob|tree)/([^/\s]+)/")


def source_problem(source: str) -> str | None:
    """Why a source line does not say where a fixture came from, or None: it names a URL, a GitHub
    file at a 40-hex commit (not a branch, which moves), or, for an output generated here, the
    tool's version and the command."""
    if not source.startswith("source: "):
        return "no 'source: ' line"
    if source.startswith("source: generated"):
        if not re.search(r" \d+\.\d+\.\d+", source) or "command: " not in source:
            return "a generated output names no tool version or no command"
        return None
    if not source.startswith("source: https://"):
        return "no URL"
    refs = GITHUB_FILE.findall(source)
    bad = [r for r in refs if not re.fullmatch(r"[0-9a-f]{40}", r)]
    return f"a GitHub file at {bad[0]!r}, not a commit" if bad else None


def test_every_recorded_output_names_its_source_with_a_commit_or_its_command() -> None:
    """Issue 27, part 1: each fixture is verbatim with its source URL and commit in a header line
    (or `.source` file); one generated here names the tool's version and the command."""
    fixtures = sorted(p for p in FIX.iterdir() if p.suffix != ".source")
    problems = {p.name: why for p in fixtures if (why := source_problem(source_of(p)))}
    assert problems == {}
    orphans = [p.name for p in FIX.glob("*.source") if not p.with_suffix("").exists()]
    assert orphans == []
    # the rule itself
    blob = "source: https://github.com/o/r/blob/{}/README.md (lines 1-9)"
    assert source_problem(blob.format("a" * 40)) is None
    assert source_problem(blob.format("main")) == "a GitHub file at 'main', not a commit"
    assert source_problem("source: https://github.com/o/r/issues/12 (issue body)") is None
    assert source_problem("made up by hand") == "no 'source: ' line"
    assert source_problem("source: generated with guidellm 0.8.1 against the stand-in") is not None


def _summaries(name: str) -> list[ServingSummary]:
    return list(parse_file(FIX / name).serving)


def _stated(s: ServingSummary) -> dict[str, Any]:
    """The summary as a dict of what is stated (None left out), latencies' empty percentiles too."""
    return s.model_dump(exclude_none=True)


def _lat(mean: float | None = None, median: float | None = None, std: float | None = None,
         max: float | None = None, n: int | None = None, **pcts: float) -> dict[str, Any]:  # fmt: skip
    d: dict[str, Any] = {"percentiles": pcts}
    for k, v in (("mean", mean), ("median", median), ("std", std), ("max", max), ("n", n)):
        if v is not None:
            d[k] = v
    return d


# --- vLLM console summary --------------------------------------------------------------------------


def test_vllm_console_llama3b_every_figure() -> None:
    (s,) = _summaries("vllm-bench-llama3b-l40s-10qps.txt")
    assert _stated(s) == {
        "tool": "vllm bench serve", "source_format": "console", "index": 0,
        "model": "meta-llama/Llama-3.2-3B-Instruct",  # from the Namespace line
        "request_rate": 10.0, "burstiness": 1.0,  # the lines vLLM prints before the block
        # "Maximum request concurrency: None": stated as none, so no cap
        "completed": 300, "duration_s": 36.03, "total_input_tokens": 299700, "total_output_tokens": 81050,
        "request_throughput": 8.33, "output_throughput": 2249.25, "total_token_throughput": 10566.33,
        "ttft": _lat(54.58, 53.00, p99=89.77),
        "tpot": _lat(13.58, 13.51, p99=17.65),
        "itl": _lat(13.51, 12.84, p99=34.21),
        "other": {},
    }  # fmt: skip
    assert s.failed is None  # this vLLM prints no "Failed requests" line: not stated, not 0
    assert s.e2e is None


def test_vllm_console_jetson_every_figure() -> None:
    (s,) = _summaries("vllm-bench-qwen3-8b-jetson-thor-c8.txt")
    assert _stated(s) == {
        "tool": "vllm bench serve", "source_format": "console", "index": 0,
        "max_concurrency": 8, "completed": 100, "duration_s": 150.59,
        "total_input_tokens": 204169, "total_output_tokens": 12419,
        "request_throughput": 0.66, "output_throughput": 82.47, "total_token_throughput": 1438.24,
        "ttft": _lat(974.57, 959.99, p99=2200.61),
        "tpot": _lat(85.33, 86.05, p99=90.57),
        "itl": _lat(85.33, 72.52, p99=361.74),
        "other": {},
    }  # fmt: skip


def test_vllm_console_agrees_with_its_saved_json() -> None:
    """The 10 QPS run's console summary and its --save-result JSON, printed after it (same run)."""
    (console,) = _summaries("vllm-bench-llama3b-l40s-10qps.txt")
    (run,) = _summaries("vllm-save-result-llama3b-l40s-10qps.json")
    assert (run.date, run.model, run.request_rate, run.burstiness) == (
        "20250530-203806", console.model, console.request_rate, console.burstiness
    )  # fmt: skip
    assert (run.completed, run.total_input_tokens, run.total_output_tokens) == (
        console.completed, console.total_input_tokens, console.total_output_tokens
    )  # fmt: skip
    for field in ("duration_s", "request_throughput", "output_throughput", "total_token_throughput"):
        assert round(getattr(run, field), 2) == getattr(console, field), field
    for metric in ("ttft", "tpot", "itl"):
        a, b = getattr(run, metric), getattr(console, metric)
        assert (round(a.mean, 2), round(a.median, 2), round(a.p("p99"), 2)) == (b.mean, b.median, b.p("p99"))


# --- vLLM --save-result JSON ---------------------------------------------------------------------


def test_vllm_json_single_result_every_figure() -> None:
    (s,) = _summaries("vllm-save-result-llama3b-l40s-10qps.json")
    assert _stated(s) == {
        "tool": "vllm bench serve", "source_format": "json", "index": 0, "date": "20250530-203806",
        "backend": "vllm", "model": "meta-llama/Llama-3.2-3B-Instruct",
        "tokenizer": "meta-llama/Llama-3.2-3B-Instruct", "num_prompts": 300, "request_rate": 10.0,
        "burstiness": 1.0, "duration_s": 36.034275877000255, "completed": 300,
        "total_input_tokens": 299700, "total_output_tokens": 81050,
        "request_throughput": 8.325406649602808, "output_throughput": 2249.247363167692,
        "total_token_throughput": 10566.328606120898,
        "ttft": _lat(54.577085783294024, 52.999333499883505, 9.27197373989555, p99=89.76647855975897),
        "tpot": _lat(13.577995860227945, 13.512526767533997, 0.9199628548912276, p99=17.652194109258673),
        "itl": _lat(13.505887271504633, 12.841573499827064, 3.839438281316489, p99=34.210415409961556),
        "other": {"deployment": "base", "gpu": "4xNVIDIA_L40S", "model": "meta-llama/Llama-3.2-3B-Instruct",
                  "gateway": "kgateway", "prefill_replicas": "0", "decode_replicas": "4", "input_len": "1000",
                  "output_len": "500"},
    }  # fmt: skip


def test_vllm_json_first_result_every_figure() -> None:
    summaries = _summaries("vllm-save-result-llama3b-l40s.jsonl")
    assert len(summaries) == 9
    assert _stated(summaries[0]) == {
        "tool": "vllm bench serve", "source_format": "json", "index": 0, "date": "20250530-194738",
        "backend": "vllm", "model": "meta-llama/Llama-3.2-3B-Instruct",
        "tokenizer": "meta-llama/Llama-3.2-3B-Instruct", "num_prompts": 300, "request_rate": 10.0,
        "burstiness": 1.0, "duration_s": 35.84472489100017, "completed": 300,
        "total_input_tokens": 299700, "total_output_tokens": 80945,
        "request_throughput": 8.369432347779671, "output_throughput": 2258.212337970085,
        "total_token_throughput": 10619.275253401978,
        "ttft": _lat(54.59561144333596, 52.868896000063614, 10.45418108071603, p99=98.69780922984769),
        "tpot": _lat(13.710971568239172, 13.686303201518745, 0.9966270621573491, p99=15.793261194984588),
        "itl": _lat(13.73187330695019, 13.098381999952835, 4.023339545674027, p99=34.48662216016601),
        # --metadata KEY=VALUE pairs, kept under their own names
        "other": {"deployment": "no-features", "gpu": "4xNVIDIA_L40S",
                  "model": "meta-llama/Llama-3.2-3B-Instruct", "gateway": "kgateway", "prefill_replicas": "0",
                  "decode_replicas": "4", "input_len": "1000", "output_len": "500"},
    }  # fmt: skip
    # "max_concurrency": null and "request_goodput:": null (vLLM's old spelling): stated as none
    assert summaries[0].max_concurrency is None and summaries[0].request_goodput is None


KEYS = {  # vLLM's key -> how it is read
    "duration": lambda s: s.duration_s, "completed": lambda s: s.completed,
    "num_prompts": lambda s: s.num_prompts, "date": lambda s: s.date,
    "total_input_tokens": lambda s: s.total_input_tokens,
    "total_output_tokens": lambda s: s.total_output_tokens,
    "request_throughput": lambda s: s.request_throughput, "output_throughput": lambda s: s.output_throughput,
    "total_token_throughput": lambda s: s.total_token_throughput,
    **{f"{stat}_{m}_ms": (lambda s, stat=stat, m=m: getattr(getattr(s, m), stat))
       for stat in ("mean", "median", "std") for m in ("ttft", "tpot", "itl")},
    **{f"p99_{m}_ms": (lambda s, m=m: getattr(s, m).p("p99")) for m in ("ttft", "tpot", "itl")},
}  # fmt: skip


def test_vllm_json_every_result_every_figure() -> None:
    lines = (FIX / "vllm-save-result-llama3b-l40s.jsonl").read_text().splitlines()
    summaries = _summaries("vllm-save-result-llama3b-l40s.jsonl")
    for line, s in zip(lines, summaries, strict=True):
        raw = json.loads(line)
        for key, read in KEYS.items():
            assert read(s) == raw[key], key
        assert s.request_rate == ("inf" if raw["request_rate"] == "inf" else raw["request_rate"])
        assert s.other["deployment"] == raw["deployment"]
    assert [s.request_rate for s in summaries] == [10.0, 30.0, "inf"] * 3
    assert [s.other["deployment"] for s in summaries] == ["no-features"] * 3 + ["base"] * 3 + ["kvcache"] * 3


# --- SGLang ----------------------------------------------------------------------------------------


def test_sglang_console_every_figure() -> None:
    (s,) = _summaries("sglang-bench-deepseek-ocr.txt")
    assert _stated(s) == {
        "tool": "sglang bench_serving", "source_format": "console", "index": 0, "backend": "sglang",
        "request_rate": "inf", "max_concurrency": 1, "completed": 10, "duration_s": 4.45,
        "total_input_tokens": 1972, "total_output_tokens": 2784, "total_output_tokens_retokenized": 2770,
        "request_throughput": 2.25, "input_throughput": 442.89, "output_throughput": 625.26,
        "peak_output_throughput": 635.00, "peak_concurrent_requests": 4, "total_token_throughput": 1068.16,
        "mean_concurrency": 1.00,
        "e2e": _lat(443.32, 493.29),
        "ttft": _lat(21.59, 20.89, p99=24.81),
        "tpot": _lat(1.47, 1.52, p99=1.53),
        "itl": _lat(1.52, 1.51, max=8.28, p95=1.76, p99=1.93),
        "other": {"Total input text tokens": 1972, "Total input vision tokens": 0},
    }  # fmt: skip


def test_sglang_jsonl_h200_first_line_every_figure() -> None:
    summaries = _summaries("sglang-bench-llama70b-h200.jsonl")
    assert len(summaries) == 7
    assert _stated(summaries[0]) == {
        "tool": "sglang bench_serving", "source_format": "json", "index": 0, "backend": "sglang",
        "dataset": "random", "request_rate": 1.0, "total_input_tokens": 152612, "total_output_tokens": 160347,
        "total_output_tokens_retokenized": 160192, "output_throughput": 537.4142851849319,
        "duration_s": 298.3675805060193, "completed": 300,
        "e2e": _lat(7840.616212638561, 7819.046192569658),
        "ttft": _lat(median=85.74514742940664),
        "itl": _lat(median=13.638956006616354),
        "other": {"sharegpt_output_len": None, "random_input_len": 1024, "random_output_len": 1024,
                  "random_range_ratio": 0.0},
    }  # fmt: skip
    assert summaries[0].max_concurrency is None  # "max_concurrency": null


def test_sglang_jsonl_h200_every_line() -> None:
    lines = (FIX / "sglang-bench-llama70b-h200.jsonl").read_text().splitlines()
    summaries = _summaries("sglang-bench-llama70b-h200.jsonl")
    for line, s in zip(lines, summaries, strict=True):
        raw = json.loads(line)
        assert (s.request_rate, s.completed, s.duration_s, s.output_throughput) == (
            raw["request_rate"], raw["completed"], raw["duration"], raw["output_throughput"]
        )  # fmt: skip
        assert s.ttft is not None and s.itl is not None and s.e2e is not None
        assert (s.ttft.median, s.itl.median, s.e2e.mean, s.e2e.median) == (
            raw["median_ttft_ms"], raw["median_itl_ms"],
            raw["mean_e2e_latency_ms"], raw["median_e2e_latency_ms"],
        )  # fmt: skip
        assert (s.total_input_tokens, s.total_output_tokens, s.total_output_tokens_retokenized) == (
            raw["total_input_tokens"], raw["total_output_tokens"], raw["total_output_tokens_retokenized"]
        )  # fmt: skip


def test_sglang_jsonl_issue_line_every_figure() -> None:
    """The modern JSONL line (Infinity rate, p95 ITL, concurrency), with its stored line break."""
    (s,) = _summaries("sglang-bench-issue12389-c16.jsonl")
    assert _stated(s) == {
        "tool": "sglang bench_serving", "source_format": "json", "index": 0, "backend": "sglang",
        "dataset": "random", "request_rate": "inf", "max_concurrency": 16, "duration_s": 91.82476212800248,
        "completed": 300, "total_input_tokens": 75000000, "total_output_tokens": 300000,
        "total_output_tokens_retokenized": 0, "request_throughput": 3.267092590795978,
        "input_throughput": 816773.1476989945, "output_throughput": 3267.0925907959777,
        "mean_concurrency": 15.552023523175109,
        "e2e": _lat(4760.202868748844, 4825.5520130333025, 698.243004441158, p99=5812.809163999625),
        "ttft": _lat(0.0, 0.0, 0.0, p99=0.0),
        "tpot": _lat(4.76496783658543, 4.830382395428731, 0.6989419463875456, p99=5.818627791791416),
        "itl": _lat(0.0, 0.0, 0.0, p95=0.0, p99=0.0),
        "other": {"sharegpt_output_len": None, "random_input_len": 250000, "random_output_len": 1000,
                  "random_range_ratio": 1.0, "total_input_text_tokens": 75000000,
                  "total_input_vision_tokens": 0, "accept_length": None},
    }  # fmt: skip


# --- guidellm --------------------------------------------------------------------------------------

GUIDELLM_TTFT = _lat(
    16.792535781860348, 16.38054847717285, 1.1303385708366516, 21.281957626342773, 46,
    **{"p0.1": 15.790939331054688, "p1": 15.790939331054688, "p5": 15.971660614013672,
       "p10": 16.034841537475586, "p25": 16.111373901367188, "p75": 16.840696334838867,
       "p90": 18.505334854125977, "p95": 19.00935173034668, "p99": 21.281957626342773,
       "p99.9": 21.281957626342773},
)  # fmt: skip
GUIDELLM_TTFT["min"] = 15.790939331054688


@pytest.mark.parametrize("name", ["guidellm-benchmarks-stripped.json", "guidellm-benchmarks-stripped.yaml"])
def test_guidellm_report_every_figure(name: str) -> None:
    (s,) = _summaries(name)
    d = _stated(s)
    latencies = {k: d.pop(k) for k in ("ttft", "tpot", "tpot_with_first", "e2e")}
    assert d == {
        "tool": "guidellm", "source_format": name.rsplit(".", 1)[1], "index": 0, "label": "synchronous",
        "date": "2025-06-05T20:59:28Z", "backend": "openai_http", "model": "example_model",
        "tokenizer": "example_processor", "dataset": "prompt_tokens=256,output_tokens=128",
        "max_concurrency": 1,  # a synchronous benchmark: one request at a time
        "mean_concurrency": 0.9977627456483604, "completed": 46, "failed": 0, "incomplete": 1,
        "duration_s": 29.997201442718506, "total_input_tokens": 11827, "total_output_tokens": 5888,
        "request_throughput": 1.5481806532737452, "output_throughput": 198.13346751788123,
        "total_token_throughput": 992.6867036588937,
        "other": {"backend_target": "example_target", "profile": "sweep"},
    }  # fmt: skip
    assert latencies["ttft"] == GUIDELLM_TTFT
    assert latencies["tpot"]["n"] == latencies["tpot_with_first"]["n"] == latencies["e2e"]["n"] == 46
    # guidellm's inter-token latency (per request, first token excluded) is orch's TPOT ...
    assert (latencies["tpot"]["mean"], latencies["tpot"]["percentiles"]["p99"]) == (
        4.941609043733832, 5.258346167136365
    )  # fmt: skip
    # ... and its time per output token (first token included) is kept as such
    assert (latencies["tpot_with_first"]["mean"], latencies["tpot_with_first"]["percentiles"]["p99"]) == (
        4.90300272307966, 5.217265337705612
    )  # fmt: skip
    assert s.itl is None  # guidellm states no distribution of the gaps between chunks
    # request_latency is stated in seconds; read in ms
    assert latencies["e2e"]["mean"] == 0.6444743664368339 * 1000
    assert latencies["e2e"]["percentiles"]["p99"] == 0.6891846656799316 * 1000


def test_guidellm_figures_match_guidellm_own_console() -> None:
    """guidellm's own table for this report (benchmarks_stripped_output.txt at the same commit):
    Per Second 1.55, Concurrency 1.00, Out Tok/sec 198.1, Tot Tok/sec 992.7, Req Latency (sec)
    0.64/0.64/0.69, TTFT 16.8/16.4/21.3, ITL 4.9/4.9/5.3, TPOT 4.9/4.9/5.2 (mean/median/p99)."""
    (s,) = _summaries("guidellm-benchmarks-stripped.json")
    assert s.ttft and s.tpot and s.tpot_with_first and s.e2e
    assert (round(s.request_throughput or 0, 2), round(s.mean_concurrency or 0, 2)) == (1.55, 1.00)
    assert (round(s.output_throughput or 0, 1), round(s.total_token_throughput or 0, 1)) == (198.1, 992.7)

    def row(lat: Any, scale: float = 1.0) -> tuple[float, ...]:
        return tuple(round(v / scale, 2 if scale > 1 else 1) for v in (lat.mean, lat.median, lat.p("p99")))

    assert row(s.e2e, 1000) == (0.64, 0.64, 0.69)
    assert row(s.ttft) == (16.8, 16.4, 21.3)
    assert row(s.tpot) == (4.9, 4.9, 5.3)  # guidellm's "ITL" column: not swapped, the p99s differ
    assert row(s.tpot_with_first) == (4.9, 4.9, 5.2)  # guidellm's "TPOT" column


# --- orch's own levels in the same terms -----------------------------------------------------------


def test_an_orch_level_becomes_a_summary() -> None:
    from orchestrator.models.results import Percentiles
    from orchestrator.models.serving_results import LevelSummary

    def pct(n: int, mean: float, p50: float, p95: float | None, p99: float | None) -> Percentiles:
        return Percentiles(n=n, mean=mean, p50=p50, p95=p95, p99=p99)

    level = LevelSummary(
        level="c8", n=120, ok=118, errors=1, aborted=1, duration_s=30.5,
        ttft_ms=pct(118, 20.0, 18.0, 40.0, 55.0), itl_ms=pct(1800, 5.0, 4.8, 7.0, 9.0),
        tpot_ms=pct(118, 5.1, 5.0, 6.0, 6.5), e2e_ms=pct(118, 100.0, 95.0, 150.0, None),
        input_tokens_per_s=300.0, output_tokens_per_s=60.0, requests_per_s=3.9, error_rate=1 / 120,
        abort_rate=1 / 120, slo_attainment=0.95, request_goodput=3.7, output_tokens=1830,
    )  # fmt: skip
    s = ServingSummary.from_level(level, model="lab-tiny")
    assert (s.tool, s.label, s.max_concurrency, s.request_rate) == ("orch", "c8", 8, None)
    assert (s.completed, s.failed, s.incomplete, s.duration_s) == (118, 1, 1, 30.5)
    assert (s.output_throughput, s.request_throughput, s.total_output_tokens) == (60.0, 3.9, 1830)
    assert s.ttft is not None and s.ttft.p("p99") == 55.0 and s.ttft.n == 118 and s.ttft.median == 18.0
    assert s.e2e is not None and s.e2e.p("p99") is None  # hidden below n = 100 stays unstated
    assert s.other["slo_attainment"] == 0.95 and s.request_goodput == 3.7
    rate = ServingSummary.from_level(level.model_copy(update={"level": "r0.5"}))
    assert (rate.request_rate, rate.max_concurrency) == (0.5, None)


# --- detection, CLI --------------------------------------------------------------------------------


def test_detection_by_text_not_name(tmp_path: Path) -> None:
    for src, kind in (("vllm-bench-qwen3-8b-jetson-thor-c8.txt", "vllm-bench"),
                      ("sglang-bench-deepseek-ocr.txt", "sglang-bench"),
                      ("vllm-save-result-llama3b-l40s.jsonl", "vllm-bench-json"),
                      ("sglang-bench-issue12389-c16.jsonl", "sglang-bench-json"),
                      ("guidellm-benchmarks-stripped.yaml", "guidellm")):  # fmt: skip
        renamed = tmp_path / "result.out"
        renamed.write_text((FIX / src).read_text())
        assert parse_file(renamed).kind == kind


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def test_cli_json_has_every_summary(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["parse", "--json", str(FIX / "vllm-save-result-llama3b-l40s.jsonl")], capsys)
    (doc,) = json.loads(out)
    assert rc == 0 and doc["kind"] == "vllm-bench-json" and len(doc["serving"]) == 9
    assert doc["serving"][2]["request_rate"] == "inf"  # JSON, not a bare Infinity
    assert doc["serving"][0]["ttft"]["percentiles"]["p99"] == 98.69780922984769


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(["parse", str(FIX / "sglang-bench-deepseek-ocr.txt")], capsys)
    flat = " ".join(out.split())
    assert rc == 0 and "sglang bench_serving" in flat and "20.89/24.81" in flat and "625.26" in flat


def test_cli_escapes_text_from_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model name is data: Rich markup and escape sequences from the file are shown as text."""
    line = json.loads((FIX / "vllm-save-result-llama3b-l40s.jsonl").read_text().splitlines()[0])
    line["model_id"] = "[bold red]x[/bold red]\x1b[2J"
    f = tmp_path / "r.json"
    f.write_text(json.dumps(line))
    rc, out, _ = _run(["parse", str(f)], capsys)
    assert rc == 0 and "[bold red]x[/bold red]" in out and "\x1b[2J" not in out


# --- refusals --------------------------------------------------------------------------------------


def _refused(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    f = tmp_path / "pasted.txt"
    f.write_text(text)
    rc, _, err = _run(["parse", *args, str(f)], capsys)
    msg = " ".join(err.split())
    assert rc == 2 and "Traceback" not in err and "pasted.txt" in msg, msg
    return msg


def test_truncated_console_summary_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "vllm-bench-qwen3-8b-jetson-thor-c8.txt").read_text()
    cut = text[: text.index("P99 TPOT")]
    msg = _refused(tmp_path, cut, capsys)
    assert "summary 1 is cut short: no closing ==== line" in msg


def test_summary_without_its_counts_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "vllm-bench-qwen3-8b-jetson-thor-c8.txt").read_text()
    msg = _refused(tmp_path, text.replace("Successful requests:                     100\n", ""), capsys)
    assert "summary 1 states no 'Successful requests'" in msg


@pytest.mark.parametrize(
    ("label", "new", "why"),
    [
        ("Mean TTFT (ms):", "Mean TTFT (ms):    n/a", "Mean TTFT (ms) is not a number: 'n/a'"),
        ("Successful requests:", "Successful requests:    99.5", "Successful requests is not a count"),
        ("Median ITL (ms):", "Median ITL (ms) 72.52", "not 'label: value'"),
        # characters stuck to the number (no blank between): not a number, refused as before
        ("Successful requests:", "Successful requests:  100x", "Successful requests is not a number: '100x'"),
        ("P99 ITL (ms):", "P99 ITL (ms): 361.74\nP99 ITL (ms): 1.0", "'P99 ITL (ms)' is stated twice"),
    ],
)
def test_bad_summary_line_is_refused(
    label: str, new: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (FIX / "vllm-bench-qwen3-8b-jetson-thor-c8.txt").read_text().splitlines()
    (at,) = [k for k, ln in enumerate(lines) if ln.startswith(label)]
    lines[at] = new
    assert why in _refused(tmp_path, "\n".join(lines) + "\n", capsys)


def test_truncated_json_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "vllm-save-result-llama3b-l40s.jsonl").read_text()
    msg = _refused(tmp_path, text[: len(text) // 2], capsys)
    assert "JSON value 5 (line 5) is not valid JSON" in msg


def test_json_of_another_tool_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sglang = (FIX / "sglang-bench-llama70b-h200.jsonl").read_text()
    msg = _refused(tmp_path, sglang, capsys, "--kind", "vllm-bench-json")
    assert "result 1 has no 'model_id': not a vllm bench serve result" in msg
    msg = _refused(tmp_path, '{"accuracy": 0.9, "n": 3}\n', capsys)
    assert "cannot tell what tool wrote this file" in msg and "vllm-bench-json" in msg


def test_guidellm_report_of_another_schema_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((FIX / "guidellm-benchmarks-stripped.json").read_text())
    del doc["benchmarks"][0]["metrics"]["time_to_first_token_ms"]
    msg = _refused(tmp_path, json.dumps(doc), capsys)
    assert "benchmark 1: metrics has no time_to_first_token_ms" in msg
    doc["benchmarks"] = []
    assert "no 'benchmarks' list" in _refused(tmp_path, json.dumps(doc), capsys, "--kind", "guidellm")


def test_truncated_guidellm_yaml_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "guidellm-benchmarks-stripped.yaml").read_text()
    cut = text[: text.index("request_totals:")]  # the report's head only: metrics, then nothing
    msg = _refused(tmp_path, cut, capsys)
    assert "benchmark 1" in msg


def test_every_serving_parser_keeps_the_raw_text() -> None:
    for fn in (parse_console, parse_vllm_json, parse_sglang_jsonl, parse_guidellm):
        with pytest.raises(ParseError) as info:
            fn("nothing here")
        assert info.value.raw == "nothing here"


def test_serving_kinds_are_registered() -> None:
    assert {"vllm-bench", "vllm-bench-json", "sglang-bench", "sglang-bench-json", "guidellm"} <= set(PARSERS)
    assert detect_kind((FIX / "sglang-bench-llama70b-h200.jsonl").read_text()) == "sglang-bench-json"


# --- guidellm 0.8's report (schema version 2) ------------------------------------------------------

GUIDELLM_V2 = "guidellm-0.8.1-report-v2-c1-c4.json"


def test_guidellm_v2_report_every_level() -> None:
    """Generated with guidellm 0.8.1 against the stand-in server (command in its .source file):
    request_totals sit in metrics, the strategy and backend in config. Each value below is the
    one the JSON states."""
    doc = json.loads((FIX / GUIDELLM_V2).read_text())
    assert doc["metadata"]["version"] == 2
    c1, c4 = _summaries(GUIDELLM_V2)
    assert (c1.label, c1.max_concurrency, c1.request_rate) == ("concurrent@1", 1, None)
    assert (c4.label, c4.max_concurrency, c4.request_rate) == ("concurrent@4", 4, None)
    for s in (c1, c4):
        assert (s.tool, s.tool_version, s.backend, s.model) == ("guidellm", "0.8.1", "openai_http", "m")
        assert (s.completed, s.failed, s.incomplete) == (120, 0, 0)
        assert (s.total_input_tokens, s.total_output_tokens) == (3480, 1920)
        assert s.other == {"backend_target": "http://127.0.0.1:18731", "profile": "concurrent"}
        assert s.ttft and s.ttft.n == 120 and s.e2e and s.e2e.n == 120 and s.itl is None
    assert c1.duration_s == 13.347585678100586 and c4.duration_s == 3.4672305583953857
    assert c1.output_throughput == 143.8462390355844 and c4.output_throughput == 553.7560792866815
    assert c1.request_throughput == 8.990389939724025 and c4.request_throughput == 34.60975495541759
    assert c1.mean_concurrency == 0.9496423181607146 and c4.mean_concurrency == 3.6644572755430094
    assert c1.ttft is not None and c1.ttft.p("p99") == 44.258832931518555
    assert c4.ttft is not None and c4.ttft.p("p99") == 44.96359825134277
    for s, b in zip((c1, c4), doc["benchmarks"], strict=True):
        m = b["metrics"]
        assert s.ttft is not None and s.tpot is not None and s.tpot_with_first is not None
        assert s.e2e is not None and s.ttft.median == m["time_to_first_token_ms"]["successful"]["median"]
        assert s.tpot.p("p99") == m["inter_token_latency_ms"]["successful"]["percentiles"]["p99"]
        assert s.tpot_with_first.mean == m["time_per_output_token_ms"]["successful"]["mean"]
        assert s.e2e.p("p95") == m["request_latency"]["successful"]["percentiles"]["p95"] * 1000


def test_guidellm_v2_figures_match_the_console_of_the_same_run() -> None:
    """guidellm-0.8.1-console-c1-c4.txt is that run's stdout: TTFT Mdn/p95 21.2/36.6 and
    21.7/33.5 ms, ITL (orch's TPOT) 5.3/6.6, TPOT 6.4/7.6 and 6.4/7.8, output tok/s 143.8, 553.8."""
    c1, c4 = _summaries(GUIDELLM_V2)

    def r(v: float | None) -> float:
        return round(v or 0.0, 1)

    assert c1.ttft and c1.tpot and c1.tpot_with_first and c4.ttft and c4.tpot and c4.tpot_with_first
    assert (r(c1.ttft.median), r(c1.ttft.p("p95")), r(c4.ttft.median), r(c4.ttft.p("p95"))) == (
        21.2, 36.6, 21.7, 33.5)  # fmt: skip
    assert (r(c1.tpot.median), r(c1.tpot.p("p95"))) == (5.3, 6.6)
    assert (r(c1.tpot_with_first.p("p95")), r(c4.tpot_with_first.p("p95"))) == (7.6, 7.8)
    assert (r(c1.output_throughput), r(c4.output_throughput)) == (143.8, 553.8)


# --- MLPerf Inference loadgen mlperf_log_summary.txt ------------------------------------------------


def test_mlperf_server_summary_every_figure() -> None:
    """mlcommons/inference_results_v4.1, NVIDIA DGX-H100 llama2-70b-99.9 Server: the values as printed,
    latencies in ns read in ms."""
    (s,) = _summaries("mlperf-summary-llama2-70b-server-h100.txt")
    assert (s.tool, s.label, s.backend) == ("mlperf loadgen", "Server PerformanceOnly: VALID",
                                            "llama2-70b-Server-SUT-LoadGen")  # fmt: skip
    assert (s.request_throughput, s.output_throughput, s.request_rate) == (74.42, 21605.79, 75.0)
    assert s.other["Scheduled samples per second"] == 75.10 and s.other["Result is"] == "VALID"
    assert s.other["Early stopping satisfied"] == "Yes"
    assert s.other["Performance constraints satisfied"] == "Yes"
    assert s.other["TTFT Early Stopping Result"] == s.other["TPOT Early Stopping Result"] == "Run successful."
    assert s.other["ttft_latency (ns)"] == 2000000000 and s.other["tpot_latency (ns)"] == 200000000
    assert s.ttft and s.tpot and s.e2e and s.itl is None
    assert (s.ttft.min, s.ttft.mean, s.ttft.max) == (46375730 / 1e6, 275926440 / 1e6, 720249937 / 1e6)
    assert s.ttft.percentiles == {
        "p50": 272954995 / 1e6, "p90": 372923186 / 1e6, "p95": 401131365 / 1e6, "p97": 421577171 / 1e6,
        "p99": 461278089 / 1e6, "p99.9": 540003020 / 1e6,
    }  # fmt: skip
    assert s.ttft.median == 272954995 / 1e6
    assert (s.tpot.mean, s.tpot.p("p99"), s.tpot.p("p99.9")) == (154960329 / 1e6, 175354317 / 1e6,
                                                                  186347793 / 1e6)  # fmt: skip
    assert (s.e2e.min, s.e2e.p("p50"), s.e2e.p("p99")) == (345984753 / 1e6, 39053490745 / 1e6,
                                                            144812821227 / 1e6)  # fmt: skip
    assert s.completed is None and s.duration_s is None  # loadgen's summary states neither


def test_mlperf_early_stopping_lines_are_kept() -> None:
    """sgrad20Delft/inference: a SingleStream summary whose early-stopping block runs over lines."""
    (s,) = _summaries("mlperf-summary-singlestream-early-stopping.txt")
    assert s.label == "SingleStream PerformanceOnly: VALID" and s.request_rate is None
    assert s.other["90.0th percentile latency (ns)"] == 50798000
    assert s.other["Early Stopping Result"] == (
        "Processed at least 64 queries (210). Would discard 10 highest latency queries. Early stopping "
        "90.0th percentile estimate: 53600708 Not enough queries processed for 99.0th percentile early "
        "stopping estimate (would need to process at least 662 total queries)."
    )
    assert s.e2e is not None and s.e2e.p("p90") == 50798000 / 1e6 and s.e2e.p("p99") == 73720458 / 1e6
    assert s.other["QPS w/ loadgen overhead"] == 20.88 and s.ttft is None


@pytest.mark.parametrize(
    ("cut", "why"),
    [
        ("Result is : VALID\n", "states no 'Result is'"),
        ("Result is : VALID", "Result is : MAYBE"),
        ("Completed samples per second    : 74.42", "Completed samples per second : 7x.42"),
    ],
)
def test_mlperf_summary_refusals(
    cut: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (FIX / "mlperf-summary-llama2-70b-server-h100.txt").read_text()
    assert cut in text
    bad = text.replace(cut, "" if why.startswith("states") else why)
    msg = _refused(tmp_path, bad, capsys)
    expect = {"Result is : MAYBE": "neither VALID nor INVALID", "Completed samples per second : 7x.42":
              "is not a number"}.get(why, why)  # fmt: skip
    assert expect in msg


# --- NVIDIA GenAI-Perf console table ---------------------------------------------------------------


def test_genai_perf_table_with_thousands_separators_and_a_wrapped_row() -> None:
    """genai-perf/docs/dynamo.md: every figure as printed; 1,799.53 is 1799.53."""
    (s,) = _summaries("genai-perf-console-dynamo-streaming.txt")
    assert s.tool == "genai-perf" and s.ttft and s.tpot and s.e2e and s.itl is None
    assert (s.e2e.mean, s.e2e.min, s.e2e.max) == (1799.53, 1783.41, 1802.41)
    assert s.e2e.percentiles == {"p99": 1802.39, "p90": 1802.18, "p75": 1801.73}
    assert (s.ttft.mean, s.ttft.min, s.ttft.max, s.ttft.p("p99")) == (39.13, 21.23, 41.49, 41.48)
    # genai-perf's inter-token latency is per request: orch's TPOT
    assert (s.tpot.mean, s.tpot.p("p99"), s.tpot.p("p75")) == (17.96, 17.98, 17.97)
    assert (s.output_throughput, s.request_throughput, s.completed) == (54.52, 0.55, 10)
    assert s.other["Output Token Throughput Per User (tokens/sec/user) avg"] == 55.67  # the wrapped row
    assert s.other["Time To Second Token (ms) p99"] == 17.26
    assert s.other["Input Sequence Length (tokens) avg"] == 128.00


def test_genai_perf_rows_that_are_missing_stay_empty() -> None:
    """genai-perf/docs/multi_turn.md, without --streaming: no TTFT and no ITL row."""
    (s,) = _summaries("genai-perf-console-multiturn-no-ttft.txt")
    assert s.ttft is None and s.tpot is None and s.e2e is not None
    assert (s.e2e.mean, s.e2e.p("p99"), s.e2e.p("p75")) == (80.88, 123.21, 97.31)
    assert (s.output_throughput, s.request_throughput, s.completed) == (315.70, 22.55, 5)


def test_genai_perf_2024_layout_prints_throughputs_below_the_table() -> None:
    """genai-perf/docs/goodput_tutorial.md: throughput and goodput as `label: value` lines."""
    (s,) = _summaries("genai-perf-console-goodput-2024.txt")
    assert (s.output_throughput, s.request_goodput, s.request_throughput) == (1205.26, 7.21, 10.82)
    assert s.ttft and s.ttft.p("p99") == 12.69 and s.tpot and s.tpot.mean == 1.63
    assert s.completed is None  # this layout prints no request count


def test_genai_perf_cut_table_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "genai-perf-console-dynamo-streaming.txt").read_text()
    msg = _refused(tmp_path, text[: text.index("└")], capsys)
    assert "table 1 is cut short" in msg
    msg = _refused(tmp_path, text.replace("│ 1,799.53 │", "│ 1,7x9.53 │"), capsys)
    assert "'Request Latency (ms)' avg is not a number" in msg


def test_genai_perf_json_export_every_figure() -> None:
    """triton-inference-server/perf_analyzer#298: the export of a streaming run at concurrency 100."""
    (s,) = _summaries("genai-perf-export-c100-streaming.json")
    assert (s.tool, s.source_format, s.model, s.backend) == ("genai-perf", "json", "ensemble", "tensorrtllm")
    assert (s.max_concurrency, s.request_rate) == (100, None)
    assert (s.request_throughput, s.output_throughput) == (17.222547659562533, 44190.56002502682)
    assert s.ttft and s.tpot and s.e2e
    assert (s.ttft.mean, s.ttft.median, s.ttft.std) == (184.63779366666665, 172.8093975, 87.809553196227)
    assert (s.ttft.p("p99"), s.ttft.min, s.ttft.max) == (425.02943662, 21.083577, 511.752837)
    assert (s.tpot.mean, s.tpot.p("p99")) == (2.1767344516666665, 2.2631232999999997)
    assert (s.e2e.p("p95"), s.e2e.p("p25")) == (5892.6711992499995, 5675.43159275)
    assert s.other["output_sequence_length avg"] == 2565.855
    assert s.other["input_config.streaming"] is True


def test_genai_perf_json_in_another_unit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((FIX / "genai-perf-export-c100-streaming.json").read_text())
    doc["time_to_first_token"]["unit"] = "ns"
    msg = _refused(tmp_path, json.dumps(doc), capsys)
    assert "time_to_first_token is in 'ns', not ms" in msg


# --- a vLLM summary with a section orch does not know ------------------------------------------------

# vLLM's Speculative Decoding section as printed in vllm-project/vllm PR #48892 (comment of
# 2026-08-03, "MTP 1"), put verbatim into the Jetson Thor summary before its closing line: a
# CONSTRUCTED combination that pins the mechanics on another summary, not a recorded output (the
# whole published summary with the section is GLM_MTP below).
SPEC_DECODE = (
    "---------------Speculative Decoding---------------\n"
    "Acceptance rate (%):                     83.39     \n"
    "Acceptance length:                       1.83      \n"
    "Drafts:                                  26407     \n"
    "Draft tokens:                            26407     \n"
    "Accepted tokens:                         22021     \n"
    "Per-position acceptance (%):\n"
    "  Position 0:                            83.39     \n"
)


def test_an_unknown_section_is_kept_aside_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (FIX / "vllm-bench-qwen3-8b-jetson-thor-c8.txt").read_text()
    closing = text.rindex("=" * 50)
    f = tmp_path / "spec.txt"
    f.write_text(text[:closing] + SPEC_DECODE + text[closing:])
    (plain,) = _summaries("vllm-bench-qwen3-8b-jetson-thor-c8.txt")
    (s,) = parse_file(f).serving
    assert plain.sections_aside is None
    assert s.sections_aside is not None and list(s.sections_aside) == ["Speculative Decoding"]
    assert "Per-position acceptance (%):" in s.sections_aside["Speculative Decoding"]
    assert s.other["Speculative Decoding: Acceptance rate (%)"] == 83.39
    assert s.other["Speculative Decoding: Position 0"] == 83.39
    assert s.other["Speculative Decoding: Drafts"] == 26407
    # everything else reads as without the section
    assert s.model_dump(exclude={"sections_aside", "other"}) == plain.model_dump(
        exclude={"sections_aside", "other"}
    )
    rc, out, _ = _run(["parse", str(f)], capsys)
    assert rc == 0 and "kept aside, not read: 'Speculative Decoding'" in " ".join(out.split())


# vLLM v0.25.0 with MTP 5: a Failed requests line and the Speculative Decoding section
GLM_MTP = "vllm-bench-glm52-mtp5-spec-decode.txt"
# PR #26478's own test result (vllm-project/vllm#26478, 2025-10-09), the line as its author pasted it:
# the number, then a note after it
PR26478_FAILED = "Failed requests:                         0          <<<<<<< New line"


def test_vllm_speculative_decoding_summary_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    """A whole published summary with the Speculative Decoding section: every figure as printed,
    the section kept aside and named, its per-position lines in `other`."""
    (s,) = _summaries(GLM_MTP)
    assert (s.tool, s.source_format, s.max_concurrency) == ("vllm bench serve", "console", 1)
    assert (s.completed, s.failed, s.duration_s) == (20, 0, 147.90)  # "Failed requests: 0" is read
    assert (s.total_input_tokens, s.total_output_tokens) == (20720, 10240)
    assert (s.request_throughput, s.output_throughput, s.total_token_throughput) == (0.14, 69.24, 209.33)
    assert (s.peak_output_throughput, s.peak_concurrent_requests) == (29.00, 2.00)
    assert s.ttft and s.tpot and s.itl and s.e2e is None
    assert (s.ttft.mean, s.ttft.median, s.ttft.p("p99")) == (520.80, 549.92, 552.10)
    assert (s.tpot.mean, s.tpot.median, s.tpot.p("p99")) == (13.45, 13.09, 18.24)
    assert (s.itl.mean, s.itl.median, s.itl.p("p99")) == (34.88, 35.00, 36.41)
    assert s.sections_aside is not None and list(s.sections_aside) == ["Speculative Decoding"]
    kept = s.sections_aside["Speculative Decoding"].splitlines()
    assert kept[0].startswith("Acceptance rate (%):")
    assert kept[-1] == "  Position 4:                            9.41"
    spec = {k.removeprefix("Speculative Decoding: "): v for k, v in s.other.items() if k.startswith("Spec")}
    assert spec == {"Acceptance rate (%)": 32.14, "Acceptance length": 2.61, "Drafts": 3932,
                    "Draft tokens": 19660, "Accepted tokens": 6319, "Position 0": 67.45,
                    "Position 1": 42.60, "Position 2": 26.09, "Position 3": 15.16,
                    "Position 4": 9.41}  # fmt: skip
    rc, out, err = _run(["parse", str(FIX / GLM_MTP)], capsys)
    assert rc == 0 and "Traceback" not in err
    assert "#1: kept aside, not read: 'Speculative Decoding'" in " ".join(out.split())


def test_text_after_a_number_is_kept_aside_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PR #26478's failed-requests line, with its author's note after the number, put in place of
    the summary's own (a CONSTRUCTED combination: PR #26478's whole block was not at hand): the
    number is read, the line kept aside under its name, everything else as without it."""
    text = (FIX / GLM_MTP).read_text()
    own = "Failed requests:                         0\n"
    assert own in text
    f = tmp_path / "noted.txt"
    f.write_text(text.replace(own, PR26478_FAILED + "\n"))
    (plain,) = _summaries(GLM_MTP)
    (s,) = parse_file(f).serving
    assert s.failed == 0 and s.sections_aside is not None
    assert s.sections_aside["text after a number"] == PR26478_FAILED
    assert s.model_dump(exclude={"sections_aside"}) == plain.model_dump(exclude={"sections_aside"})
    rc, out, err = _run(["parse", str(f)], capsys)
    assert rc == 0 and "Traceback" not in err
    assert "kept aside, not read: 'text after a number', 'Speculative Decoding'" in " ".join(out.split())


# --- guidellm 0.4+ console tables -------------------------------------------------------------------


def test_guidellm_console_tables_every_figure_read() -> None:
    """guidellm 0.8.1's stdout of the same run as its report (status glyphs, Mdn/p95 columns, a
    table of two header blocks): each value as printed, latencies in ms."""
    c1, c4 = _summaries("guidellm-0.8.1-console-c1-c4.txt")
    assert (c1.label, c1.max_concurrency, c4.label, c4.max_concurrency) == (
        "concurrent@1",
        1,
        "concurrent@4",
        4,
    )
    assert (c1.completed, c1.incomplete, c1.failed, c1.duration_s, c4.duration_s) == (120, 0, 0, 13.3, 3.5)
    assert (c1.total_input_tokens, c1.total_output_tokens) == (3480, 1920)
    assert (c1.mean_concurrency, c1.request_throughput, c4.request_throughput) == (0.9, 9.0, 34.6)
    assert (c1.input_throughput, c1.output_throughput, c1.total_token_throughput) == (260.7, 143.8, 404.6)
    assert c1.ttft and c1.tpot and c1.tpot_with_first and c1.e2e and c1.itl is None
    assert (c1.ttft.mean, c1.ttft.median, c1.ttft.p("p95")) == (22.9, 21.2, 36.6)  # "22.9 ± 0.8"
    assert (c1.tpot.mean, c1.tpot.median, c1.tpot.p("p95")) == (5.5, 5.3, 6.6)  # guidellm's ITL
    assert (c1.tpot_with_first.median, c1.tpot_with_first.p("p95")) == (6.4, 7.6)  # its TPOT
    assert (c1.e2e.mean, c1.e2e.p("p95")) == (0.1 * 1000, 0.1 * 1000)  # printed in s, one decimal
    assert c4.tpot_with_first and c4.tpot_with_first.p("p95") == 7.8
    assert c1.other["Text Metrics Statistics: Output Characters Per Second Mean"] == 489.3
    assert c1.other["Run Summary Info: Timings Start"] == "23:30:29"


def test_guidellm_console_agrees_with_its_report() -> None:
    """The same run's JSON report, rounded to the one decimal the console prints."""
    tables = _summaries("guidellm-0.8.1-console-c1-c4.txt")
    report = _summaries(GUIDELLM_V2)
    for t, r in zip(tables, report, strict=True):
        assert t.label == r.label and t.completed == r.completed
        assert t.ttft and r.ttft and t.ttft.median == round(r.ttft.median or 0, 1)
        assert t.tpot and r.tpot and t.tpot.p("p95") == round(r.tpot.p("p95") or 0, 1)
        assert t.output_throughput == round(r.output_throughput or 0, 1)


# --- guidellm 0.3's pipe tables ----------------------------------------------------------------------

GUIDELLM_03 = "guidellm-0.3.0-console-stripped.txt"


def test_guidellm_03_pipe_tables_every_figure_read() -> None:
    """guidellm v0.3.0's own test asset: its console report of guidellm-benchmarks-stripped.json
    (Benchmarks Info and Benchmarks Stats, `Metadata ||||` group spans); each value as printed."""
    (s,) = _summaries(GUIDELLM_03)
    assert (s.tool, s.source_format, s.label, s.max_concurrency) == ("guidellm", "console", "synchronous", 1)
    assert (s.duration_s, s.completed, s.incomplete, s.failed) == (30.0, 46, 1, 0)
    assert (s.total_input_tokens, s.total_output_tokens) == (11827, 5888)
    assert (s.request_throughput, s.mean_concurrency) == (1.55, 1.00)
    assert (s.output_throughput, s.total_token_throughput) == (198.1, 992.7)
    assert s.ttft and s.tpot and s.tpot_with_first and s.e2e and s.itl is None
    assert (s.ttft.mean, s.ttft.median, s.ttft.p("p99")) == (16.8, 16.4, 21.3)
    assert (s.tpot.mean, s.tpot.median, s.tpot.p("p99")) == (4.9, 4.9, 5.3)  # guidellm's ITL (ms)
    assert (s.tpot_with_first.mean, s.tpot_with_first.p("p99")) == (4.9, 5.2)  # its TPOT (ms)
    assert (s.e2e.mean, s.e2e.median, s.e2e.p("p99")) == (0.64 * 1000, 0.64 * 1000, 0.69 * 1000)  # in s
    assert s.other["Benchmarks Info: Metadata Start Time"] == "16:59:28"
    assert s.other["Benchmarks Info: Prompt Tok/Req Comp"] == 257.1
    assert s.other["Benchmarks Info: Output Tok Total Inc"] == 0


def test_guidellm_03_tables_agree_with_the_report_they_render() -> None:
    """The console renders guidellm-benchmarks-stripped.json: its figures rounded as printed."""
    (t,) = _summaries(GUIDELLM_03)
    (r,) = _summaries("guidellm-benchmarks-stripped.json")
    assert (t.completed, t.incomplete, t.failed) == (r.completed, r.incomplete, r.failed)
    assert t.ttft and r.ttft and r.ttft.median and t.ttft.median == round(r.ttft.median, 1)
    assert t.tpot and r.tpot and r.tpot.p("p99") and t.tpot.p("p99") == round(r.tpot.p("p99") or 0, 1)
    assert r.output_throughput and t.output_throughput == round(r.output_throughput, 1)
    assert r.e2e and r.e2e.median and t.e2e and t.e2e.median == round(r.e2e.median / 1000, 2) * 1000


def test_guidellm_03_cut_table_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / GUIDELLM_03).read_text()
    msg = _refused(tmp_path, text[: text.rstrip().rindex("\n")], capsys)  # without its closing rule
    assert "'Benchmarks Stats' is cut short: no closing ==== rule" in msg


# --- AIPerf's JSON export ----------------------------------------------------------------------------


def test_aiperf_json_export_every_figure() -> None:
    """ai-dynamo/aiperf's example profile_export_aiperf.json (gpt-oss-20b, concurrency 100, 10 %
    of requests cancelled): metric objects under `records`, keyed by tag."""
    (s,) = _summaries("aiperf-export-gpt-oss-20b-c100.json")
    assert (s.tool, s.source_format, s.model) == ("aiperf", "json", "openai/gpt-oss-20b")
    assert (s.max_concurrency, s.request_rate, s.completed, s.failed) == (100, None, 89, 11)
    assert (s.duration_s, s.request_throughput) == (9.317788951, 9.551622221540914)
    assert s.output_throughput == 2320.7222350404572
    assert s.ttft and s.tpot and s.e2e and s.itl is None
    assert (s.ttft.mean, s.ttft.median, s.ttft.std, s.ttft.n) == (
        2343.219436988764, 2369.317693, 1049.8164554204095, 89,
    )  # fmt: skip
    assert (s.ttft.min, s.ttft.max, s.ttft.p("p1"), s.ttft.p("p99")) == (
        464.66410099999996, 3853.857423, 581.1957117999999, 3833.3894000399996,
    )  # fmt: skip
    assert (s.tpot.mean, s.tpot.p("p90")) == (27.763065454471807, 32.87232279340302)  # its ITL
    assert (s.e2e.median, s.e2e.p("p95"), s.e2e.max) == (9097.345014999999, 9288.605606, 9299.772642)
    assert s.other["time_to_second_token avg"] == 120.16625153932584  # its tag ttst
    assert s.other["total_osl avg"] == 21624.0
    assert s.other["input_config.streaming"] is True and s.other["input_config.endpoint_type"] == "chat"


def test_aiperf_json_in_another_unit_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((FIX / "aiperf-export-gpt-oss-20b-c100.json").read_text())
    doc["records"]["ttft"]["unit"] = "ns"
    msg = _refused(tmp_path, json.dumps(doc), capsys)
    assert "time_to_first_token is in 'ns', not ms" in msg


# --- an INVALID MLPerf Server summary ----------------------------------------------------------------


def test_mlperf_invalid_server_summary_with_its_early_stopping_lines() -> None:
    """mlcommons/inference#1788: a Server run that exited early; INVALID, a TPOT early-stopping
    result that failed, and a TTFT one that loadgen left empty."""
    (s,) = _summaries("mlperf-summary-server-invalid-issue1788.txt")
    assert (s.tool, s.label, s.backend) == ("mlperf loadgen", "Server PerformanceOnly: INVALID", "PySUT")
    assert (s.request_throughput, s.output_throughput) == (0.11, 43.45)
    assert s.ttft is None and s.e2e is None and s.request_rate is None  # the issue prints no more
    assert s.other["Result is"] == "INVALID"
    assert s.other["Performance constraints satisfied"] == "Yes"
    assert (s.other["Min queries satisfied"], s.other["Early stopping satisfied"]) == ("NO", "NO")
    assert s.other["TPOT Early Stopping Result"] == (
        "Run unsuccessful. Processed 33 queries. Would need to run at least 805 more queries, "
        "with the run being successful if every additional query were under latency."
    )
    assert s.other["TTFT Early Stopping Result"] == ""
    assert str(s.other["Recommendations"]).startswith("The test exited early")


# --- guidellm 0.1's rich boxes -----------------------------------------------------------------------

GUIDELLM_01 = "guidellm-0.1.0-console-inf2-sweep.txt"


def test_guidellm_01_rich_boxes_every_figure_read() -> None:
    """huggingface/optimum-neuron's benchmark guide: guidellm 0.1.0's report of a sweep (three
    benchmarks, four tables inside two frames, TTFT lists wrapped onto a second line)."""
    sync, rate, thr = _summaries(GUIDELLM_01)
    assert [s.label for s in (sync, rate, thr)] == ["synchronous", "asynchronous@0.85 req/sec", "throughput"]
    assert (sync.max_concurrency, rate.request_rate, thr.max_concurrency, thr.request_rate) == (
        1,
        0.85,
        None,
        None,
    )
    assert sync.model == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert [(s.completed, s.failed, s.duration_s) for s in (sync, rate, thr)] == [
        (11, 0, 113.56), (88, 0, 114.59), (55, 0, 64.83),
    ]  # fmt: skip
    assert [(s.request_throughput, s.output_throughput) for s in (sync, rate, thr)] == [
        (0.10, 28.39), (0.77, 221.75), (0.85, 249.64),
    ]  # fmt: skip
    assert sync.ttft and sync.itl and sync.e2e and sync.tpot is None
    assert sync.ttft.mean == 1585.08 and sync.ttft.percentiles == {
        "p1": 1563.3, "p5": 1569.2, "p10": 1576.5, "p50": 1589.4, "p90": 1594.0, "p95": 1595.3,
        "p99": 1596.4,  # the value wrapped onto the next line
    }  # fmt: skip
    assert (sync.itl.mean, sync.itl.median, sync.itl.p("p99")) == (29.81, 29.8, 36.5)  # every gap pooled
    assert (sync.e2e.mean, sync.e2e.p("p1"), sync.e2e.p("p99")) == (10.32 * 1000, 3.68 * 1000, 14.87 * 1000)
    assert rate.itl and (rate.itl.p("p1"), rate.itl.p("p99")) == (0.2, 1613.9)
    assert thr.ttft and (thr.ttft.mean, thr.ttft.p("p95"), thr.ttft.p("p99")) == (24624.46, 45329.8, 51276.9)
    assert thr.other["Tokens Data by Benchmark: Output"] == 294.24
    assert sync.other["Requests Data by Benchmark: Start Time"] == "15:02:17"


def test_guidellm_01_cut_box_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = (FIX / GUIDELLM_01).read_text().splitlines()
    msg = _refused(tmp_path, "\n".join(lines[:-4]), capsys)  # the summary table's └ line and after
    assert "'Performance Summary by Benchmark' is cut short: no closing └ line" in msg

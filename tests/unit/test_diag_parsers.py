"""The diagnostic tools' parsers on verbatim published outputs (tests/fixtures/diag/, each with its
source): every figure asserted is the value printed in the fixture, and a run cut short is a
ParseError that names what is missing, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.errors import ParseError
from orchestrator.parse import parse_file
from orchestrator.provision import diagtools

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "diag"


def _text(name: str) -> str:
    return (FIX / name).read_text()


def test_every_fixture_is_read_through_orch_parse_and_passes_unless_named_fail() -> None:
    """Detection itself is covered with the other kinds in test_parse_cli.DETECTED."""
    for path in sorted(FIX.iterdir()):
        assert parse_file(path).data.passed == ("-fail" not in path.name), path.name


def test_every_fixture_names_its_source() -> None:
    for path in sorted(FIX.iterdir()):
        assert path.read_text().startswith("# source: "), path.name


# --- gpu-burn ---------------------------------------------------------------------------------------


def test_gpu_burn_verdicts_and_last_progress_record() -> None:
    report = diagtools.parse_gpu_burn(_text("gpu-burn-a100x8.txt"))
    assert [(c.gpu, c.status, c.detail) for c in report.checks] == [(g, "pass", "OK") for g in range(8)]
    # the last progress record, as printed:
    # "6783 (16942 Gflop/s) - 6783 (17093 Gflop/s) ... - 4522 (16926 Gflop/s)   errors: 0 - ...
    #  temps: 62 C - 59 C ... 61 C"
    assert report.figure("gflops", gpu=0).value == 16942.0
    assert report.figure("gflops", gpu=0).unit == "Gflop/s"
    assert report.figure("gflops", gpu=1).value == 17093.0
    assert report.figure("gflops", gpu=7).value == 16926.0
    assert [report.figure("errors", gpu=g).value for g in range(8)] == [0.0] * 8
    assert report.figure("temperature", gpu=0).value == 62.0
    assert report.figure("temperature", gpu=7).value == 61.0
    records = re.findall(
        r"proc'd: (.*?)\s+errors:.*?temps: ((?:\d+ C(?: - )?)+)", _text("gpu-burn-a100x8.txt")
    )
    last = records[-1]
    printed_gflops = [float(g) for g in re.findall(r"\((\d+) Gflop/s\)", last[0])]
    printed_temps = [float(t.removesuffix(" C")) for t in last[1].strip().split(" - ")]
    assert [report.figure("gflops", gpu=g).value for g in range(8)] == printed_gflops
    assert [report.figure("temperature", gpu=g).value for g in range(8)] == printed_temps


def test_gpu_burn_faulty_gpu_fails_the_report() -> None:
    text = _text("gpu-burn-a100x8.txt").replace("\tGPU 3: OK", "\tGPU 3: FAULTY")
    report = diagtools.parse_gpu_burn(text)
    assert not report.passed
    assert [c.gpu for c in report.checks if c.status == "fail"] == [3]
    # an error count with a note after it still counts; a word instead of a count is no figure
    last = text.rindex("errors: 0 - 0 - 0 - 0")
    noted = text[:last] + "errors: 0 - 0 - 0 - 12 (WARNING!) - 0 - 0 - 0 - 0" + text[last + 37 :]
    assert diagtools.parse_gpu_burn(noted).figure("errors", gpu=3).value == 12.0


def test_gpu_burn_cut_short_is_a_clear_error() -> None:
    text = _text("gpu-burn-a100x8.txt")
    cut = text[: text.index("Tested 8 GPUs")]
    with pytest.raises(ParseError, match="no 'Tested N GPUs' verdict") as e:
        diagtools.parse_gpu_burn(cut)
    assert e.value.raw == cut
    with pytest.raises(ParseError, match="tested 8 GPUs and gives 7"):
        diagtools.parse_gpu_burn(text.replace("\tGPU 7: OK\n", ""))


# --- nvbandwidth ------------------------------------------------------------------------------------


def test_nvbandwidth_sums_and_cells() -> None:
    report = diagtools.parse_nvbandwidth(_text("nvbandwidth-gh200-v0.6.txt"))
    assert report.version == "v0.6"
    assert report.figure("host_to_device_memcpy_ce", where="sum").value == 1985.60
    assert report.figure("host_to_device_memcpy_ce", gpu=2, where="row 0 col 2").value == 412.11
    assert report.figure("host_to_device_memcpy_ce", gpu=0, where="row 1 col 0").value == 323.36
    cells = [f.value for f in report.figures if f.name == "host_to_device_memcpy_ce" and f.where != "sum"]
    assert sum(cells) == pytest.approx(1985.60)
    latency = report.figure("host_device_latency_sm", where="sum")
    assert (latency.value, latency.unit) == (772.58, "ns")
    assert report.figure("device_to_host_memcpy_sm", where="sum").unit == "GB/s"
    ran = re.findall(r"^Running (\S+)\.", _text("nvbandwidth-gh200-v0.6.txt"), re.M)
    assert [c.name for c in report.checks if c.status == "pass"] == ran
    waived = [c for c in report.checks if c.status == "skip"]
    assert waived and waived[0].detail == "17 test cases waived"


# --- perftest ---------------------------------------------------------------------------------------


def test_ib_write_bw_row_as_printed() -> None:
    report = diagtools.parse_perftest_bw(_text("ib_write_bw-roce-postlist.txt"))
    (check,) = report.checks
    assert check.name == "RDMA_Write Post List"
    assert check.detail == "Device ib0, Link type Ethernet"
    # " 8          224958464        0.00               0.48   \t\t   7.498617"
    assert report.figure("bw_peak", where="8 bytes").value == 0.0
    average = report.figure("bw_average", where="8 bytes")
    assert (average.value, average.unit) == (0.48, "Gb/s")
    assert report.figure("msg_rate", where="8 bytes").value == 7.498617


# --- TransferBench ----------------------------------------------------------------------------------


def test_transferbench_transfer_and_aggregate() -> None:
    report = diagtools.parse_transferbench(_text("transferbench-v1.69-dma-htod.txt"))
    assert report.version == "1.69.00"
    assert report.figure("transfer_gbs", where="test 1 transfer 0: P0 -> D0:1 -> G0").value == 0.535
    assert report.figure("aggregate_gbs", where="test 1").value == 0.534


@pytest.mark.parametrize(
    ("fixture", "cut_at", "parse", "error"),
    [
        (
            "nvbandwidth-gh200-v0.6.txt",
            "SUM host_device_latency_sm",
            diagtools.parse_nvbandwidth,
            "host_device_latency_sm has no SUM line",
        ),
        (
            "ib_write_bw-roce-postlist.txt",
            " 8          224958464",
            diagtools.parse_perftest_bw,
            "no result row",
        ),
        (
            "transferbench-v1.69-dma-htod.txt",
            " Aggregate (CPU)",
            diagtools.parse_transferbench,
            "test 1 has no Aggregate line",
        ),
    ],
)
def test_output_cut_short_is_a_clear_error(
    fixture: str, cut_at: str, parse: Callable[[str], object], error: str
) -> None:
    """nvbandwidth without its SUM line, ib_write_bw without a result row, TransferBench without
    its Aggregate line: each a ParseError naming what is missing."""
    text = _text(fixture)
    with pytest.raises(ParseError, match=error):
        parse(text[: text.index(cut_at)])


# --- dcgmi diag -j ----------------------------------------------------------------------------------


def test_dcgmi_diag_checks_and_info_figures() -> None:
    report = diagtools.parse_dcgmi_diag_json(_text("dcgmi-diag-r3-1gpu.json"))
    statuses = {(c.name, c.gpu): c.status for c in report.checks}
    assert statuses[("Deployment: Denylist", None)] == "pass"
    assert statuses[("Hardware: EUD Test", 0)] == "skip"
    assert statuses[("Stress: Memory Bandwidth", 0)] == "pass"
    assert len(report.checks) == 16 and report.passed
    # "GPU 0 GPU 0 GPU to Host bandwidth:\t\t13.15 GB/s, ... bidirectional latency:\t\t4.621 us"
    pcie = report.figure("PCIe", gpu=0, where="GPU to Host bandwidth")
    assert (pcie.value, pcie.unit) == (13.15, "GB/s")
    assert report.figure("PCIe", gpu=0, where="bidirectional bandwidth").value == 22.48
    assert report.figure("PCIe", gpu=0, where="bidirectional latency").value == 4.621
    assert report.figure("Diagnostic", gpu=0, where="gigaflops").value == 11103.02
    assert report.figure("Targeted Stress", gpu=0, where="relative stress level").value == 3184.0
    assert report.figure("Targeted Power", gpu=0, where="power average").value == 70.0


def test_dcgmi_diag_fail_and_refusals() -> None:
    text = _text("dcgmi-diag-r3-1gpu.json")
    at = text.index("relative stress level")  # Targeted Stress's result: its status follows
    failed = text[:at] + text[at:].replace('"status" : "Pass"', '"status" : "Fail"', 1)
    report = diagtools.parse_dcgmi_diag_json(failed)
    assert [(c.name, c.gpu) for c in report.checks if c.status == "fail"] == [("Stress: Targeted Stress", 0)]
    assert not report.passed
    cut = text[: len(text) // 2]
    with pytest.raises(ParseError, match="malformed output") as e:
        diagtools.parse_dcgmi_diag_json(cut)
    assert e.value.raw == cut
    with pytest.raises(ParseError, match=r"DCGM 4\.x JSON is not read yet"):
        diagtools.parse_dcgmi_diag_json('{"DCGM Diagnostic": {"tests": []}}')


# --- ROCm Validation Suite --------------------------------------------------------------------------

_RVS_GST = "rvs-gst-mi355x-1.6.75.txt"
_RVS_IET = "rvs-iet-mi355x-1.6.75.txt"


def test_rvs_gst_per_gpu_gflops_and_verdicts_as_printed() -> None:
    text = _text(_RVS_GST)
    report = diagtools.parse_rvs(text)
    assert report.tool == "rvs" and report.version == "1.6.75"
    # each 'met:' line as printed: [GPU:: 42583] GFLOPS 1063560 Target GFLOPS: 0 met: TRUE ...
    printed = re.findall(r"\[GPU:: *(\d+)\] GFLOPS (\d+) Target GFLOPS: \S+ met: (TRUE|FALSE)", text)
    assert len(printed) == 4  # AMD's sample elides the other four GPUs' results ("...")
    # the summary places RVS's GPU ids: "AMD Instinct MI355X - 42583" over "0 - 2 - 0000:05:00.0"
    index = {42583: 0, 27226: 1, 11806: 6, 57875: 7}
    action = "gst-Tflops-2K2K2K-trig-fp4"
    for rvs_id, gflops, _met in printed:
        gpu = index[int(rvs_id)]
        figure = report.figure("gflops", gpu=gpu, where=f"{action} gpu id {rvs_id}")
        assert (figure.value, figure.unit) == (float(gflops), "Gflop/s")
    assert report.figure("gflops", gpu=6, where=f"{action} gpu id 11806").value == 1073132.0
    per_gpu = [(c.gpu, c.status) for c in report.checks if c.gpu is not None]
    assert per_gpu == [(0, "pass"), (1, "pass"), (6, "pass"), (7, "pass")]
    summary = [c for c in report.checks if c.gpu is None]
    assert [(c.name, c.status, c.detail) for c in summary] == [(action, "pass", "GST in the summary")]


def test_rvs_iet_last_power_per_gpu_and_pass_lines() -> None:
    text = _text(_RVS_IET)
    report = diagtools.parse_rvs(text)
    action = "iet-stress-1400W-true"
    passes = re.findall(r"\[GPU:: *(\d+)\] pass: (TRUE|FALSE)", text)
    assert len(passes) == 8 and {p for _, p in passes} == {"TRUE"}
    checks = [c for c in report.checks if c.gpu is not None]
    assert sorted(c.gpu or 0 for c in checks) == list(range(8))
    assert {c.status for c in checks} == {"pass"}
    # each GPU's last Power(W) line as printed (before the summary)
    last: dict[str, float] = {}
    for rvs_id, watts in re.findall(r"\[GPU:: *(\d+)\] Power\(W\) (\d+\.\d+)", text):
        last[rvs_id] = float(watts)
    powers = {f.where: f.value for f in report.figures if f.name == "power"}
    assert powers == {f"{action} gpu id {k}": v for k, v in last.items()}
    assert report.figure("power", gpu=4, where=f"{action} gpu id 1590").value == 1401.0
    assert report.figure("power", gpu=0, where=f"{action} gpu id 42583").unit == "W"


def test_rvs_fail_and_cut_short() -> None:
    text = _text(_RVS_GST)
    failed = text.replace(
        "GFLOPS 1068301 Target GFLOPS: 0 met: TRUE", "GFLOPS 1068301 Target GFLOPS: 0 met: FALSE"
    )
    failed = failed.replace("| GST            | PASS ", "| GST            | FAIL ")
    report = diagtools.parse_rvs(failed)
    assert not report.passed
    assert [c.gpu for c in report.checks if c.status == "fail"] == [1, None]
    cut = text[: text.index("+=====")]
    with pytest.raises(ParseError, match="Summary"):
        diagtools.parse_rvs(cut)


# --- dcgmi diag, the text table ---------------------------------------------------------------------

_DCGM_TABLE = "dcgmi-diag-table-3.3.8.txt"


def test_dcgmi_table_every_row_as_printed() -> None:
    text = _text(_DCGM_TABLE)
    report = diagtools.parse_dcgmi_diag_table(text)
    assert report.tool == "dcgmi diag" and report.version == "3.3.8" and report.passed
    # every "| <test> | <Result> |" row outside Metadata, its category from the separator above it
    rows = re.findall(r"^\| (\S[^|]*?)\s*\| (Pass|Fail|Skip|Warn)\b", text, re.M)
    assert len(rows) == 11
    assert [(c.name.split(": ", 1)[1], c.status.capitalize()) for c in report.checks] == rows
    assert report.checks[0].name == "Deployment: Denylist"
    # "Pass - All" is per GPU: the Metadata lists one device (2330): GPU 0
    assert [(c.name, c.gpu) for c in report.checks if c.gpu is not None] == [
        ("Integration: PCIe", 0), ("Hardware: GPU Memory", 0)]  # fmt: skip
    # the Info row, wrapped by dcgmi at its column width, joined back
    persistence = next(c for c in report.checks if c.name == "Deployment: Persistence Mode")
    assert persistence.detail == (
        'Info: Persistence mode for GPU 0 is disabled. Enable persistence mode by running "nvidia-smi'
        ' -i <gpuId> -pm 1 " as root.'
    )
    assert report.figures == []  # this run printed no numbers (not run with -v)
    assert diagtools.parse_dcgmi_diag(text) == report


def test_dcgmi_table_fail_and_cut_short() -> None:
    text = _text(_DCGM_TABLE)
    failed = diagtools.parse_dcgmi_diag_table(
        text.replace("| GPU Memory                | Pass - All", "| GPU Memory                | Fail - All")
    )
    assert not failed.passed
    assert [(c.name, c.gpu) for c in failed.checks if c.status == "fail"] == [("Hardware: GPU Memory", 0)]
    cut = text[: text.index("+-----  Stress")]
    with pytest.raises(ParseError, match="closing border"):
        diagtools.parse_dcgmi_diag_table(cut)
    with pytest.raises(ParseError, match="unknown result"):
        diagtools.parse_dcgmi_diag_table(
            text.replace("| Inforom                   | Pass", "| Inforom   | Maybe")
        )


def _printed_transfers(text: str) -> list[tuple[str, str, float]]:
    """Each pebb/pbqt transfer line as printed: (source, destination, GBps)."""
    found = re.findall(
        r"-bandwidth ?\[ ?\d+/\d+\] \[(CPU:: \d+|GPU:: [^\]]+)\] \[GPU:: ([^\]]+)\].*? ([\d.]+) GBps", text
    )
    return [(s, d, float(v)) for s, d, v in found]


def test_rvs_pebb_each_transfer_as_printed() -> None:
    text = _text("rvs-pebb-mi355x-1.6.75.txt")
    report = diagtools.parse_rvs(text)
    printed = _printed_transfers(text)
    assert len(printed) == 10  # AMD's sample elides transfers 3..8 ("...")
    assert [f.value for f in report.figures] == [v for _, _, v in printed]
    assert {f.name for f in report.figures} == {"pcie_bandwidth"} and {f.unit for f in report.figures} == {
        "GBps"
    }
    first = report.figures[0]
    assert (first.gpu, first.where) == (0, "pcie_h2d_bandwidth CPU 0 -> gpu id 42583 h2d::true d2h::false")
    assert report.figure("pcie_bandwidth", gpu=0, where="pcie_h2d_bandwidth CPU 1 -> gpu id 42583 h2d::true "
                         "d2h::false").value == 54.034  # fmt: skip


def test_rvs_pbqt_each_transfer_as_printed() -> None:
    text = _text("rvs-pbqt-mi355x-1.6.75.txt")
    report = diagtools.parse_rvs(text)
    printed = _printed_transfers(text)
    assert len(printed) == 9
    assert [f.value for f in report.figures] == [v for _, _, v in printed]
    # the source GPU's index from the summary: 11806 is "6 - 8 - 0000:e5:00.0", 57875 "7 - 9 - ..."
    assert [f.gpu for f in report.figures] == [6, 6] + [7] * 7
    low = min(report.figures, key=lambda f: f.value)
    assert (low.value, low.where) == (59.704, "xgmi_d2d_unidir_bandwidth gpu id 57875 -> gpu id 36479 "
                                      "bidirectional: false")  # fmt: skip


def test_rvs_babel_table_as_printed() -> None:
    text = _text("rvs-babel-mi355x-1.6.75.txt")
    report = diagtools.parse_rvs(text)
    rows = re.findall(r"^42583\s+(\w+)\s+([\d.]+)", text, re.M)
    assert len(rows) == 7
    assert [(f.name, f.value) for f in report.figures] == [(f"babel_{n.lower()}", float(v)) for n, v in rows]
    assert report.figure("babel_triad", gpu=0, where="babel-double-825MiB gpu id 42583").value == 6031416.066
    assert {f.unit for f in report.figures} == {"MB/s"}
    assert [(c.name, c.status) for c in report.checks] == [("babel-double-825MiB", "pass")]


def test_dcgmi_table_per_gpu_results_warning_and_power_as_printed() -> None:
    text = _text("dcgmi-diag-table-3.3.9-r3-a10g-fail.txt")
    report = diagtools.parse_dcgmi_diag_table(text)
    assert report.version == "3.3.9" and not report.passed
    # "| Targeted Power | Pass - GPUs: 0, 2, 3 |" then "|  | Fail - GPU: 1 |"
    power = [(c.gpu, c.status) for c in report.checks if c.name == "Stress: Targeted Power"]
    assert power == [(0, "pass"), (2, "pass"), (3, "pass"), (1, "fail")]
    assert [(c.name, c.gpu) for c in report.checks if c.status == "fail"] == [("Stress: Targeted Power", 1)]
    # "- All" over the four devices the Metadata lists (2237,2237,2237,2237); EUD skipped on each
    assert [c.gpu for c in report.checks if c.name == "Stress: EUD Test"] == [0, 1, 2, 3]
    assert {c.status for c in report.checks if c.name == "Stress: EUD Test"} == {"skip"}
    detail = next(c.detail for c in report.checks if c.name == "Stress: Targeted Power") or ""
    assert (
        "Warning: GPU 1 Max power of 224.1 did not reach desired power minimum "
        "target_power_min_ratio of 224.2 for GPU 1" in detail
    )
    # each Info row as printed: "GPU N GPU N max power: X W average power usage: Y W" (wrapped)
    printed = re.findall(
        r"GPU (\d) GPU \d max power: ([\d.]+) W average power\s*\|\n\|\s*\|\s*usage: ([\d.]+) W", text
    )
    assert [g for g, _, _ in printed] == ["0", "2", "3"]
    for gpu, peak, average in printed:
        assert report.figure("Targeted Power", gpu=int(gpu), where="max power").value == float(peak)
        assert report.figure("Targeted Power", gpu=int(gpu), where="average power usage").value == float(
            average
        )
    assert report.figure("Targeted Power", gpu=0, where="max power").value == 299.5
    assert {f.unit for f in report.figures} == {"W"}

"""Parsers for GPU and NIC diagnostics: `dcgmi diag -j`, gpu-burn, nvbandwidth, perftest
(ib_write_bw, ib_read_bw ...), TransferBench and AMD's ROCm Validation Suite (`rvs -c`).

Each takes one node's output as printed and returns a DiagReport: the verdicts the tool printed as
checks, its numbers as figures with the unit it printed. Each raises ParseError (with the raw text)
when the text is not that tool's, or stops before the tool's result (a run cut short). Tested on
verbatim published outputs in tests/fixtures/diag/, each with its source.
"""

from __future__ import annotations

import itertools
import json
import re

from orchestrator.errors import ParseError
from orchestrator.models.diagnostics import DiagCheck, DiagFigure, DiagReport, DiagStatus
from orchestrator.provision.smi import _raw_on_error, _strip_comments


def _blocks(
    text: str, tool: str, banner: re.Pattern[str], start: re.Pattern[str], marks: tuple[str, str]
) -> tuple[str, list[tuple[str, str]]]:
    """The version a tool's banner prints and its blocks, each (the start's group 1, the text up to
    the next start); marks say the banner and the start line as the tool prints them. Raises
    ParseError without a banner or a block."""
    body = _strip_comments(text)
    version = banner.search(body)
    if version is None:
        raise ParseError(f"{tool}: no {marks[0]!r} banner", raw=text)
    starts = list(start.finditer(body))
    if not starts:
        raise ParseError(f"{tool}: no test ran (no {marks[1]!r} line)", raw=text)
    ends = [s.start() for s in starts[1:]] + [len(body)]
    return version.group(1), [(s.group(1), body[s.end() : e]) for s, e in zip(starts, ends, strict=True)]


# --- gpu-burn ---------------------------------------------------------------------------------------

# One progress record:
# "50.0%  proc'd: 2261 (7150 Gflop/s) - 0 (0 Gflop/s)   errors: 0 - 0   temps: 38 C - 36 C"
_BURN_PROGRESS = re.compile(
    r"proc'd: (?P<procd>.*?)\s+errors: (?P<errors>.*?)\s+temps: (?P<temps>(?:\d+ C(?: - )?)+)"
)
_BURN_GFLOPS = re.compile(r"\d+ \((\d+(?:\.\d+)?) Gflop/s\)")
_BURN_TESTED = re.compile(r"^Tested (\d+) GPUs:\s*$", re.M)
_BURN_VERDICT = re.compile(r"^\s*GPU (\d+): (OK|FAULTY)\s*$", re.M)


def _cells(text: str) -> list[str]:
    return [c.strip() for c in text.strip().split(" - ")]


@_raw_on_error
def parse_gpu_burn(text: str) -> DiagReport:
    """gpu-burn's verdict per GPU (OK or FAULTY) and its last progress record: Gflop/s, errors and
    temperature per GPU. Raises ParseError when the run stopped before its 'Tested N GPUs' verdict."""
    body = _strip_comments(text)
    tested = _BURN_TESTED.search(body)
    if tested is None:
        raise ParseError("gpu-burn: no 'Tested N GPUs' verdict (the run was cut short?)", raw=text)
    verdicts = _BURN_VERDICT.findall(body[tested.end() :])
    count = int(tested.group(1))
    if len(verdicts) != count or sorted(int(g) for g, _ in verdicts) != list(range(count)):
        raise ParseError(
            f"gpu-burn: says it tested {count} GPUs and gives {len(verdicts)} verdicts", raw=text
        )
    checks = [
        DiagCheck(name="gpu-burn", gpu=int(g), status="pass" if v == "OK" else "fail", detail=v)
        for g, v in verdicts
    ]
    figures: list[DiagFigure] = []
    records = list(_BURN_PROGRESS.finditer(body))
    if records:
        last = records[-1]
        gflops = _BURN_GFLOPS.findall(last.group("procd"))
        errors = _cells(last.group("errors"))
        temps = [c.removesuffix(" C") for c in _cells(last.group("temps"))]
        if not len(gflops) == len(errors) == len(temps) == count:
            raise ParseError(
                f"gpu-burn: the last progress line has {len(gflops)} GPUs, the verdict {count}", raw=text
            )
        for gpu in range(count):
            figures.append(DiagFigure(name="gflops", value=float(gflops[gpu]), unit="Gflop/s", gpu=gpu))
            n_errors = re.match(r"\d+", errors[gpu])  # a count may carry a note; a dead worker: a word
            if n_errors:
                figures.append(
                    DiagFigure(name="errors", value=float(n_errors.group()), unit="count", gpu=gpu)
                )
            figures.append(DiagFigure(name="temperature", value=float(temps[gpu]), unit="C", gpu=gpu))
    return DiagReport(tool="gpu-burn", checks=checks, figures=figures)


# --- nvbandwidth ------------------------------------------------------------------------------------

_NVBW_VERSION = re.compile(r"^nvbandwidth Version: (\S+)", re.M)
_NVBW_RUNNING = re.compile(r"^Running (\S+)\.\s*$", re.M)
_NVBW_UNIT = re.compile(r"\((GB/s|ns)\)\s*$")


@_raw_on_error
def parse_nvbandwidth(text: str) -> DiagReport:
    """nvbandwidth's test cases: each one's SUM and its matrix cells (row, column as printed; the
    column is the GPU where the title names GPU(column)). Raises ParseError on a test case that
    stops before its SUM line."""
    version, blocks = _blocks(
        text, "nvbandwidth", _NVBW_VERSION, _NVBW_RUNNING, ("nvbandwidth Version:", "Running <test>.")
    )
    checks: list[DiagCheck] = []
    figures: list[DiagFigure] = []
    for name, chunk in blocks:
        lines = [ln for ln in chunk.splitlines() if ln.strip()]
        total = next((ln for ln in lines if ln.startswith(f"SUM {name} ")), None)
        if not lines or total is None:
            raise ParseError(f"nvbandwidth: test {name} has no SUM line (cut short?)", raw=text)
        unit_match = _NVBW_UNIT.search(lines[0])
        if unit_match is None:
            raise ParseError(f"nvbandwidth: test {name}: no unit in its title {lines[0]!r}", raw=text)
        unit = unit_match.group(1)
        gpu_columns = "GPU(column)" in lines[0]
        columns = [int(c) for c in lines[1].split()]
        for row in lines[2:]:
            if row.startswith("SUM "):
                break
            r, *values = row.split()
            if len(values) != len(columns):
                what = f"test {name}: row {r} has {len(values)} of {len(columns)} cells"
                raise ParseError(f"nvbandwidth: {what}", raw=text)
            for col, value in zip(columns, values, strict=True):
                if value == "N/A":
                    continue
                figures.append(DiagFigure(
                    name=name, value=float(value), unit=unit, gpu=col if gpu_columns else None,
                    where=f"row {int(r)} col {col}",
                ))  # fmt: skip
        figures.append(DiagFigure(name=name, value=float(total.split()[2]), unit=unit, where="sum"))
        checks.append(DiagCheck(name=name, status="pass"))
    waived = len(re.findall(r"^Waived:", text, re.M))
    if waived:
        checks.append(DiagCheck(name="waived", status="skip", detail=f"{waived} test cases waived"))
    return DiagReport(tool="nvbandwidth", version=version, checks=checks, figures=figures)


# --- perftest ---------------------------------------------------------------------------------------

_PERF_TITLE = re.compile(r"^\s*(\S+(?: Post List)?) BW Test\s*$", re.M)
_PERF_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]\s+MsgRate\[Mpps\]", re.M
)
_PERF_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$", re.M)
_PERF_FIELD = re.compile(r"(Device|Link type)\s*: (\S+)")


@_raw_on_error
def parse_perftest_bw(text: str) -> DiagReport:
    """A perftest bandwidth report (ib_write_bw, ib_read_bw, ib_send_bw): per message size the peak
    and average bandwidth in the unit printed (MB/sec, or Gb/sec with --report_gbits) and the
    message rate. Raises ParseError when the report has no result row (the test did not finish)."""
    body = _strip_comments(text)
    title = _PERF_TITLE.search(body)
    header = _PERF_HEADER.search(body)
    if title is None or header is None:
        raise ParseError(
            "perftest: no '<test> BW Test' title or '#bytes #iterations BW peak' header", raw=text
        )
    unit = header.group(2).replace("/sec", "/s")
    rows = _PERF_ROW.findall(body[header.end() :])
    if not rows:
        raise ParseError("perftest: no result row under the header (the test did not finish?)", raw=text)
    fields = dict(_PERF_FIELD.findall(body))
    test = title.group(1)
    figures: list[DiagFigure] = []
    for size, _iters, peak, average, rate in rows:
        where = f"{int(size)} bytes"
        figures += [
            DiagFigure(name="bw_peak", value=float(peak), unit=unit, where=where),
            DiagFigure(name="bw_average", value=float(average), unit=unit, where=where),
            DiagFigure(name="msg_rate", value=float(rate), unit="Mpps", where=where),
        ]
    detail = ", ".join(f"{k} {v}" for k, v in fields.items()) or None
    return DiagReport(tool="perftest", checks=[DiagCheck(name=test, status="pass", detail=detail)],
                      figures=figures)  # fmt: skip


# --- TransferBench ----------------------------------------------------------------------------------

_TB_VERSION = re.compile(r"^TransferBench v(\S+)", re.M)
_TB_TEST = re.compile(r"^Test (\d+):\s*$", re.M)
_TB_GBS = re.compile(r"^(\d+(?:\.\d+)?) GB/s$")


def _tb_cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"[,|]", line)]


@_raw_on_error
def parse_transferbench(text: str) -> DiagReport:
    """TransferBench (v1, the CSV or the table form): per test its transfers' bandwidth (where is the
    transfer as printed, e.g. 'P0 -> D0:1 -> G0') and the aggregate. Raises ParseError on a test
    that stops before its Aggregate line."""
    version, blocks = _blocks(text, "TransferBench", _TB_VERSION, _TB_TEST, ("TransferBench v", "Test N:"))
    checks: list[DiagCheck] = []
    figures: list[DiagFigure] = []
    for number, chunk in blocks:
        test = f"test {number}"
        aggregate = None
        for line in chunk.splitlines():
            cells = _tb_cells(line)
            bw = _TB_GBS.match(cells[1]) if len(cells) > 1 else None
            if bw is None:
                continue
            if cells[0].startswith("Transfer"):
                figures.append(DiagFigure(name="transfer_gbs", value=float(bw.group(1)), unit="GB/s",
                                          where=f"{test} {cells[0].lower()}: {cells[4]}"))  # fmt: skip
            elif cells[0].startswith("Aggregate"):
                aggregate = float(bw.group(1))
        if aggregate is None:
            raise ParseError(f"TransferBench: {test} has no Aggregate line (cut short?)", raw=text)
        figures.append(DiagFigure(name="aggregate_gbs", value=aggregate, unit="GB/s", where=test))
        checks.append(DiagCheck(name=test, status="pass"))
    return DiagReport(tool="transferbench", version=version, checks=checks, figures=figures)


# --- dcgmi diag --json ------------------------------------------------------------------------------

_DCGM_STATUS: dict[str, DiagStatus] = {"pass": "pass", "fail": "fail", "warn": "warn", "skip": "skip"}
# the numbers the plugins print in a result's "info", e.g. "GPU 0 GPU 0 Host to GPU bandwidth:\t\t13.11 GB/s"
_DCGM_INFO_FIGURES = (
    re.compile(r"(?P<what>(?:GPU to Host|Host to GPU|bidirectional) (?:bandwidth|latency)):\s*"
               r"(?P<value>\d+(?:\.\d+)?) (?P<unit>GB/s|us)"),
    re.compile(r"calculated at approximately (?P<value>\d+(?:\.\d+)?) (?P<unit>gigaflops)"),
    re.compile(r"(?P<what>relative stress level)\s+(?P<value>\d+(?:\.\d+)?)"),
    re.compile(r"(?P<what>power average):\s*(?P<value>\d+(?:\.\d+)?) (?P<unit>W)"),
    re.compile(r"(?P<what>max power):\s*(?P<value>\d+(?:\.\d+)?) (?P<unit>W)"),  # the table's Info rows
    re.compile(r"(?P<what>average power usage):\s*(?P<value>\d+(?:\.\d+)?) (?P<unit>W)"),
)  # fmt: skip
_DCGM_INFO_ITEM = re.compile(r",\s+(?=GPU \d+ )")


def _dcgm_gpus(result: dict[str, object]) -> list[int]:
    ids = result.get("gpu_ids", result.get("gpu_id"))
    if ids is None or ids == "":
        return []
    return [int(i) for i in str(ids).split(",")]


def _dcgm_info_figures(test: str, gpu: int | None, info: str) -> list[DiagFigure]:
    figures: list[DiagFigure] = []
    for item in _DCGM_INFO_ITEM.split(info):
        for pattern in _DCGM_INFO_FIGURES:
            m = pattern.search(item)
            if m is None:
                continue
            found = m.groupdict()
            unit = {"gigaflops": "Gflop/s", None: "level"}.get(found.get("unit"), found.get("unit") or "")
            figures.append(DiagFigure(name=test, value=float(found["value"]), unit=unit, gpu=gpu,
                                      where=found.get("what") or "gigaflops"))  # fmt: skip
    return figures


@_raw_on_error
def parse_dcgmi_diag_json(text: str) -> DiagReport:
    """`dcgmi diag -r N -j` (DCGM 3.x's "DCGM GPU Diagnostic" document): one check per test and
    GPU with its status, and the figures its plugins print in "info" (PCIe bandwidth and latency,
    Gflop/s, stress level, power). Raises ParseError on DCGM 4.x's document, which orch does not
    read yet, and on a document without test categories."""
    body = _strip_comments(text)
    start = body.find("{")  # dcgmi may print a warning line before the document
    if start < 0:
        raise ParseError("dcgmi diag: no JSON document", raw=text)
    doc = json.loads(body[start:])
    if not isinstance(doc, dict):
        raise ParseError("dcgmi diag: the JSON is not an object", raw=text)
    if "DCGM Diagnostic" in doc:
        raise ParseError("dcgmi diag: DCGM 4.x JSON is not read yet", raw=text,
                         hint="run `dcgmi diag` without -j and keep the table, or use DCGM 3.x")  # fmt: skip
    root = doc["DCGM GPU Diagnostic"]
    categories = root["test_categories"]
    if not categories:
        raise ParseError("dcgmi diag: no test categories (the diagnostic did not run?)", raw=text)
    checks: list[DiagCheck] = []
    figures: list[DiagFigure] = []
    for category in categories:
        for test in category["tests"]:
            if test is None:  # DCGM 3.1 writes null between tests
                continue
            name = str(test["name"])
            for result in test["results"]:
                status = _DCGM_STATUS.get(str(result["status"]).lower())
                if status is None:
                    raise ParseError(f"dcgmi diag: {name}: unknown status {result['status']!r}", raw=text)
                info = result.get("info")
                warning = result.get("warnings", result.get("warning"))
                detail = "; ".join(str(x) for x in (info, warning) if x) or None
                gpus: list[int | None] = [*_dcgm_gpus(result)]
                for gpu in gpus or [None]:
                    checks.append(DiagCheck(name=f"{category['category']}: {name}", status=status, gpu=gpu,
                                            detail=detail))  # fmt: skip
                if isinstance(info, str):
                    figures += _dcgm_info_figures(name, gpus[0] if len(gpus) == 1 else None, info)
    version = root.get("version")
    return DiagReport(tool="dcgmi diag", version=str(version) if version else None, checks=checks,
                      figures=figures)  # fmt: skip


# --- ROCm Validation Suite (rvs -c) -----------------------------------------------------------------

# "[RESULT] [302017.167195] [gst-Tflops-2K2K2K-trig-fp4] [GPU:: 42583] GFLOPS 1063560 Target GFLOPS: 0
#  met: TRUE" (one line)
_RVS_RESULT = re.compile(
    r"^\s*\[RESULT\]\s*\[[^\]]*\]\s*\[(?P<action>[^\]]+)\]\s*\[GPU::\s*(?P<id>\d+)\]\s*(?P<rest>.*?)\s*$",
    re.M,
)
# what follows "[GPU:: id]": gst's verdict with its GFLOPS, iet's verdict, iet's power samples
_RVS_REST = re.compile(
    r"^(?:GFLOPS (?P<gflops>\d+(?:\.\d+)?) Target GFLOPS: \S+ met: (?P<met>TRUE|FALSE)"
    r"|pass: (?P<passed>TRUE|FALSE)|Power\(W\) (?P<power>\d+(?:\.\d+)?))$"
)
# pebb: "[RESULT] [ts] [pcie_h2d_bandwidth] pcie-bandwidth [ 1/16] [CPU:: 0] [GPU:: 2 - 42583 - 0000:05:00.0]
#        h2d::true d2h::false 57.678 GBps duration: 0.223392 secs"; pbqt: "... p2p-bandwidth[48/56] [GPU:: 8 -
#        11806 - ...] [GPU:: 7 - 51771 - ...] bidirectional: false 61.370 GBps ..." (each one line)
_RVS_BANDWIDTH = re.compile(
    r"^\s*\[RESULT\]\s*\[[^\]]*\]\s*\[(?P<action>[^\]]+)\]\s*(?P<kind>pcie|p2p)-bandwidth\s*\[\s*\d+/\d+\]\s*"
    r"\[(?P<src>(?:CPU|GPU)::[^\]]*)\]\s*\[GPU::(?P<dst>[^\]]*)\]\s*"
    r"(?P<mode>.*?)\s*(?P<value>\d+(?:\.\d+)?) GBps\b",
    re.M,
)
_RVS_ENDPOINT_GPU = re.compile(r"^\s*\d+\s*-\s*(\d+)\s*-")  # "2 - 42583 - 0000:05:00.0": node - id - BDF
_RVS_ACTION_NAME = re.compile(r"^\s*\[RESULT\]\s*\[[^\]]*\]\s*Action name :(\S+)\s*$", re.M)
# babel's table: "42583       Read        7090191.900    7090191.900    6638148.386    7019091.298"
_RVS_BABEL_ROW = re.compile(
    r"^\s*(\d+)\s+(Read|Write|Copy|Mul|Add|Triad|Dot)\s+(\d+(?:\.\d+)?)\s+\d+(?:\.\d+)?\s+\d", re.M
)
_RVS_SUMMARY = re.compile(r"^\s*\|\s*ROCm Validation Suite \(RVS\) Summary\s*\|\s*$", re.M)
_RVS_VERSION = re.compile(r"^\s*\|\s*RVS version\s*\|\s*(\S+)\s*\|", re.M)
# a GPU in the summary: "| AMD Instinct MI355X - 42583 |" over "| 0 - 2 - 0000:05:00.0 |" (index - node - BDF)
_RVS_GPU_NAME = re.compile(r"^.* - (\d+)$")
_RVS_GPU_PLACE = re.compile(r"^(\d+) - \d+ - [0-9a-fA-F:.]+$")
_RVS_ACTION_ROW = re.compile(r"^\s*\|\s*(\S+)\s*\|\s*([A-Z0-9_]+)\s*\|\s*(PASS|FAIL)\s*\|\s*$", re.M)


def _rvs_gpu_index(body: str) -> dict[int, int]:
    """RVS's GPU id (e.g. 42583) to the GPU's index, from the summary's GPU pairs of rows."""
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in body.splitlines()
            if ln.strip().startswith("|")]  # fmt: skip
    index: dict[int, int] = {}
    for names, places in itertools.pairwise(rows):
        for name, place in zip(names, places, strict=False):
            n, p = _RVS_GPU_NAME.match(name), _RVS_GPU_PLACE.match(place)
            if n and p:
                index[int(n.group(1))] = int(p.group(1))
    return index


def _rvs_endpoint(cell: str, index: dict[int, int]) -> tuple[str, int | None]:
    """'CPU:: 0' -> ('CPU 0', None); ' 2 - 42583 - 0000:05:00.0' -> ('gpu id 42583', its index)."""
    if cell.startswith("CPU::"):
        return f"CPU {cell.removeprefix('CPU::').strip()}", None
    m = _RVS_ENDPOINT_GPU.match(cell.removeprefix("GPU::"))
    if m is None:
        raise ValueError(f"a transfer's end {cell!r} is not 'node - id - BDF'")  # ParseError with the raw
    return f"gpu id {m.group(1)}", index.get(int(m.group(1)))


def _rvs_bandwidths(log: str, index: dict[int, int]) -> list[DiagFigure]:
    """pebb's and pbqt's transfers: each one's GB/s (printed GBps), the GPU: pebb's, pbqt's source."""
    figures: list[DiagFigure] = []
    for m in _RVS_BANDWIDTH.finditer(log):
        src, src_gpu = _rvs_endpoint(m.group("src"), index)
        dst, dst_gpu = _rvs_endpoint("GPU::" + m.group("dst"), index)
        figures.append(DiagFigure(
            name=f"{m.group('kind')}_bandwidth", value=float(m.group("value")), unit="GBps",
            gpu=dst_gpu if m.group("kind") == "pcie" else src_gpu,
            where=f"{m.group('action')} {src} -> {dst} {m.group('mode')}".rstrip(),
        ))  # fmt: skip
    return figures


def _rvs_babel(log: str, index: dict[int, int]) -> list[DiagFigure]:
    """babel's table: each GPU's MBytes/sec per function (Read, Write, Copy ... Dot), under the
    action whose 'Action name :' line came last before it."""
    actions = [(m.start(), m.group(1)) for m in _RVS_ACTION_NAME.finditer(log)]
    figures: list[DiagFigure] = []
    for m in _RVS_BABEL_ROW.finditer(log):
        action = next((a for at, a in reversed(actions) if at < m.start()), "babel")
        rvs_id = int(m.group(1))
        figures.append(DiagFigure(name=f"babel_{m.group(2).lower()}", value=float(m.group(3)), unit="MB/s",
                                  gpu=index.get(rvs_id), where=f"{action} gpu id {rvs_id}"))  # fmt: skip
    return figures


@_raw_on_error
def parse_rvs(text: str) -> DiagReport:
    """`rvs -c CONF` (RVS 1.6's console log and its closing summary): per action and GPU its verdict
    (gst's `met:`, iet's `pass:`) and figures (gst's last GFLOPS, iet's last Power(W), each pebb and
    pbqt transfer's GBps, babel's MB/s per function), the GPU as its index from the summary (RVS
    prints its own GPU id, kept in `where`); each action's PASS or FAIL from the summary. Raises
    ParseError without the summary (the run was cut short)."""
    body = _strip_comments(text)
    summary = _RVS_SUMMARY.search(body)
    if summary is None:
        raise ParseError("rvs: no 'ROCm Validation Suite (RVS) Summary' (the run was cut short?)", raw=text)
    tail = body[summary.end() :]
    actions = _RVS_ACTION_ROW.findall(tail)
    if not actions:
        raise ParseError("rvs: the summary has no 'action | module | PASS/FAIL' row", raw=text)
    index = _rvs_gpu_index(tail)
    checks: list[DiagCheck] = []
    last: dict[tuple[str, str, int], DiagFigure] = {}
    for m in _RVS_RESULT.finditer(body[: summary.start()]):
        action, rvs_id, rest = m.group("action"), int(m.group("id")), m.group("rest")
        gpu, where = index.get(rvs_id), f"{action} gpu id {rvs_id}"
        found = _RVS_REST.match(rest)
        if found is None:
            continue  # "Start of GPU ramp up", intermediate GFLOPS ...
        if found.group("gflops"):
            last[(action, "gflops", rvs_id)] = DiagFigure(
                name="gflops", value=float(found.group("gflops")), unit="Gflop/s", gpu=gpu, where=where
            )
        elif found.group("power"):
            last[(action, "power", rvs_id)] = DiagFigure(
                name="power", value=float(found.group("power")), unit="W", gpu=gpu, where=where
            )
            continue
        verdict = found.group("met") or found.group("passed")
        checks.append(DiagCheck(name=action, gpu=gpu, status="pass" if verdict == "TRUE" else "fail",
                                detail=f"gpu id {rvs_id}"))  # fmt: skip
    figures = [*last.values(), *_rvs_bandwidths(body[: summary.start()], index),
               *_rvs_babel(body[: summary.start()], index)]  # fmt: skip
    for name, module, result in actions:
        checks.append(DiagCheck(name=name, status="pass" if result == "PASS" else "fail",
                                detail=f"{module} in the summary"))  # fmt: skip
    version = _RVS_VERSION.search(tail)
    return DiagReport(tool="rvs", version=version.group(1) if version else None, checks=checks,
                      figures=figures)  # fmt: skip


# --- dcgmi diag (the text table) --------------------------------------------------------------------

_DCGM_TABLE_HEADER = re.compile(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|\s*$", re.M)
_DCGM_TABLE_BORDER = re.compile(r"^\+-+\+-+\+$")
_DCGM_TABLE_CATEGORY = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+-+[|+]$")
# "Pass", "Pass - All", "Pass - GPUs: 0, 2, 3", "Fail - GPU: 1" (one per line of a test's result)
_DCGM_TABLE_RESULT = re.compile(r"^(Pass|Fail|Warn|Skip)(?: - (All|GPUs?: (\d+(?:, \d+)*)))?$")
_DCGM_NOTE_GPU = re.compile(r"^GPU (\d+) ")
_DCGM_TABLE_NOTES = ("Info", "Warning", "Error")


@_raw_on_error
def parse_dcgmi_diag_table(text: str) -> DiagReport:
    """`dcgmi diag -r N` as printed (DCGM 3.x's table): one check per test ('Deployment: Denylist'),
    per GPU where the result says '- All' (the GPUs the Metadata lists); its Info, Warning and Error
    rows, wrapped over lines, joined into the detail, and the figures their text carries as in the
    JSON form. Raises ParseError when the table stops before its closing border (cut short)."""
    body = _strip_comments(text)
    header = _DCGM_TABLE_HEADER.search(body)
    if header is None:
        raise ParseError("dcgmi diag: no '| Diagnostic | Result |' table", raw=text)
    lines = [ln.rstrip() for ln in body[header.end() :].splitlines() if ln.strip()]
    if len(lines) < 2 or not _DCGM_TABLE_BORDER.match(lines[-1]):
        raise ParseError("dcgmi diag: the table has no closing border (cut short?)", raw=text)
    category = ""
    meta: dict[str, str] = {}
    tests: list[tuple[str, list[str], list[str]]] = []  # (category: test, its result lines, its notes)
    note: list[str] | None = None
    for line in lines[1:-1]:
        if m := _DCGM_TABLE_CATEGORY.match(line):
            category, note = m.group(1), None
            continue
        if not (line.startswith("|") and line.endswith("|") and line.count("|") >= 3):
            raise ParseError(f"dcgmi diag: not a table row: {line!r}", raw=text)
        name_cell, value_cell = line[1:-1].split("|", 1)
        name, chunk = name_cell.strip(), value_cell[1 : len(value_cell) - 2]  # DCGM wraps at a width
        if not name and note is not None:
            note[-1] += chunk
        elif not name and tests and not tests[-1][2]:  # a result per GPU group: "Fail - GPU: 1"
            tests[-1][1].append(value_cell.strip())
        elif category == "Metadata":
            meta[name] = value_cell.strip()
        elif name in _DCGM_TABLE_NOTES:
            if not tests:
                raise ParseError(f"dcgmi diag: {name} before any test", raw=text)
            note = tests[-1][2]
            note.append(f"{name}: {chunk}")
        elif name:
            tests.append((f"{category}: {name}", [value_cell.strip()], []))
            note = None
        else:
            raise ParseError(f"dcgmi diag: a continued row with nothing before it: {line!r}", raw=text)
    if not tests:
        raise ParseError("dcgmi diag: the table has no test (the diagnostic did not run?)", raw=text)
    ids = meta.get("GPU Device IDs Detected", "")
    gpus = list(range(len([i for i in ids.split(",") if i.strip()])))
    checks: list[DiagCheck] = []
    figures: list[DiagFigure] = []
    for name, results, notes in tests:
        detail = "; ".join(n.strip() for n in notes) or None
        for result in results:
            m = _DCGM_TABLE_RESULT.match(result)
            if m is None:
                raise ParseError(f"dcgmi diag: {name}: unknown result {result!r}", raw=text)
            status = _DCGM_STATUS[m.group(1).lower()]
            targets: list[int | None] = [None]
            if m.group(3):
                targets = [int(g) for g in m.group(3).split(", ")]
            elif m.group(2) == "All" and gpus:
                targets = [*gpus]
            checks += [DiagCheck(name=name, status=status, gpu=g, detail=detail) for g in targets]
        for n in notes:
            if n.startswith("Info: "):
                info = n.removeprefix("Info: ").strip()
                on_gpu = _DCGM_NOTE_GPU.match(info)  # DCGM starts each GPU's Info with "GPU N "
                figures += _dcgm_info_figures(
                    name.split(": ", 1)[1], int(on_gpu.group(1)) if on_gpu else None, info
                )
    return DiagReport(tool="dcgmi diag", version=meta.get("DCGM Version"), checks=checks, figures=figures)


def parse_dcgmi_diag(text: str) -> DiagReport:
    """`dcgmi diag` in either form: the text table when the output has one, else the JSON (-j)."""
    if _DCGM_TABLE_HEADER.search(text):
        return parse_dcgmi_diag_table(text)
    return parse_dcgmi_diag_json(text)

"""The sampling commands of GPU telemetry and their parsers: nvidia-smi --query-gpu CSV plus
`nvidia-smi nvlink -e`, `amd-smi metric --json` and rocm-smi --json. Tested on verbatim outputs in
tests/fixtures/smi/ (each names its source).

Each parser takes the tool's text as printed and returns GpuSample models; ParseError (with the
raw text) when the text is not what the tool prints. Values the tool prints as N/A are None.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from typing import Any

from orchestrator.errors import ParseError
from orchestrator.models.telemetry import GpuSample, TelemetryTool
from orchestrator.provision.smi import rocm_json_cards

# nvidia-smi --query-gpu fields, each in the --help-query-gpu list of drivers 450 and later;
# clocks_throttle_reasons.active is the older name of clocks_event_reasons.active, which newer
# drivers still accept (an unknown field fails the whole query).
NVIDIA_FIELDS = (
    "index",
    "pci.bus_id",
    "power.draw",
    "temperature.gpu",
    "temperature.memory",
    "clocks.current.sm",
    "clocks.max.sm",
    "utilization.gpu",
    "clocks_throttle_reasons.active",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.single_bit_ecc.count",
    "retired_pages.double_bit.count",
    "remapped_rows.uncorrectable",
)
NVIDIA_ARGV = ["nvidia-smi", f"--query-gpu={','.join(NVIDIA_FIELDS)}", "--format=csv"]
# NVLink replay, recovery and CRC error counters of every link of every GPU
NVLINK_ARGV = ["nvidia-smi", "nvlink", "-e"]
# every metric section of every GPU (ROCm 6+): use, power, clocks, temperatures, PCIe, ECC (total
# and per RAS block, XGMI_WAFL among them), xgmi_err, ...
AMD_ARGV = ["amd-smi", "metric", "--json"]
# temperatures, average power, use and current clocks of every card, as JSON
ROCM_ARGV = ["rocm-smi", "-t", "-P", "-u", "-c", "--json"]
SAMPLE_ARGV: dict[TelemetryTool, list[str]] = {
    "nvidia-smi": NVIDIA_ARGV,
    "amd-smi": AMD_ARGV,
    "rocm-smi": ROCM_ARGV,
}
# the line the NVIDIA sample prints between the query's CSV and the NVLink counters
NVLINK_MARK = "#orch-nvlink-e"


def sample_script(tool: TelemetryTool, path: str) -> str:
    """The one shell line a sample runs: fixed argv, only the tool's path (found by the probe) is
    put in, quoted. nvidia-smi runs its query, then `nvlink -e` after a marker line; a node whose
    driver has no NVLink counters still gives its query (`|| true`)."""
    line = shlex.join([path, *SAMPLE_ARGV[tool][1:]])
    if tool != "nvidia-smi":
        return line
    nvlink = shlex.join([path, *NVLINK_ARGV[1:]])
    return f"{line} && {{ echo {NVLINK_MARK}; {nvlink} 2>/dev/null || true; }}"


# NVML clock event reasons (nvml.h, nvmlClocksEventReason*): the bits that mean the GPU is held
# below the clocks it asked for. GpuIdle (0x1), ApplicationsClocksSetting (0x2), SyncBoost (0x10)
# and DisplayClockSetting (0x100) are not throttling.
NVIDIA_THROTTLE_BITS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
_NA = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}


def _strip_source(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# source:"))


def _num(value: str | None) -> float | None:
    """The leading number of a cell ('627.40 W', '100 %', '52'), or None for N/A."""
    if value is None or value.strip() in _NA:
        return None
    m = re.match(r"\s*\(?(-?\d+(?:\.\d+)?)", value)
    if m is None:
        raise ParseError(f"not a number: {value!r}", raw=value)
    return float(m.group(1))


def _count(value: str | None) -> int | None:
    n = _num(value)
    return None if n is None else int(n)


def _field_name(cell: str) -> str:
    return re.sub(r"\s*\[.*\]$", "", cell.strip())


def parse_nvidia_query(text: str) -> list[GpuSample]:
    """`nvidia-smi --query-gpu=... --format=csv` (with its header line; units in [..] and after
    values are dropped). Any field list that includes `index` parses; the ones not known here are
    ignored. Raises ParseError."""
    lines = [ln for ln in _strip_source(text).splitlines() if ln.strip()]
    if not lines:
        raise ParseError("nvidia-smi --query-gpu printed nothing", raw=text)
    try:
        rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    except csv.Error as e:
        raise ParseError(f"nvidia-smi --query-gpu output is not CSV: {e}", raw=text) from e
    header = [_field_name(c) for c in rows[0]]
    if "index" not in header:
        raise ParseError("nvidia-smi --query-gpu output without a header naming `index`", raw=text)
    out: list[GpuSample] = []
    for n, row in enumerate(rows[1:], start=1):
        if len(row) != len(header):
            raise ParseError(f"row {n} has {len(row)} fields, the header {len(header)}", raw=text)
        cell = dict(zip(header, (c.strip() for c in row), strict=True))
        try:
            out.append(_nvidia_gpu(cell))
        except ValueError as e:
            raise ParseError(f"row {n}: {e}", raw=text) from e
    if not out:
        raise ParseError("nvidia-smi --query-gpu printed a header and no GPU", raw=text)
    return out


def _nvidia_gpu(cell: dict[str, str]) -> GpuSample:
    mask = cell.get("clocks_event_reasons.active", cell.get("clocks_throttle_reasons.active"))
    throttle: list[str] = []
    if mask is not None and mask not in _NA:
        bits = int(mask, 16)
        throttle = [name for bit, name in NVIDIA_THROTTLE_BITS.items() if bits & bit]
    temps = {
        name: t
        for name, key in (("gpu", "temperature.gpu"), ("memory", "temperature.memory"))
        if (t := _num(cell.get(key))) is not None
    }
    counts = [
        _count(cell.get(k))
        for k in (
            "retired_pages.single_bit_ecc.count",
            "retired_pages.double_bit.count",
            "remapped_rows.uncorrectable",
        )
    ]
    retired = None if all(c is None for c in counts) else sum(c or 0 for c in counts)
    bus = cell.get("pci.bus_id")
    index = _count(cell["index"])
    if index is None:
        raise ValueError(f"index {cell['index']!r}")
    return GpuSample(
        index=index,
        bus_id=None if bus is None or bus in _NA else bus,
        power_w=_num(cell.get("power.draw")),
        temperatures_c=temps,
        sm_clock_mhz=_num(cell.get("clocks.current.sm")),
        max_sm_clock_mhz=_num(cell.get("clocks.max.sm")),
        utilization_pct=_num(cell.get("utilization.gpu")),
        throttle=throttle,
        ecc_corrected=_count(cell.get("ecc.errors.corrected.volatile.total")),
        ecc_uncorrected=_count(cell.get("ecc.errors.uncorrected.volatile.total")),
        retired_pages=retired,
    )


_ROCM_TEMP_RE = re.compile(r"^Temperature \(Sensor (.+)\) \(C\)$", re.I)
_ROCM_POWER_KEYS = (
    "Average Graphics Package Power (W)",
    "Current Socket Graphics Package Power (W)",
)


def parse_rocm_json(text: str) -> list[GpuSample]:
    """`rocm-smi ... --json`: one `cardN` object per GPU, values as strings. Raises ParseError."""
    out: list[GpuSample] = []
    for index, card in rocm_json_cards(text)[1]:
        try:
            out.append(_rocm_gpu(index, card))
        except ValueError as e:
            raise ParseError(f"rocm-smi --json card{index}: {e}", raw=text) from e
    return out


def _rocm_gpu(index: int, card: dict[str, str]) -> GpuSample:
    temps: dict[str, float] = {}
    for k, v in card.items():
        m = _ROCM_TEMP_RE.match(k)
        if m and (t := _num(v)) is not None:
            temps[m.group(1).lower()] = t
    power = next((p for k in _ROCM_POWER_KEYS if (p := _num(card.get(k))) is not None), None)
    return GpuSample(
        index=index,
        bus_id=card.get("PCI Bus"),
        power_w=power,
        temperatures_c=temps,
        sm_clock_mhz=_num(card.get("sclk clock speed:")),
        utilization_pct=_num(card.get("GPU use (%)")),
        pcie_replays=_count(card.get("PCIe Replay Count")),
    )


_NVLINK_GPU_RE = re.compile(r"^GPU (\d+): .*$")
_NVLINK_LINK_RE = re.compile(r"^\s+Link (\d+): ([A-Za-z][A-Za-z ]*?): (\S+)\s*$")
# the counters `nvidia-smi nvlink -e` prints per link (drivers 450 and later); their sum is the
# GPU's nvlink_errors. Other counters (newer drivers print more on some GPUs) are not summed.
NVLINK_COUNTERS = ("Replay Errors", "Recovery Errors", "CRC Errors")


def parse_nvlink_errors(text: str) -> dict[int, int | None]:
    """`nvidia-smi nvlink -e`: GPU index -> its links' replay + recovery + CRC errors summed; None
    for a GPU listed without any link (no NVLink). Raises ParseError on any other line."""
    out: dict[int, int | None] = {}
    gpu: int | None = None
    for n, line in enumerate(_strip_source(text).splitlines(), start=1):
        if not line.strip():
            continue
        if m := _NVLINK_GPU_RE.match(line):
            gpu = int(m.group(1))
            out[gpu] = None
            continue
        m = _NVLINK_LINK_RE.match(line)
        if m is None or gpu is None:
            raise ParseError(f"nvidia-smi nvlink -e: line {n} is not `GPU N: ...` or `Link N: ...`: {line!r}",
                             raw=text)  # fmt: skip
        name, value = m.group(2), m.group(3)
        if name not in NVLINK_COUNTERS:
            continue
        if not value.isdigit():
            raise ParseError(f"nvidia-smi nvlink -e: line {n}: {name} is not a count: {value!r}", raw=text)
        out[gpu] = (out[gpu] or 0) + int(value)
    if not out:
        raise ParseError("nvidia-smi nvlink -e printed no `GPU N:` line", raw=text)
    return out


def parse_nvidia_sample(text: str) -> list[GpuSample]:
    """The NVIDIA sample's output (sample_script): the query's CSV, then, after NVLINK_MARK, the
    NVLink counters (nothing there when the driver printed none). Raises ParseError."""
    query, mark, nvlink = text.partition(f"\n{NVLINK_MARK}\n")
    if not mark and text.rstrip().endswith(NVLINK_MARK):
        query, nvlink = text.rstrip()[: -len(NVLINK_MARK)], ""
    gpus = parse_nvidia_query(query)
    if not nvlink.strip():
        return gpus
    counts = parse_nvlink_errors(nvlink)
    return [g.model_copy(update={"nvlink_errors": counts.get(g.index)}) for g in gpus]


def _amd_value(v: Any) -> float | None:
    """An amd-smi JSON value: a number, {"value": n, "unit": u}, or a string ('N/A', '6 W')."""
    if isinstance(v, dict):
        v = v.get("value")
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        return _num(v)
    raise ValueError(f"not a value: {v!r}")


def _amd_count(v: Any) -> int | None:
    n = _amd_value(v)
    return None if n is None else int(n)


def _section(gpu: dict[str, Any], key: str) -> dict[str, Any]:
    """A section of one GPU's metrics; {} where amd-smi printed N/A or left it out."""
    sec = gpu.get(key)
    if sec is None or sec == "N/A":
        return {}
    if not isinstance(sec, dict):
        raise ValueError(f"{key} is not an object: {sec!r}")
    return sec


# amd-smi's xgmi_err values (the amdsmi_xgmi_status_t names it prints, amdsmi_cli/amdsmi_commands.py
# of ROCm/amdsmi), as a count of the errors they report
AMD_XGMI_STATUS = {
    "AMDSMI_XGMI_STATUS_NO_ERRORS": 0,
    "AMDSMI_XGMI_STATUS_ERROR": 1,
    "AMDSMI_XGMI_STATUS_MULTIPLE_ERRORS": 2,
}


def parse_amd_metric_json(text: str) -> list[GpuSample]:
    """`amd-smi metric --json`: a list with one object per GPU (ROCm 6.x), or the same list under
    `gpu_data` (newer amd-smi releases, nathaninline/ajean#39). Raises ParseError naming amd-smi."""
    body = _strip_source(text).strip()
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise ParseError(f"amd-smi metric --json output is not JSON: {e}", raw=text) from e
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    if not isinstance(doc, list) or not doc:
        raise ParseError("amd-smi metric --json output is not a list of GPUs", raw=text)
    out: list[GpuSample] = []
    for n, gpu in enumerate(doc):
        if not isinstance(gpu, dict) or not isinstance(gpu.get("gpu"), int) or isinstance(gpu["gpu"], bool):
            raise ParseError(f"amd-smi metric --json: entry {n} has no integer `gpu`", raw=text)
        try:
            out.append(_amd_gpu(gpu))
        except (ValueError, TypeError) as e:
            raise ParseError(f"amd-smi metric --json gpu {gpu['gpu']}: {e}", raw=text) from e
    return out


def _amd_gpu(gpu: dict[str, Any]) -> GpuSample:
    power = _section(gpu, "power")
    temps = {str(k): t for k, v in _section(gpu, "temperature").items() if (t := _amd_value(v)) is not None}
    clock = _section(gpu, "clock")
    gfx = [c for k, c in sorted(clock.items()) if re.fullmatch(r"gfx_\d+", str(k)) and isinstance(c, dict)]
    gfx_clk = [c for g in gfx if (c := _amd_value(g.get("clk"))) is not None]
    max_clk = next((c for g in gfx if (c := _amd_value(g.get("max_clk"))) is not None), None)
    status = power.get("throttle_status")
    ecc = _section(gpu, "ecc")
    unc = [
        c
        for k in ("total_uncorrectable_count", "total_deferred_count")
        if (c := _amd_count(ecc.get(k))) is not None
    ]
    return GpuSample(
        index=gpu["gpu"],
        power_w=_amd_value(power.get("socket_power")),
        temperatures_c=temps,
        sm_clock_mhz=min(gfx_clk) if gfx_clk else None,
        max_sm_clock_mhz=max_clk,
        utilization_pct=_amd_value(_section(gpu, "usage").get("gfx_activity")),
        throttle=["throttle_status"] if status == "THROTTLED" else [],
        ecc_corrected=_amd_count(ecc.get("total_correctable_count")),
        ecc_uncorrected=sum(unc) if unc else None,
        pcie_replays=_amd_count(_section(gpu, "pcie").get("replay_count")),
        xgmi_errors=_amd_xgmi(gpu),
    )


def _amd_xgmi(gpu: dict[str, Any]) -> int | None:
    """XGMI_WAFL's RAS counts plus the xgmi_err status; None where amd-smi printed neither."""
    parts: list[int] = []
    wafl = _section(gpu, "ecc_blocks").get("XGMI_WAFL")
    if isinstance(wafl, dict):
        parts += [c for k in ("correctable_count", "uncorrectable_count", "deferred_count")
                  if (c := _amd_count(wafl.get(k))) is not None]  # fmt: skip
    status = gpu.get("xgmi_err")
    if isinstance(status, str) and status in AMD_XGMI_STATUS:
        parts.append(AMD_XGMI_STATUS[status])
    return sum(parts) if parts else None


def parse_sample(tool: TelemetryTool, text: str) -> list[GpuSample]:
    """The GPUs of one sample printed by `tool`. Raises ParseError."""
    if tool == "nvidia-smi":
        return parse_nvidia_sample(text)
    if tool == "amd-smi":
        return parse_amd_metric_json(text)
    return parse_rocm_json(text)

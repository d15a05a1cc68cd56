"""The sampling commands of GPU telemetry and their parsers: nvidia-smi --query-gpu CSV and
rocm-smi --json. Tested on verbatim outputs in tests/fixtures/smi/ (each names its source).

Each parser takes the tool's text as printed and returns GpuSample models; ParseError (with the
raw text) when the text is not what the tool prints. Values the tool prints as N/A are None.
"""

from __future__ import annotations

import csv
import io
import json
import re

from orchestrator.errors import ParseError
from orchestrator.models.telemetry import GpuSample, TelemetryTool

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
# temperatures, average power, use and current clocks of every card, as JSON
ROCM_ARGV = ["rocm-smi", "-t", "-P", "-u", "-c", "--json"]
SAMPLE_ARGV: dict[TelemetryTool, list[str]] = {"nvidia-smi": NVIDIA_ARGV, "rocm-smi": ROCM_ARGV}

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
    body = _strip_source(text).strip()
    try:
        doc = json.loads(body)
    except ValueError as e:
        raise ParseError(f"rocm-smi --json output is not JSON: {e}", raw=text) from e
    if not isinstance(doc, dict):
        raise ParseError("rocm-smi --json output is not an object", raw=text)
    out: list[GpuSample] = []
    for key in sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:])):
        card = doc[key]
        if not isinstance(card, dict):
            raise ParseError(f"rocm-smi --json: {key} is not an object", raw=text)
        try:
            out.append(_rocm_gpu(int(key[4:]), {str(k): str(v) for k, v in card.items()}))
        except ValueError as e:
            raise ParseError(f"rocm-smi --json {key}: {e}", raw=text) from e
    if not out:
        raise ParseError("rocm-smi --json output without any cardN", raw=text)
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


def parse_sample(tool: TelemetryTool, text: str) -> list[GpuSample]:
    """The GPUs of one sample printed by `tool`. Raises ParseError."""
    return parse_nvidia_query(text) if tool == "nvidia-smi" else parse_rocm_json(text)

"""Parsers for the GPU and RDMA tools a node has: nvidia-smi, amd-smi, rocm-smi, ibv_devinfo,
ibdev2netdev and `rdma link`.

Each takes the tool's text as printed and returns typed values; each raises ParseError (with the
raw text) when the text is not what that tool prints. Tested on verbatim outputs in
tests/fixtures/smi/, each with its source.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import re
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from pydantic import Field

from orchestrator.errors import ParseError, one_line
from orchestrator.models.base import StrictModel
from orchestrator.models.fingerprint import Gpu as Gpu  # re-exported: the parsers' results
from orchestrator.models.fingerprint import RdmaDevice as RdmaDevice
from orchestrator.models.fingerprint import RdmaPort as RdmaPort


class SmiReport(StrictModel):
    """What one run of a GPU tool said: the tool, versions it printed, the GPUs."""

    tool: str
    driver: str | None = None
    cuda: str | None = None
    rocm: str | None = None
    versions: dict[str, str] = Field(default_factory=dict, description="every version line, as printed")
    gpus: list[Gpu] = Field(default_factory=list)


class TopoGpu(StrictModel):
    """One GPU row of `nvidia-smi topo -m`: its link to every other device, and its affinities."""

    name: str
    links: dict[str, str] = Field(description="device column -> connection type (X, NV#, PIX, SYS ...)")
    cpu_affinity: str | None = None
    numa_affinity: str | None = None


class Topology(StrictModel):
    """`nvidia-smi topo -m`: the device columns, one row per GPU, and the NIC legend if printed."""

    tool: str = "nvidia-smi topo"
    devices: list[str]
    gpus: list[TopoGpu]
    nics: dict[str, str] = Field(default_factory=dict, description="NICn -> RDMA device name")


class RdmaLink(StrictModel):
    """One RDMA port and the network interface it is bound to (ibdev2netdev, `rdma link`)."""

    device: str
    port: int
    state: str = Field(description="as printed: Up/Down (ibdev2netdev), ACTIVE/DOWN ... (rdma link)")
    physical_state: str | None = None
    netdev: str | None = None


_T = TypeVar("_T")
_P = ParamSpec("_P")


def _raw_on_error(parse: Callable[Concatenate[str, _P], _T]) -> Callable[Concatenate[str, _P], _T]:
    """Turn any slip on malformed text (a bad number, a missing field, deep JSON) into ParseError."""

    @functools.wraps(parse)
    def wrapper(text: str, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return parse(text, *args, **kwargs)
        except ParseError:
            raise
        except (ValueError, IndexError, KeyError, TypeError, AttributeError, RecursionError, csv.Error) as e:
            what = parse.__name__.removeprefix("parse_")
            raise ParseError(f"{what}: malformed output: {one_line(e)}", raw=text) from e

    return wrapper


def _strip_comments(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# source:"))


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


# --- nvidia-smi ------------------------------------------------------------------------------------

_CSV_KEYS = {
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "driver_version": "driver",
    "memory.total": "memory_mib",
    "pci.bus_id": "bus_id",
    "gpu_bus_id": "bus_id",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
}


_CSV_HEADER_RE = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*$")


def _csv_field_name(cell: str) -> str:
    return re.sub(r"\s*\[.*\]$", "", cell.strip())


def csv_header(line: str) -> list[str] | None:
    """The field names of an `nvidia-smi --query-gpu ... --format=csv` header line, or None if the
    line is not one (a data row, another tool's CSV)."""
    try:
        names = [_csv_field_name(c) for c in next(csv.reader([line]), [])]
    except csv.Error:
        return None
    if not names or not all(_CSV_HEADER_RE.match(n) for n in names):
        return None
    if not any(n in _CSV_KEYS or "." in n for n in names):
        return None
    return names


@_raw_on_error
def parse_nvidia_smi_csv(text: str, fields: tuple[str, ...] | None = None) -> SmiReport:
    """`nvidia-smi --query-gpu=... --format=csv` (units in [..] are dropped).

    The header line names the columns. Without one (`--format=csv,noheader`) the columns are
    unknown: nvidia-smi has no default --query-gpu list, so `fields` (the list given to
    --query-gpu) must name them, else ParseError. Rows repeat when the tool ran with -l; only the
    first row of each index is kept.
    """
    body = [ln for ln in _strip_comments(text).splitlines() if ln.strip()]
    if not body:
        raise ParseError("not nvidia-smi --format=csv output (empty)", raw=text)
    header = csv_header(body[0])
    if header is not None:
        body = body[1:]
        if fields is not None and [_csv_field_name(f) for f in fields] != header:
            raise ParseError(
                f"the header ({', '.join(header)}) disagrees with --fields ({', '.join(fields)})", raw=text
            )
    elif fields is not None:
        header = [_csv_field_name(f) for f in fields]
        if not all(_CSV_HEADER_RE.match(n) for n in header):
            raise ParseError(f"--fields {','.join(fields)!r} is not a --query-gpu field list", raw=text)
    else:
        raise ParseError(
            "nvidia-smi --format=csv output without a header line: its columns are unknown",
            raw=text,
            hint="pass --fields with the --query-gpu list it was run with (nvidia-smi has no default order)",
        )
    gpus: dict[int, Gpu] = {}
    for n, row in enumerate(csv.reader(io.StringIO("\n".join(body)))):
        cells = [c.strip() for c in row]
        if len(cells) != len(header):
            raise ParseError(f"row {n + 1} has {len(cells)} fields, the header {len(header)}", raw=text)
        known: dict[str, object] = {}
        extra: dict[str, str] = {}
        for key, value in zip(header, cells, strict=True):
            field = _CSV_KEYS.get(key)
            if field == "memory_mib":
                known[field] = _int(value)
            elif field is not None:
                known[field] = None if value in ("[N/A]", "N/A") else value
            else:
                extra[key] = value
        index = int(str(known.pop("index", n)))
        gpus.setdefault(index, Gpu(index=index, vendor="nvidia", extra=extra, **known))
    drivers = {g.driver for g in gpus.values() if g.driver}
    return SmiReport(tool="nvidia-smi", driver=next(iter(drivers)) if len(drivers) == 1 else None,
                     gpus=[gpus[i] for i in sorted(gpus)])  # fmt: skip


_TABLE_BANNER_RE = re.compile(
    r"^\|\s*NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?", re.M
)
_TABLE_GPU_RE = re.compile(
    r"^\|\s+(\d+)\s+(.+?)\s+(On|Off|N/A)?\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s"
)
_TABLE_MEM_RE = re.compile(r"\|\s*\d+MiB\s*/\s*(\d+)MiB\s*\|")


@_raw_on_error
def parse_nvidia_smi_table(text: str) -> SmiReport:
    """The default `nvidia-smi` table: the banner's versions, one GPU per `|  N  name ... | bus |` row.

    Names are as printed (the table cuts long ones: "NVIDIA A100-SXM..."); the row below a GPU row
    gives its memory. The Processes table and MIG tables are not read.
    """
    body = _strip_comments(text)
    banner = _TABLE_BANNER_RE.search(body)
    if banner is None:
        raise ParseError("not the nvidia-smi table (no '| NVIDIA-SMI ... Driver Version:' line)", raw=text)
    gpus: list[Gpu] = []
    lines = body.splitlines()
    for k, line in enumerate(lines):
        if re.match(r"^\|\s*Processes:", line):
            break
        m = _TABLE_GPU_RE.match(line)
        if not m:
            continue
        mem = _TABLE_MEM_RE.search(lines[k + 1]) if k + 1 < len(lines) else None
        gpus.append(
            Gpu(
                index=int(m.group(1)),
                name=m.group(2).strip(),
                vendor="nvidia",
                driver=banner.group(2),
                memory_mib=int(mem.group(1)) if mem else None,
                bus_id=m.group(4),
                extra={"persistence_mode": m.group(3)} if m.group(3) else {},
            )
        )
    if not gpus and "No devices were found" not in body:
        raise ParseError("nvidia-smi table without any GPU row", raw=text)
    versions = {"NVIDIA-SMI": banner.group(1), "Driver Version": banner.group(2)}
    if banner.group(3):
        versions["CUDA Version"] = banner.group(3)
    return SmiReport(
        tool="nvidia-smi", driver=banner.group(2), cuda=banner.group(3), versions=versions, gpus=gpus
    )


_TOPO_SPLIT_RE = re.compile(r"[ ]*\t[ \t]*|[ ]{2,}")


def _topo_cells(line: str) -> list[str]:
    return [c for c in _TOPO_SPLIT_RE.split(line.strip()) if c]


@_raw_on_error
def parse_nvidia_smi_topo(text: str) -> Topology:
    """`nvidia-smi topo -m`: the matrix (tab- or space-aligned), one row per GPU; NIC legend if any."""
    lines = _strip_comments(text).splitlines()
    start = next((k for k, ln in enumerate(lines) if re.match(r"^[ \t]+GPU0(?:[ \t]|$)", ln)), None)
    if start is None:
        raise ParseError("not nvidia-smi topo -m output (no GPU0 column header)", raw=text)
    columns = _topo_cells(lines[start])
    devices = [c for c in columns if c not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")]
    gpus: list[TopoGpu] = []
    for line in lines[start + 1 :]:
        if not re.match(r"^GPU\d+\s", line):
            if gpus:
                break
            continue
        cells = _topo_cells(line)
        # the affinity columns may be empty, which tab alignment cannot tell from padding; the link
        # cells never are, so a row must have one per device and at most one per column
        if not len(devices) < len(cells) <= len(columns) + 1:
            raise ParseError(
                f"topo row {cells[0]} has {len(cells) - 1} cells, the header {len(columns)}", raw=text
            )
        row = dict(zip(columns, cells[1:], strict=False))
        gpus.append(
            TopoGpu(
                name=cells[0],
                links={d: row[d] for d in devices},
                cpu_affinity=row.get("CPU Affinity"),
                numa_affinity=row.get("NUMA Affinity"),
            )
        )
    if not gpus:
        raise ParseError("nvidia-smi topo -m output without any GPU row", raw=text)
    nics = dict(re.findall(r"^\s+(NIC\d+):\s*(\S+)\s*$", "\n".join(lines), flags=re.M))
    return Topology(devices=devices, gpus=gpus, nics=nics)


@_raw_on_error
def parse_nvidia_smi_q(text: str) -> SmiReport:
    """`nvidia-smi -q`: the indented `key : value` report, one `GPU <bus id>` block per GPU."""
    body = _strip_comments(text)
    if "NVSMI LOG" not in body:
        raise ParseError("not nvidia-smi -q output (no NVSMI LOG header)", raw=text)
    top: dict[str, str] = {}
    gpus: list[Gpu] = []
    current: dict[str, str] | None = None
    bus: str | None = None
    section: list[tuple[int, str]] = []

    def close() -> None:
        if current is not None:
            gpus.append(
                Gpu(
                    index=len(gpus),
                    name=current.get("Product Name"),
                    vendor="nvidia",
                    driver=top.get("Driver Version"),
                    memory_mib=_int(current.get("FB Memory Usage/Total")),
                    bus_id=current.get("PCI/Bus Id") or bus,
                    uuid=current.get("GPU UUID"),
                    arch=current.get("Product Architecture"),
                )
            )

    for raw in body.splitlines():
        if not raw.strip() or raw.startswith("="):
            continue
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$", raw)
        if m:
            close()
            current, bus, section = {}, m.group(1), []
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        key, sep, value = raw.strip().partition(":")
        key = key.strip()
        while section and section[-1][0] >= indent:
            section.pop()
        if not sep or (not value.strip() and sep):
            section.append((indent, key))
            continue
        path = "/".join([s for _, s in section] + [key])
        if current is None:
            top[key] = value.strip()
        else:
            current.setdefault(path, value.strip())
    close()
    if "Driver Version" not in top:
        raise ParseError("nvidia-smi -q output without a Driver Version line", raw=text)
    return SmiReport(
        tool="nvidia-smi", driver=top.get("Driver Version"), cuda=top.get("CUDA Version"), gpus=gpus
    )


# --- AMD -------------------------------------------------------------------------------------------


_AMD_VERSION_RE = re.compile(r"^AMDSMI Tool:.*$", re.M)


def _amd_smi_versions(body: str) -> dict[str, str]:
    """`amd-smi version`: 'AMDSMI Tool: X | AMDSMI Library version: Y | ROCm version: Z | ...'."""
    versions: dict[str, str] = {}
    for line in _AMD_VERSION_RE.findall(body):
        for part in line.split("|"):
            key, sep, value = part.partition(":")
            if sep and key.strip() and value.strip():
                versions.setdefault(key.strip(), value.strip())
    return versions


def _na(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


@_raw_on_error
def parse_amd_smi(text: str) -> SmiReport:
    """amd-smi's default text: `amd-smi version` lines and/or `GPU: N` blocks (static, list, metric).

    Versions come from the version line (tool, library, ROCm, amdgpu); GPUs from the blocks.
    Raises ParseError when the text has neither.
    """
    body = _strip_comments(text)
    versions = _amd_smi_versions(body)
    blocks = re.split(r"^GPU: (\d+)\s*$", body, flags=re.M)
    if len(blocks) < 3 and not versions:
        raise ParseError("not amd-smi output (no 'AMDSMI Tool:' line, no 'GPU: N' line)", raw=text)
    gpus = [_amd_smi_gpu(int(blocks[i]), blocks[i + 1]) for i in range(1, len(blocks), 2)]
    driver = _na(versions.get("amdgpu version")) or next((g.driver for g in gpus if g.driver), None)
    return SmiReport(tool="amd-smi", driver=driver, rocm=_na(versions.get("ROCm version")),
                     versions=versions, gpus=gpus)  # fmt: skip


def parse_amd_smi_static(text: str) -> SmiReport:
    """`amd-smi static` (the default text form): `GPU: N` blocks of indented `KEY: value` sections.

    Raises ParseError when the text has no `GPU: N` block.
    """
    report = parse_amd_smi(text)
    if not report.gpus:
        raise ParseError("not amd-smi static output (no 'GPU: N' line)", raw=text)
    return report


def _amd_smi_gpu(index: int, block: str) -> Gpu:
    """One `GPU: N` block: `KEY: value` lines, under `SECTION:` lines (static, metric) or not (list)."""
    fields: dict[str, str] = {}
    section, section_indent = "", -1
    for line in block.splitlines():
        m = re.match(r"^(\s+)([A-Z0-9_]+):\s*(.*?)\s*$", line)
        if not m:
            continue
        indent, key, value = len(m.group(1)), m.group(2), m.group(3)
        if not value:
            section, section_indent = key, indent
            continue
        if indent <= section_indent:
            section, section_indent = "", -1
        fields[f"{section}.{key}" if section else key] = value
    top = {k: v for k, v in fields.items() if "." not in k and k not in ("BDF", "UUID")}
    return Gpu(
        index=index,
        name=fields.get("ASIC.MARKET_NAME"),
        vendor="amd",
        driver=fields.get("DRIVER.VERSION"),
        bus_id=fields.get("BUS.BDF") or fields.get("BDF"),
        uuid=_na(fields.get("UUID")),
        arch=fields.get("ASIC.TARGET_GRAPHICS_VERSION"),
        extra={k: v for k, v in fields.items() if k.startswith(("ASIC.DEVICE_ID", "DRIVER.NAME"))} | top,
    )


def rocm_json_cards(text: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, str]]]]:
    """`rocm-smi ... --json`: the document and its `cardN` objects by index, each value as a string
    (the fingerprint's and the telemetry's reader). Raises ParseError when the text is not a JSON
    object, a card is not an object, or there is no card."""
    try:
        doc = json.loads(_strip_comments(text).strip())
    except ValueError as e:
        raise ParseError(f"rocm-smi --json output is not JSON: {e}", raw=text) from e
    if not isinstance(doc, dict):
        raise ParseError("rocm-smi --json output is not an object", raw=text)
    cards = []
    for key in sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:])):
        card = doc[key]
        if not isinstance(card, dict):
            raise ParseError(f"rocm-smi --json: {key} is not an object", raw=text)
        cards.append((int(key[4:]), {str(k): str(v) for k, v in card.items()}))
    if not cards:
        raise ParseError("rocm-smi --json output without any cardN", raw=text)
    return doc, cards


@_raw_on_error
def parse_rocm_smi(text: str) -> SmiReport:
    """rocm-smi: `--json` output (cardN objects) or the default concise table."""
    body = _strip_comments(text).strip()
    if body.startswith("{"):
        doc, cards = rocm_json_cards(text)
        gpus = [
            Gpu(
                index=index,
                name=card.get("Card Series") or card.get("Device Name"),
                vendor="amd",
                bus_id=card.get("PCI Bus"),
                arch=card.get("GFX Version"),
                extra={k: v for k, v in card.items() if k in ("Card Model", "Device ID", "Card SKU")},
            )
            for index, card in cards
        ]
        system = doc.get("system")
        driver = system.get("Driver version") if isinstance(system, dict) else None
        return SmiReport(tool="rocm-smi", driver=driver, gpus=gpus)
    if "ROCm System Management Interface" not in body:
        raise ParseError("not rocm-smi output (no banner, not JSON)", raw=text)
    gpus = _rocm_smi_concise(body) or _rocm_smi_keyed(body)
    m = re.search(r"Driver version:\s*(\S+)", body)
    if not gpus and not m:
        raise ParseError("rocm-smi output without any GPU line or driver version", raw=text)
    return SmiReport(tool="rocm-smi", driver=m.group(1) if m else None, gpus=gpus)


_ROCM_KEYED_RE = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.+?):\s*(.*?)\s*$", re.M)
_ROCM_NAME_KEYS = ("Card Series", "Card series", "Device Name", "Card SKU")


def _rocm_smi_keyed(body: str) -> list[Gpu]:
    """The `GPU[N]\t\t: Key: \tvalue` lines of rocm-smi's non-table options (-i, --showbus ...)."""
    cards: dict[int, dict[str, str]] = {}
    for index, key, value in _ROCM_KEYED_RE.findall(body):
        if key.strip() in ("WARNING", "ERROR"):
            continue
        cards.setdefault(int(index), {}).setdefault(key.strip(), value)
    gpus = []
    for index in sorted(cards):
        card = cards[index]
        name = next((card[k] for k in _ROCM_NAME_KEYS if _na(card.get(k))), None)
        gpus.append(
            Gpu(
                index=index,
                name=name,
                vendor="amd",
                bus_id=_na(card.get("PCI Bus")),
                arch=_na(card.get("GFX Version")),
                extra={k: v for k, v in card.items() if k not in _ROCM_NAME_KEYS},
            )
        )
    return gpus


_CELL_RE = re.compile(r"\S+(?: \S+)*")  # a cell: words apart by single spaces; cells by two or more


def _rocm_smi_concise(body: str) -> list[Gpu]:
    """The default concise table: a `GPU ...`/`Device ...` header line, then one row per GPU.

    Cells are placed by where they start under the header (the table is column-aligned), so a
    cell that holds spaces ("NPS1, TPX, 0") or a column with two values ("0x74a0,   39408") stays
    in its column instead of shifting the ones after it.
    """
    gpus = []
    columns: list[tuple[int, str]] = []
    for line in body.splitlines():
        if re.match(r"^(GPU|Device)\s+", line) and not line.startswith("GPU["):
            columns = [
                (m.start(), re.sub(r"(\w+) OD$", r"\1_OD", m.group())) for m in _CELL_RE.finditer(line)
            ]
            continue
        if not columns or not re.match(r"^\d+\s", line):
            continue
        cells: dict[str, list[str]] = {}
        for m in _CELL_RE.finditer(line):
            name = next((n for start, n in reversed(columns) if start <= m.start()), columns[0][1])
            cells.setdefault(name, []).append(m.group())
        values = {name: " ".join(parts) for name, parts in cells.items()}
        first = columns[0][1]
        gpus.append(Gpu(index=int(values.pop(first).split()[0]), vendor="amd", extra=values))
    return gpus


# --- RDMA ------------------------------------------------------------------------------------------


@_raw_on_error
def parse_ibv_devinfo(text: str) -> list[RdmaDevice]:
    """`ibv_devinfo` (with or without -v): one device per `hca_id:` block, its ports below."""
    body = _strip_comments(text)
    if "hca_id:" not in body:
        if re.search(r"No IB devices found", body):
            return []
        raise ParseError("not ibv_devinfo output (no hca_id line)", raw=text)
    devices: list[RdmaDevice] = []
    dev: dict[str, object] | None = None
    port: dict[str, object] | None = None

    def close_port() -> None:
        nonlocal port
        if dev is not None and port is not None:
            dev["ports"].append(RdmaPort.model_validate(port))  # type: ignore[attr-defined]
        port = None

    def close_dev() -> None:
        nonlocal dev
        close_port()
        if dev is not None:
            devices.append(RdmaDevice.model_validate(dev))
        dev = None

    for line in body.splitlines():
        key, sep, value = line.strip().partition(":")
        value = value.strip()
        if not sep:
            continue
        if key == "hca_id":
            close_dev()
            dev = {"name": value, "ports": []}
        elif dev is None:
            continue
        elif key == "port":
            close_port()
            port = {"port": int(value), "state": "?"}
        elif port is not None and key == "state":
            port["state"] = value.split()[0]
        elif port is not None and key == "link_layer":
            port["link_layer"] = value
        elif port is not None and key == "active_mtu":
            port["active_mtu"] = _int(value)
        elif port is None and key in ("transport", "fw_ver", "vendor_id", "vendor_part_id", "board_id"):
            dev[key] = value
    close_dev()
    return devices


_IBDEV2NETDEV_RE = re.compile(r"^(\S+) port (\d+) ==> (\S+) \((\w+)\)\s*$")


@_raw_on_error
def parse_ibdev2netdev(text: str) -> list[RdmaLink]:
    """`ibdev2netdev`: `mlx5_0 port 1 ==> ens1f0np0 (Up)`, one line per port (-v's long lines are refused)."""
    links: list[RdmaLink] = []
    for n, line in enumerate(_strip_comments(text).splitlines(), start=1):
        if not line.strip():
            continue
        m = _IBDEV2NETDEV_RE.match(line.strip())
        if m is None:
            raise ParseError(f"ibdev2netdev line {n} is not 'DEV port N ==> NETDEV (State)': {line[:80]!r}",
                             raw=text)  # fmt: skip
        dev, port, netdev, state = m.groups()
        links.append(RdmaLink(device=dev, port=int(port), state=state, netdev=netdev))
    if not links:
        raise ParseError("not ibdev2netdev output (no 'DEV port N ==> NETDEV' line)", raw=text)
    return links


@_raw_on_error
def parse_rdma_link(text: str) -> list[RdmaLink]:
    """`rdma link [show]`: `link DEV/PORT [key value]...`, keys state, physical_state, netdev ..."""
    links: list[RdmaLink] = []
    for n, line in enumerate(_strip_comments(text).splitlines(), start=1):
        tokens = line.split()
        if not tokens:
            continue
        m = re.fullmatch(r"(\S+)/(\d+)", tokens[1]) if tokens[0] == "link" and len(tokens) > 1 else None
        if m is None or len(tokens) % 2:
            raise ParseError(
                f"rdma link line {n} is not 'link DEV/PORT key value ...': {line[:80]!r}", raw=text
            )
        pairs = dict(zip(tokens[2::2], tokens[3::2], strict=True))
        if "state" not in pairs:
            raise ParseError(f"rdma link line {n} has no state: {line[:80]!r}", raw=text)
        links.append(
            RdmaLink(
                device=m.group(1),
                port=int(m.group(2)),
                state=pairs["state"],
                physical_state=pairs.get("physical_state"),
                netdev=pairs.get("netdev"),
            )
        )
    if not links:
        raise ParseError("not rdma link output (no 'link DEV/PORT' line)", raw=text)
    return links

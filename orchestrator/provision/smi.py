"""Parsers for the GPU and RDMA tools a node has: nvidia-smi, amd-smi, rocm-smi, ibv_devinfo.

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
from typing import TypeVar

from pydantic import Field

from orchestrator.errors import ParseError, one_line
from orchestrator.models.base import StrictModel


class Gpu(StrictModel):
    """One GPU as a vendor tool describes it; fields the tool does not print stay None."""

    index: int
    name: str | None = None
    vendor: str | None = None
    driver: str | None = None
    memory_mib: int | None = None
    bus_id: str | None = None
    uuid: str | None = None
    arch: str | None = None
    extra: dict[str, str] = Field(default_factory=dict, description="other fields, as printed")


class SmiReport(StrictModel):
    """What one run of a GPU tool said: the tool, versions it printed, the GPUs."""

    tool: str
    driver: str | None = None
    cuda: str | None = None
    gpus: list[Gpu] = Field(default_factory=list)


class RdmaPort(StrictModel):
    port: int
    state: str
    link_layer: str | None = None
    active_mtu: int | None = None


class RdmaDevice(StrictModel):
    """One HCA from ibv_devinfo."""

    name: str
    transport: str | None = None
    fw_ver: str | None = None
    vendor_id: str | None = None
    vendor_part_id: str | None = None
    board_id: str | None = None
    ports: list[RdmaPort] = Field(default_factory=list)

    @property
    def roce(self) -> bool:
        """True when any port runs over Ethernet (RoCE)."""
        return any(p.link_layer == "Ethernet" for p in self.ports)


_T = TypeVar("_T")


def _raw_on_error(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """Turn any slip on malformed text (a bad number, a missing field, deep JSON) into ParseError."""

    @functools.wraps(parse)
    def wrapper(text: str) -> _T:
        try:
            return parse(text)
        except ParseError:
            raise
        except (ValueError, IndexError, KeyError, TypeError, AttributeError, RecursionError) as e:
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


@_raw_on_error
def parse_nvidia_smi_csv(text: str) -> SmiReport:
    """`nvidia-smi --query-gpu=... --format=csv` (with its header line; units in [..] are dropped).

    Rows repeat when the tool ran with -l; only the first row of each index is kept.
    """
    body = [ln for ln in _strip_comments(text).splitlines() if ln.strip()]
    if not body or ("," not in body[0] and len(body) < 2):
        raise ParseError("not nvidia-smi --format=csv output (no header line)", raw=text)
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in next(csv.reader([body[0]]))]
    if not any(h in _CSV_KEYS or "." in h for h in header):
        raise ParseError("not nvidia-smi --format=csv output (unknown header)", raw=text)
    gpus: dict[int, Gpu] = {}
    for n, row in enumerate(csv.reader(io.StringIO("\n".join(body[1:])))):
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


@_raw_on_error
def parse_amd_smi_static(text: str) -> SmiReport:
    """`amd-smi static` (the default text form): `GPU: N` blocks of indented `KEY: value` sections."""
    body = _strip_comments(text)
    blocks = re.split(r"^GPU: (\d+)\s*$", body, flags=re.M)
    if len(blocks) < 3:
        raise ParseError("not amd-smi static output (no 'GPU: N' line)", raw=text)
    gpus: list[Gpu] = []
    driver: str | None = None
    for i in range(1, len(blocks), 2):
        index = int(blocks[i])
        fields: dict[str, str] = {}
        section = ""
        for line in blocks[i + 1].splitlines():
            m = re.match(r"^(\s+)([A-Z0-9_]+):\s*(.*?)\s*$", line)
            if not m:
                continue
            if not m.group(3):
                section = m.group(2)
                continue
            fields[f"{section}.{m.group(2)}"] = m.group(3)
        gdriver = fields.get("DRIVER.VERSION")
        driver = driver or gdriver
        gpus.append(
            Gpu(
                index=index,
                name=fields.get("ASIC.MARKET_NAME"),
                vendor="amd",
                driver=gdriver,
                bus_id=fields.get("BUS.BDF"),
                arch=fields.get("ASIC.TARGET_GRAPHICS_VERSION"),
                extra={k: v for k, v in fields.items() if k.startswith(("ASIC.DEVICE_ID", "DRIVER.NAME"))},
            )
        )
    return SmiReport(tool="amd-smi", driver=driver, gpus=gpus)


@_raw_on_error
def parse_rocm_smi(text: str) -> SmiReport:
    """rocm-smi: `--json` output (cardN objects) or the default concise table."""
    body = _strip_comments(text).strip()
    if body.startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise ParseError(f"rocm-smi --json output is not JSON: {e}", raw=text) from e
        gpus = []
        for key in sorted((k for k in doc if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:])):
            card = doc[key]
            gpus.append(
                Gpu(
                    index=int(key[4:]),
                    name=card.get("Card Series") or card.get("Device Name"),
                    vendor="amd",
                    bus_id=card.get("PCI Bus"),
                    arch=card.get("GFX Version"),
                    extra={
                        k: str(v) for k, v in card.items() if k in ("Card Model", "Device ID", "Card SKU")
                    },
                )
            )
        if not gpus:
            raise ParseError("rocm-smi --json output without any cardN", raw=text)
        driver = (
            (doc.get("system") or {}).get("Driver version") if isinstance(doc.get("system"), dict) else None
        )
        return SmiReport(tool="rocm-smi", driver=driver, gpus=gpus)
    if "ROCm System Management Interface" not in body:
        raise ParseError("not rocm-smi output (no banner, not JSON)", raw=text)
    gpus = []
    header: list[str] = []
    for line in body.splitlines():
        if re.match(r"^(GPU|Device)\s+", line) and not line.startswith("GPU["):
            header = re.sub(r"(\w+) OD\b", r"\1_OD", line).split()  # "SCLK OD" is one column
            continue
        if header and re.match(r"^\d+\s", line):
            cells = line.split()
            gpus.append(Gpu(index=int(cells[0]), vendor="amd",
                            extra=dict(zip(header[1:], cells[1:], strict=False))))  # fmt: skip
    m = re.search(r"Driver version:\s*(\S+)", body)
    return SmiReport(tool="rocm-smi", driver=m.group(1) if m else None, gpus=gpus)


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

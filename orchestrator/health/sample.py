"""One passive health sample of one node: the shell line that reads its sources, and the parsers
that turn what it printed into findings (docs/health.md).

The same line runs over a node's kept-open SSH shell (`orch health -i INV`) and on this machine
(`orch health --local`, a Slurm HealthCheckProgram), so both read the same things the same way.
Each source's place is a HealthSources field, set per node in the inventory: a lab whose nodes
share one kernel plants a kernel log, a sysfs tree or tool outputs per node.

Severities follow the vendors' guidance: NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors)
for XIDs, the kernel's AER classes for PCIe, uncorrectable ECC as fatal everywhere. Imports no SSH,
Ansible or rich: `--local` must start fast.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator

from orchestrator.errors import ParseError
from orchestrator.models.health import FindingKind, HealthFinding, HealthSource, HealthSources, Severity
from orchestrator.models.telemetry import GpuSample
from orchestrator.provision.smi import parse_rdma_link
from orchestrator.telemetry.smi import NVIDIA_ARGV, parse_amd_metric_json, parse_nvidia_query

MARK = "#orch-health "
FILE_MARK = "#file "
ERROR_MARK = "#orch-health-error "
# the lines of the kernel log the node sends back (the rest never leaves it), at most KERNEL_LINES
KERNEL_PATTERN = r"NVRM: |amdgpu.*(hardware error|errors detected)|Accelerator Check Architecture"
KERNEL_LINES = 2000
# saved tool outputs a tools_dir may hold, by file name
TOOL_FILES = {"nvidia-smi.csv": "nvidia-smi", "amd-smi-metric.json": "amd-smi", "rdma-link.txt": "rdma"}
# carrier_changes above this on one NIC is flapping (a link that came up once at boot counts 1-2)
MAX_CARRIER_CHANGES = 10

# NVIDIA XID catalog: the XIDs whose resolution is a GPU reset, node reboot or RMA (fatal: drain)
# and those that follow from the application (info). Every other XID is a warning.
FATAL_XIDS = frozenset({48, 64, 74, 79, 92, 95, 119, 120, 140})
INFO_XIDS = frozenset({13, 31, 43, 45})
# NVML clock event reasons (telemetry/smi.py names): a software power cap is policy, not a fault
INFO_THROTTLE = frozenset({"sw_power_cap"})


def sample_script(src: HealthSources) -> str:
    """The one shell line (POSIX sh) that prints every source of one node, each after a MARK line;
    every path in it is quoted. A source that cannot be read prints an ERROR_MARK line."""
    q = shlex.quote
    klog = src.kernel_log or ""
    nvidia = shlex.join(NVIDIA_ARGV)
    return "; ".join(
        [
            f"k={q(klog)}; s={q(src.sysfs)}; t={q(src.tools_dir or '')}; p={q(KERNEL_PATTERN)}",
            f"echo '{MARK}kernel_log'",
            'if [ -n "$k" ]; then if [ -r "$k" ]; then grep -aE "$p" -- "$k" | tail -n '
            f'{KERNEL_LINES}; else echo "{ERROR_MARK}kernel log $k cannot be read"; fi; '
            "else { dmesg 2>/dev/null || journalctl -k -b -q --no-pager 2>/dev/null || "
            f'echo "{ERROR_MARK}no kernel log (dmesg and journalctl -k failed)"; }} '
            f'| grep -aE "$p|^{ERROR_MARK}" | tail -n {KERNEL_LINES}; fi',
            f"echo '{MARK}pcie_aer'",
            'for f in "$s"/bus/pci/devices/*/aer_dev_correctable "$s"/bus/pci/devices/*/aer_dev_nonfatal '
            '"$s"/bus/pci/devices/*/aer_dev_fatal; do [ -r "$f" ] && { echo "'
            f'{FILE_MARK}$f"; cat -- "$f"; }}; done',
            f"echo '{MARK}netdev'",
            'for d in "$s"/class/net/*; do [ -d "$d" ] || continue; '
            'echo "${d##*/} $(cat -- "$d/operstate" 2>/dev/null || echo unknown) '
            '$(cat -- "$d/carrier_changes" 2>/dev/null || echo -)"; done',
            f"echo '{MARK}amdgpu_ras'",
            'for f in "$s"/class/drm/card*/device/ras/*_err_count; do [ -r "$f" ] && { echo "'
            f'{FILE_MARK}$f"; cat -- "$f"; }}; done',
            f"echo '{MARK}gpu_tool'",
            'if [ -n "$t" ]; then for f in nvidia-smi.csv amd-smi-metric.json; do [ -r "$t/$f" ] && '
            f'{{ echo "{FILE_MARK}$f"; cat -- "$t/$f"; }}; done; '
            f"elif command -v nvidia-smi >/dev/null 2>&1; then echo '{FILE_MARK}nvidia-smi.csv'; {nvidia}; "
            f"elif command -v amd-smi >/dev/null 2>&1; then echo '{FILE_MARK}amd-smi-metric.json'; "
            "amd-smi metric --json; fi",
            f"echo '{MARK}rdma_link'",
            'if [ -n "$t" ]; then [ -r "$t/rdma-link.txt" ] && cat -- "$t/rdma-link.txt"; '
            "elif command -v rdma >/dev/null 2>&1; then rdma link show; fi",
            "true",
        ]
    )


def sections(text: str) -> dict[str, str]:
    """The sample's output cut at its MARK lines: source -> its text."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(MARK):
            current = out.setdefault(line[len(MARK) :].strip(), [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def _files(text: str) -> Iterator[tuple[str, str]]:
    """(path, body) of each FILE_MARK block."""
    path: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        if line.startswith(FILE_MARK):
            if path is not None:
                yield path, "\n".join(body)
            path, body = line[len(FILE_MARK) :].strip(), []
        elif path is not None:
            body.append(line)
    if path is not None:
        yield path, "\n".join(body)


class _Findings:
    """Findings of one node, one per (kind, device, detail): a repeat counts, the last line is kept."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._by: dict[tuple[str, str | None, str], HealthFinding] = {}

    def add(
        self,
        kind: FindingKind,
        severity: Severity,
        source: HealthSource,
        evidence: str,
        *,
        device: str | None = None,
        detail: str = "",
        count: int = 1,
    ) -> None:
        key = (kind, device, detail)
        seen = self._by.get(key)
        total = count if seen is None else seen.count + count
        self._by[key] = HealthFinding(
            node=self.node, kind=kind, severity=severity, source=source, device=device,
            evidence=evidence.strip()[:300], count=total,
        )  # fmt: skip

    @property
    def all(self) -> list[HealthFinding]:
        return list(self._by.values())


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f:.]+)\): (\d+),")
_OFF_BUS = re.compile(r"NVRM: .*fallen off the bus|NVRM: GPU at (\S+) has fallen off the bus")
_NV_GPU = re.compile(r"NVRM: The NVIDIA GPU (\S+)")
_AMD_DEV = re.compile(r"amdgpu ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_AMD_UE = re.compile(r"uncorrectable hardware error\((\w+)\) detected")
_AMD_BLOCK = re.compile(r"(\d+) (uncorrectable|correctable) hardware errors detected in (\w+) block")
_AMD_ACA = re.compile(r"\[Hardware Error\]: Accelerator Check Architecture events logged")


def xid_severity(xid: int) -> Severity:
    """An XID's severity under the NVIDIA XID catalog's resolutions (FATAL_XIDS, INFO_XIDS)."""
    return "fatal" if xid in FATAL_XIDS else "info" if xid in INFO_XIDS else "warn"


def kernel_findings(node: str, text: str) -> list[HealthFinding]:
    """NVIDIA XIDs, GPUs fallen off the bus, and amdgpu RAS errors in kernel log lines (dmesg with
    or without -T, journalctl -k: the prefix does not matter)."""
    f = _Findings(node)
    gpu: str | None = None  # the GPU of a multi-line "The NVIDIA GPU ... fallen off the bus"
    for line in text.splitlines():
        if line.startswith("# source:"):
            continue
        if m := _XID.search(line):
            xid = int(m.group(2))
            f.add("xid", xid_severity(xid), "kernel_log", line, device=m.group(1), detail=str(xid))
        elif m := _NV_GPU.search(line):
            gpu = m.group(1)
        elif m := _OFF_BUS.search(line):
            f.add("gpu_off_bus", "fatal", "kernel_log", line, device=m.group(1) or gpu)
        elif (dev := _AMD_DEV.search(line)) is not None:
            if m := _AMD_UE.search(line):
                f.add("amdgpu_ras", "fatal", "kernel_log", line, device=dev.group(1), detail=m.group(1))
            elif m := _AMD_BLOCK.search(line):
                sev: Severity = "fatal" if m.group(2) == "uncorrectable" else "warn"
                f.add("amdgpu_ras", sev, "kernel_log", line, device=dev.group(1),
                      detail=f"{m.group(2)} {m.group(3)}", count=max(1, int(m.group(1))))  # fmt: skip
            elif _AMD_ACA.search(line):
                f.add("amdgpu_ras", "warn", "kernel_log", line, device=dev.group(1), detail="aca")
    return f.all


def aer_counts(text: str) -> dict[str, int]:
    """One aer_dev_* file (`Name count` per line) as name -> count; ParseError on another line."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.startswith("# source:"):
            continue
        name, _, count = line.strip().rpartition(" ")
        if not name or not count.isdigit():
            raise ParseError(f"aer_dev line {n} is not 'NAME COUNT': {line[:80]!r}", raw=text)
        out[name] = int(count)
    return out


_AER_CLASS: dict[str, tuple[str, FindingKind, Severity]] = {
    "aer_dev_fatal": ("TOTAL_ERR_FATAL", "pcie_aer_fatal", "fatal"),
    "aer_dev_nonfatal": ("TOTAL_ERR_NONFATAL", "pcie_aer_nonfatal", "warn"),
    "aer_dev_correctable": ("TOTAL_ERR_COR", "pcie_aer_correctable", "info"),
}


def aer_findings(node: str, text: str) -> list[HealthFinding]:
    """PCIe AER counters of every device (FILE_MARK blocks of aer_dev_* files): a device whose total
    is above 0 is a finding of that file's class, the non-zero counters its evidence."""
    f = _Findings(node)
    for path, body in _files(text):
        parts = path.rstrip("/").split("/")
        total_key, kind, sev = _AER_CLASS[parts[-1]]
        counts = aer_counts(body)
        total = counts.get(total_key, 0)
        if total > 0:
            nonzero = ", ".join(f"{k} {v}" for k, v in counts.items() if v and k != total_key)
            f.add(kind, sev, "pcie_aer", f"{parts[-2]} {parts[-1]}: {total_key} {total} ({nonzero})",
                  device=parts[-2], count=total)  # fmt: skip
    return f.all


def netdev_findings(node: str, text: str, ifaces: list[str]) -> list[HealthFinding]:
    """NIC state from `IFACE OPERSTATE CARRIER_CHANGES` lines: a fabric NIC (ifaces) down or missing
    is fatal; any NIC but lo whose carrier changed more than MAX_CARRIER_CHANGES times flaps."""
    f = _Findings(node)
    seen: set[str] = set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        name, state, changes = parts
        seen.add(name)
        if name in ifaces and state not in ("up", "unknown"):
            f.add("nic_down", "fatal", "netdev", f"{name} operstate {state}", device=name)
        if name != "lo" and changes.isdigit() and int(changes) > MAX_CARRIER_CHANGES:
            f.add("nic_flaps", "warn", "netdev", f"{name} carrier_changes {changes}", device=name,
                  count=int(changes))  # fmt: skip
    for name in ifaces:
        if name not in seen:
            f.add("nic_down", "fatal", "netdev", f"{name}: no such interface", device=name)
    return f.all


def ras_findings(node: str, text: str) -> list[HealthFinding]:
    """amdgpu's RAS counters (/sys/class/drm/cardN/device/ras/BLOCK_err_count: `ue: N`, `ce: N`):
    uncorrectable above 0 is fatal, correctable a warning."""
    f = _Findings(node)
    for path, body in _files(text):
        parts = path.split("/")
        card = next((p for p in parts if re.fullmatch(r"card\d+", p)), parts[-1])
        block = parts[-1].removesuffix("_err_count")
        for key, value in re.findall(r"^\s*(ue|ce):\s*(\d+)", body, re.M):
            if int(value) > 0:
                sev: Severity = "fatal" if key == "ue" else "warn"
                f.add("amdgpu_ras", sev, "amdgpu_ras", f"{card} {block}_err_count {key}: {value}",
                      device=card, detail=f"{block} {key}", count=int(value))  # fmt: skip
    return f.all


def gpu_findings(node: str, tool: str, gpus: list[GpuSample]) -> list[HealthFinding]:
    """ECC, retired pages and remapped rows, xGMI, PCIe replays and throttling of each GPU."""
    f = _Findings(node)
    for g in gpus:
        dev = f"GPU {g.index}" + (f" ({g.bus_id})" if g.bus_id else "")
        checks: list[tuple[FindingKind, Severity, int | None, str]] = [
            ("ecc_uncorrected", "fatal", g.ecc_uncorrected, "volatile uncorrected ECC errors"),
            ("retired_pages", "warn", g.retired_pages, "retired pages + uncorrectable remapped rows"),
            ("xgmi_errors", "warn", g.xgmi_errors, "xGMI errors"),
            ("ecc_corrected", "info", g.ecc_corrected, "volatile corrected ECC errors"),
            ("pcie_replays", "info", g.pcie_replays, "PCIe replays"),
        ]
        for kind, sev, value, what in checks:
            if value:
                f.add(kind, sev, "gpu_tool", f"{tool}: {dev} {what} {value}", device=dev, count=value)
        for reason in g.throttle:
            sev = "info" if reason in INFO_THROTTLE else "warn"
            f.add("throttle", sev, "gpu_tool", f"{tool}: {dev} clocks held by {reason}", device=dev,
                  detail=reason)  # fmt: skip
    return f.all


_GPU_PARSERS: dict[str, tuple[str, Callable[[str], list[GpuSample]]]] = {
    "nvidia-smi.csv": ("nvidia-smi", parse_nvidia_query),
    "amd-smi-metric.json": ("amd-smi", parse_amd_metric_json),
}


def rdma_findings(node: str, text: str, ifaces: list[str]) -> list[HealthFinding]:
    """`rdma link show`: a port not ACTIVE is fatal when its netdev is a fabric NIC, else a warning."""
    if not text.strip():
        return []
    f = _Findings(node)
    for link in parse_rdma_link(text):
        if link.state.upper() != "ACTIVE":
            sev: Severity = "fatal" if link.netdev in ifaces else "warn"
            port = f"{link.device}/{link.port}"
            f.add("rdma_port_down", sev, "rdma_link",
                  f"link {port} state {link.state} physical_state {link.physical_state} netdev {link.netdev}",
                  device=port)  # fmt: skip
    return f.all


def parse_sample(node: str, text: str, ifaces: list[str]) -> tuple[list[HealthFinding], list[str]]:
    """(findings, errors) of one node's sample output: a source that printed an error line, or
    whose output no parser takes, is an error (the others still count)."""
    parts = sections(text)
    found: list[HealthFinding] = []
    errors = [ln[len(ERROR_MARK) :] for ln in text.splitlines() if ln.startswith(ERROR_MARK)]
    missing = [s for s in ("kernel_log", "pcie_aer", "netdev", "amdgpu_ras", "gpu_tool", "rdma_link")
               if s not in parts]  # fmt: skip
    if missing:
        errors.append(f"the sample ended before {', '.join(missing)}")
    readers: list[tuple[str, Callable[[str], list[HealthFinding]]]] = [
        ("kernel_log", lambda t: kernel_findings(node, t)),
        ("pcie_aer", lambda t: aer_findings(node, t)),
        ("netdev", lambda t: netdev_findings(node, t, ifaces)),
        ("amdgpu_ras", lambda t: ras_findings(node, t)),
        ("rdma_link", lambda t: rdma_findings(node, t, ifaces)),
    ]
    for source, read in readers:
        try:
            found += read(parts.get(source, ""))
        except ParseError as e:
            errors.append(f"{source}: {e.message}")
    for name, body in _files(parts.get("gpu_tool", "")):
        if name not in _GPU_PARSERS or not body.strip():
            continue
        tool, parse = _GPU_PARSERS[name]
        try:
            found += gpu_findings(node, tool, parse(body))
        except ParseError as e:
            errors.append(f"gpu_tool {tool}: {e.message}")
    return found, errors

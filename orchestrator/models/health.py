"""Passive health (`orch health`): what one sample of each node's kernel log, sysfs counters and GPU
and RDMA tools found, and what was done about it (docs/health.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Severity = Literal["info", "warn", "fatal"]
SEVERITY_ORDER: dict[str, int] = {"info": 0, "warn": 1, "fatal": 2}
HealthSource = Literal["kernel_log", "pcie_aer", "netdev", "amdgpu_ras", "gpu_tool", "rdma_link"]
FindingKind = Literal[
    "xid",
    "gpu_off_bus",
    "amdgpu_ras",
    "ecc_uncorrected",
    "ecc_corrected",
    "retired_pages",
    "xgmi_errors",
    "pcie_replays",
    "pcie_aer_fatal",
    "pcie_aer_nonfatal",
    "pcie_aer_correctable",
    "nic_down",
    "nic_flaps",
    "rdma_port_down",
    "throttle",
]


class HealthSources(StrictModel):
    """Where one node's sources are read (each settable per node in the inventory, so that tests can
    plant findings per node on a lab whose nodes share one kernel)."""

    kernel_log: str | None = Field(
        default=None, description="a file holding the kernel log; None: `dmesg`, else `journalctl -k`"
    )
    sysfs: str = Field(default="/sys", description="the sysfs root (PCIe AER, net devices, amdgpu RAS)")
    tools_dir: str | None = Field(
        default=None,
        description="a folder of saved tool outputs (nvidia-smi.csv, amd-smi-metric.json, rdma-link.txt); "
        "None: run nvidia-smi / amd-smi / rdma where installed",
    )
    ifaces: list[str] = Field(
        default_factory=list, description="the fabric NICs (rdma_ifaces): down is fatal; none: not judged"
    )


class HealthFinding(StrictModel):
    """One thing a source showed on one node."""

    node: str
    kind: FindingKind
    severity: Severity
    source: HealthSource
    device: str | None = Field(default=None, description="GPU, PCI device, NIC or RDMA port concerned")
    evidence: str = Field(description="the line it was found in (the last one when repeated)")
    count: int = Field(default=1, ge=1, description="lines or counter value behind the finding")


class NodeHealth(StrictModel):
    """One node's sample: its findings, the sources that could not be read, and the drain decision."""

    node: str
    findings: list[HealthFinding] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list, description="sources that could not be read")
    drained: bool = False
    action: str | None = Field(
        default=None, description="why it was drained, or why a fatal node was not (cap, opt-out)"
    )

    @property
    def worst(self) -> Severity | None:
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: SEVERITY_ORDER[s])

    @property
    def fatal(self) -> bool:
        return self.worst == "fatal"


class HealthReport(StrictModel):
    """Every node's sample of one `orch health` (its --json output)."""

    taken_at: datetime
    local: bool = Field(description="sampled on the node itself (--local), not over SSH")
    drain: bool = Field(description="whether fatal nodes were to be drained")
    max_unavailable: int = Field(ge=0, description="at most this many nodes out of service after draining")
    nodes: list[NodeHealth]

    @property
    def fatal_nodes(self) -> list[str]:
        return [n.node for n in self.nodes if n.fatal]

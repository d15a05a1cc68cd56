"""What a node has (its fingerprint) and how it differs from its stack (drift): written into a
run directory by the stack stage, read back by the store and the reports."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field

from orchestrator.models.base import StrictModel

Compat = Literal["unchanged", "needs config change", "needs porting", "unavailable"]
COMPATS: tuple[Compat, ...] = ("unchanged", "needs config change", "needs porting", "unavailable")


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


def gpu_model_of(gpus: Sequence[Gpu]) -> str:
    """A node's GPU model from its fingerprint: the names of its GPUs, '+'-joined when they differ."""
    return "+".join(sorted({" ".join((g.name or "?").split()) for g in gpus}))


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


class Fingerprint(StrictModel):
    """One node's software and hardware, as found."""

    node: str
    os: str | None = None
    kernel: str | None = None
    system_python: str | None = None
    venv_python: str | None = None
    torch: str | None = None
    orch: str | None = None
    amdgpu_driver: str | None = None
    rocm: str | None = None
    rccl: str | None = None
    rccl_tests: str | None = None
    nvidia_driver: str | None = None
    cuda: str | None = None
    nccl: str | None = None
    nccl_tests: str | None = None
    packages: list[str] = Field(
        default_factory=list, description="name==version of every package in the stack's venv, sorted"
    )
    packages_hash: str | None = Field(default=None, description="sha256 of `packages`, one per line")
    stack_record: str | None = Field(default=None, description="the stack provisioning recorded on the node")
    stack_env: dict[str, str] | None = Field(
        default=None, description="the environment variables provisioning recorded with that stack"
    )
    env_hash: str | None = Field(default=None, description="sha256 of `stack_env`, NAME=value per line")
    lab_model: str | None = Field(
        default=None, description="the lab model provisioning built (orch-model.json beside the venv)"
    )
    lab_model_path: str | None = Field(default=None, description="where the record says it is")
    lab_model_hash: str | None = Field(
        default=None, description="sha256 over its files, as recorded when it was built"
    )
    lab_model_found_hash: str | None = Field(
        default=None, description="sha256 over the files at that path when the probe ran"
    )
    images: list[str] = Field(default_factory=list)
    stack_image: str | None = Field(
        default=None, description="id of the image provisioning built from the stack's tree on the node"
    )
    gpus: list[Gpu] = Field(default_factory=list)
    rdma: list[RdmaDevice] = Field(default_factory=list)
    rdma_links: list[dict[str, Any]] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list, description="tool outputs that could not be parsed")


class FingerprintSet(StrictModel):
    """Fingerprints of a cluster's nodes taken together (what --save writes, what diff reads)."""

    stack: str
    taken_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    nodes: dict[str, Fingerprint]


class FieldDrift(StrictModel):
    field: str
    expected: str
    found: str | None
    verdict: Compat


class DriftReport(StrictModel):
    """Which nodes differ from the stack (and from each other), and in which fields."""

    stack: str
    nodes: dict[str, list[FieldDrift]] = Field(default_factory=dict, description="drifted nodes only")
    missing: list[str] = Field(default_factory=list, description="nodes without a fingerprint")

    @property
    def drifted(self) -> list[str]:
        return list(self.nodes) + [m for m in self.missing if m not in self.nodes]

    @property
    def ok(self) -> bool:
        return not self.nodes and not self.missing

    def lines(self) -> list[str]:
        """One line per drifted node: `node2: torch 2.13.0 -> 2.12.0 (needs porting)`."""
        out = [f"{m}: no fingerprint" for m in self.missing]
        for node, drifts in self.nodes.items():
            parts = [f"{d.field} {d.expected} -> {d.found or 'missing'} ({d.verdict})" for d in drifts]
            out.append(f"{node}: " + "; ".join(parts))
        return out

"""The fault catalog: what each kind does, what it can reach, how it is undone."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.models.fault import FAULT_KINDS, FaultKind, Transport


@dataclass(frozen=True)
class FaultInfo:
    kind: FaultKind
    target: str
    transports: tuple[Transport, ...]
    revert: str
    timer: bool
    summary: str


_ALL: tuple[Transport, ...] = ("rdma-hw", "rdma-soft", "socket")
_KERNEL: tuple[Transport, ...] = ("rdma-soft", "socket")

CATALOG: dict[FaultKind, FaultInfo] = {
    i.kind: i
    for i in (
        FaultInfo(
            "kill-worker",
            "NODE[:RANK|:engine]",
            _ALL,
            "none (the job must restart it)",
            False,
            "send SIGKILL (or --signal) to one rank, every rank on the node, or a serving engine's processes",
        ),
        FaultInfo(
            "pause-worker",
            "NODE[:RANK|:engine]",
            _ALL,
            "SIGCONT",
            True,
            "SIGSTOP a rank for the duration: a hung or straggling rank",
        ),
        FaultInfo(
            "restart-container",
            "NODE:RANK|NODE:CONTAINER",
            _ALL,
            "none (restart is the fault)",
            False,
            "podman/docker restart of the container that holds the rank",
        ),
        FaultInfo(
            "link-down",
            "NODE:IFACE",
            _ALL,
            "ip link set up",
            True,
            "an RDMA/fabric interface administratively down for the duration",
        ),
        FaultInfo(
            "link-flap",
            "NODE:IFACE",
            _ALL,
            "stop the flapper, ip link set up",
            True,
            "down/up N times within the duration",
        ),
        FaultInfo(
            "roce-drop",
            "NODE:IFACE",
            ("rdma-soft",),
            "delete the rule; chain removed when empty",
            True,
            "drop UDP 4791 (RoCEv2) in iptables chain ORCH-FAULT; a hardware RoCE NIC "
            "bypasses iptables, so only soft-RoCE is hit",
        ),
        FaultInfo(
            "packet-loss",
            "NODE:IFACE",
            _KERNEL,
            "delete the rule; chain removed when empty",
            True,
            "random drop (iptables statistic match) in chain ORCH-FAULT",
        ),
        FaultInfo(
            "throttle",
            "NODE:IFACE",
            _KERNEL,
            f"tc qdisc del root handle {'4f52:'}",
            True,
            "tbf root qdisc (egress) with orch's handle 4f52:",
        ),
        FaultInfo(
            "delay",
            "NODE:IFACE",
            _KERNEL,
            "tc qdisc del root handle 4f52:",
            True,
            "netem delay; on kernels without sch_netem the outcome is 'kernel lacks sch_netem'",
        ),
        FaultInfo(
            "node-loss",
            "NODE",
            _ALL,
            "SIGCONT slurmd / scontrol update state=resume",
            True,
            "take the node away from Slurm (stop its slurmd, or scontrol state=down) -> NODE_FAIL",
        ),
    )
}
assert tuple(CATALOG) == FAULT_KINDS


def unreachable_warning(kind: FaultKind, transport: Transport) -> str | None:
    """A warning when ``kind`` cannot touch ``transport`` (e.g. roce-drop vs a hardware RoCE NIC)."""
    info = CATALOG[kind]
    if transport in info.transports:
        return None
    return (
        f"fault {kind} cannot affect transport {transport} (it reaches {', '.join(info.transports)}); "
        "its recovery numbers will show no interruption"
    )

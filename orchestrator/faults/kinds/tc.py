"""throttle (tbf) and delay (netem) as a root qdisc tagged with orch's handle 4f52:."""

from __future__ import annotations

from orchestrator.faults.base import KERNEL_TRANSPORTS, TC_HANDLE, Action, FaultInfo, quiet, sh
from orchestrator.models.fault import FaultParams

NETEM_MISSING = "kernel lacks sch_netem"


def _add_root(iface: str, *qdisc: str) -> str:
    """`tc qdisc add dev IFACE root handle 4f52: QDISC...`: the inject of throttle and delay."""
    return sh("tc", "qdisc", "add", "dev", iface, "root", "handle", TC_HANDLE, *qdisc)


def _revert(iface: str) -> str:
    return quiet(sh("tc", "qdisc", "del", "dev", iface, "root", "handle", TC_HANDLE))


def throttle(iface: str, p: FaultParams) -> Action:
    """tbf at ``rate`` on the interface's egress."""
    inject = _add_root(iface, "tbf", "rate", p.rate, "burst", p.burst, "latency", f"{p.latency_ms}ms")
    return Action(inject=inject, revert=_revert(iface))


def delay(iface: str, p: FaultParams) -> Action:
    """netem delay (+ jitter); 'unknown qdisc' means the kernel has no sch_netem."""
    netem = ["netem", "delay", f"{p.delay_ms:g}ms"]
    if p.jitter_ms:
        netem.append(f"{p.jitter_ms:g}ms")
    return Action(
        inject=_add_root(iface, *netem),
        revert=_revert(iface),
        unsupported=(("Specified qdisc kind is unknown", NETEM_MISSING), ("Unknown qdisc", NETEM_MISSING)),
    )


KINDS = (
    FaultInfo(
        "throttle",
        KERNEL_TRANSPORTS,
        f"tc qdisc del root handle {TC_HANDLE}",
        True,
        f"tbf root qdisc (egress) with orch's handle {TC_HANDLE}",
        build=lambda ctx: throttle(ctx.iface, ctx.spec.params),
        order=80,
    ),
    FaultInfo(
        "delay",
        KERNEL_TRANSPORTS,
        f"tc qdisc del root handle {TC_HANDLE}",
        True,
        "netem delay; on kernels without sch_netem the outcome is 'kernel lacks sch_netem'",
        build=lambda ctx: delay(ctx.iface, ctx.spec.params),
        order=90,
    ),
)

"""link-down and link-flap on one interface of the node."""

from __future__ import annotations

from orchestrator.faults.base import ALL_TRANSPORTS, Action, FaultInfo, quiet, record_dir, sh


def link_down(iface: str) -> Action:
    """Admin-down now, up on revert."""
    return Action(
        inject=sh("ip", "link", "set", "dev", iface, "down"),
        revert=quiet(sh("ip", "link", "set", "dev", iface, "up")),
    )


def link_flap(iface: str, *, flaps: int, duration_s: float, node: str, fid: str) -> Action:
    """N down/up cycles spread over the duration, run detached on the node (PID recorded)."""
    half = max(duration_s / (2 * flaps), 0.05)
    down = sh("ip", "link", "set", "dev", iface, "down")
    up = sh("ip", "link", "set", "dev", iface, "up")
    cycle = f"{down}; sleep {half:.3f}; {up}; sleep {half:.3f}"
    body = "; ".join([cycle] * flaps)
    pidfile = f"{record_dir(node)}/{fid}.flap"
    start = f"setsid sh -c {sh(body)} </dev/null >/dev/null 2>&1 & echo $! > {sh(pidfile)}"
    stop = quiet(f"kill -TERM -$(cat {sh(pidfile)})")
    return Action(inject=start, revert=f"{stop}; {quiet(up)}; rm -f {sh(pidfile)}")


KINDS = (
    FaultInfo(
        "link-down",
        ALL_TRANSPORTS,
        "ip link set up",
        True,
        "an RDMA/fabric interface administratively down for the duration",
        build=lambda ctx: link_down(ctx.iface),
        order=40,
    ),
    FaultInfo(
        "link-flap",
        ALL_TRANSPORTS,
        "stop the flapper, ip link set up",
        True,
        "down/up N times within the duration",
        build=lambda ctx: link_flap(
            ctx.iface,
            flaps=ctx.spec.params.flaps,
            duration_s=ctx.spec.duration_s,
            node=ctx.node.name,
            fid=ctx.fid,
        ),
        order=50,
    ),
)

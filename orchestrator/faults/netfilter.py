"""roce-drop and packet-loss: DROP rules in orch's own iptables chain ORCH-FAULT.

The chain is jumped to from INPUT and OUTPUT; every rule carries the comment ``orch:<fault-id>``.
Revert deletes the fault's rules and, when the chain is then empty, the jumps and the chain, so
that the node's listing is what it was before.
"""

from __future__ import annotations

from orchestrator.faults.base import IPT_CHAIN, Action, quiet, sh

IPT = ["iptables", "-w", "5"]


def _rules(iface: str, fid: str, match: list[str]) -> list[list[str]]:
    tag = ["-m", "comment", "--comment", f"orch:{fid}"]
    return [
        ["-i", iface, *match, *tag, "-j", "DROP"],
        ["-o", iface, *match, *tag, "-j", "DROP"],
    ]


def ensure_chain() -> str:
    """Create the chain and its jumps if missing (idempotent)."""
    parts = [quiet(sh(*IPT, "-N", IPT_CHAIN))]
    for hook in ("INPUT", "OUTPUT"):
        check = sh(*IPT, "-C", hook, "-j", IPT_CHAIN)
        parts.append(f"{{ {check} 2>/dev/null || {sh(*IPT, '-I', hook, '1', '-j', IPT_CHAIN)}; }}")
    return " && ".join(parts)


def drop_chain_if_empty() -> str:
    """Remove jumps and chain when no rule is left in it (idempotent, errors ignored)."""
    listing = sh(*IPT, "-S", IPT_CHAIN)
    remove = "; ".join(
        [
            quiet(f"while {sh(*IPT, '-D', hook, '-j', IPT_CHAIN)} 2>/dev/null; do :; done")
            for hook in ("INPUT", "OUTPUT", "FORWARD")
        ]
        + [quiet(sh(*IPT, "-X", IPT_CHAIN))]
    )
    return f"if [ \"$({listing} 2>/dev/null | grep -c -- '^-A')\" = 0 ]; then {remove}; fi"


def _action(iface: str, fid: str, match: list[str]) -> Action:
    rules = _rules(iface, fid, match)
    inject = " && ".join([ensure_chain(), *(sh(*IPT, "-A", IPT_CHAIN, *r) for r in rules)])
    revert = "; ".join([*(quiet(sh(*IPT, "-D", IPT_CHAIN, *r)) for r in rules), drop_chain_if_empty()])
    return Action(inject=inject, revert=revert)


def roce_drop(iface: str, fid: str) -> Action:
    """Drop RoCEv2 (UDP 4791) in and out of ``iface``."""
    return _action(iface, fid, ["-p", "udp", "--dport", "4791"])


def packet_loss(iface: str, fid: str, probability: float) -> Action:
    """Drop each packet in and out of ``iface`` with ``probability``."""
    return _action(iface, fid, ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"])

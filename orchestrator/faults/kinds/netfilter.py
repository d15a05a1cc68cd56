"""roce-drop and packet-loss: DROP rules in orch's own iptables chain ORCH-FAULT.

The chain is jumped to from INPUT and OUTPUT; every rule carries the comment ``orch:<fault-id>``.
Revert deletes the fault's rules and, when the chain is then empty, the jumps and the chain, so
that the node's listing is what it was before.

Inject is one ``iptables-restore --noflush`` transaction (chain, jumps and both rules at once):
each iptables process costs milliseconds, and four of them in a row missed the 10 ms target. The
chain is declared (and jumped to) only when it does not exist yet, because declaring an existing
user chain in a --noflush restore flushes it, which would drop another fault's rules. Revert
deletes the rules in one transaction too and falls back to one delete per rule (quietly) when the
transaction fails, e.g. because one of them is already gone.

Inject's "what is missing?" and revert's "is the chain empty?" are checks followed by changes; two
faults on one node (two sessions, a bench loop, a sweep) interleaved them: an inject re-declared a
chain another had just made (flushing its rules, so that fault vanished before its timer), a revert
removed the jumps right after another fault's rules went in (a fault reported active that dropped
nothing). Both now run under one flock per node (``locked``).
"""

from __future__ import annotations

from orchestrator.faults.base import (
    IPT_CHAIN,
    KERNEL_TRANSPORTS,
    RECORD_ROOT,
    Action,
    FaultInfo,
    ensure_dir,
    quiet,
    sh,
)

IPT = ["iptables", "-w", "5"]
IPT_RESTORE = ["iptables-restore", "--noflush"]
IPT_LOCK = f"{RECORD_ROOT}/.iptables.lock"


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


def restore_input(lines: list[list[str]], header: tuple[str, ...] = ()) -> str:
    """A shell fragment printing an iptables-restore transaction (filter table) of ``lines``.

    ``header`` lines (chain declarations) go verbatim: iptables-restore reads them unquoted.
    """
    return sh("printf", "%s\\n", "*filter", *header, *(sh(*ln) for ln in lines), "COMMIT")


def locked(cmd: str) -> str:
    """``cmd`` holding the node's lock on orch's iptables edits (fd 9), its exit status kept.

    Every check-then-change on the chain (does it exist? is it empty?) runs under this lock, so
    that two faults on one node (two orch sessions, a bench, a sweep) cannot interleave. A lock
    that cannot be had within 10 s does not stop a revert: the command runs anyway.
    """
    return f"{ensure_dir(sh(RECORD_ROOT))}; {{ flock -w 10 9 || :; {cmd}; }} 9>>{sh(IPT_LOCK)}"


def _missing(listing_var: str, line: str, then: str) -> str:
    """Shell: run ``then`` when ``line`` is not a whole line of the listing in ``$listing_var``."""
    return f'case "$NL${listing_var}$NL" in *"$NL"{sh(line)}"$NL"*) ;; *) {then};; esac'


def _action(iface: str, fid: str, match: list[str]) -> Action:
    rules = [["-A", IPT_CHAIN, *r] for r in _rules(iface, fid, match)]
    # One listing (one process) says what is missing: the chain (declared only then — declaring
    # an existing chain in a --noflush restore flushes it) and each jump, checked separately.
    setup = [
        "NL='\n'",
        f"L=$({sh(*IPT, '-S')} 2>/dev/null)",
        "{ echo '*filter'",
        _missing("L", f"-N {IPT_CHAIN}", sh("echo", f":{IPT_CHAIN} - [0:0]")),
        *(
            _missing("L", f"-A {hook} -j {IPT_CHAIN}", sh("echo", f"-I {hook} 1 -j {IPT_CHAIN}"))
            for hook in ("INPUT", "OUTPUT")
        ),
        f"printf '%s\\n' {' '.join(sh(sh(*r)) for r in rules)} COMMIT; }} | {sh(*IPT_RESTORE)}",
    ]
    inject = locked("; ".join(setup))
    deletes = [["-D", *r[1:]] for r in rules]
    one_by_one = "; ".join(quiet(sh(*IPT, "-D", IPT_CHAIN, *r)) for r in _rules(iface, fid, match))
    revert = locked(
        f"{{ {restore_input(deletes)} | {sh(*IPT_RESTORE)}; }} >/dev/null 2>&1 || {{ {one_by_one}; }}; "
        f"{drop_chain_if_empty()}"
    )
    return Action(inject=inject, revert=revert)


def roce_drop(iface: str, fid: str) -> Action:
    """Drop RoCEv2 (UDP 4791) in and out of ``iface``."""
    return _action(iface, fid, ["-p", "udp", "--dport", "4791"])


def packet_loss(iface: str, fid: str, probability: float) -> Action:
    """Drop each packet in and out of ``iface`` with ``probability``."""
    return _action(iface, fid, ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.4f}"])


_DELETE = "delete the rule; chain removed when empty"
KINDS = (
    FaultInfo(
        "roce-drop",
        ("rdma-soft",),
        _DELETE,
        True,
        "drop UDP 4791 (RoCEv2) in iptables chain ORCH-FAULT; a hardware RoCE NIC "
        "bypasses iptables, so only soft-RoCE is hit",
        build=lambda ctx: roce_drop(ctx.iface, ctx.fid),
        order=60,
    ),
    FaultInfo(
        "packet-loss",
        KERNEL_TRANSPORTS,
        _DELETE,
        True,
        "random drop (iptables statistic match) in chain ORCH-FAULT",
        build=lambda ctx: packet_loss(ctx.iface, ctx.fid, ctx.spec.params.probability),
        order=70,
    ),
)

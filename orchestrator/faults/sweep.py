"""Remove everything tagged as orch's from a node: fault records (run their reverts, stop their
timers), iptables chain ORCH-FAULT and its jumps, root qdiscs with handle 4f52:.

Run at start-up of every fault command and by ``orch fault sweep``. Each removal is printed by the
node-side line as ``found <what>``; an empty list means the node was clean.
"""

from __future__ import annotations

from orchestrator.errors import FaultError
from orchestrator.faults.base import IPT_CHAIN, TC_HANDLE, NodeShell, quiet, record_dir, sh
from orchestrator.faults.kinds.netfilter import IPT, locked
from orchestrator.faults.timer import stop_timer
from orchestrator.models.base import StrictModel

_LISTING = sh("printf", "%s\\n") + ' "$L"'


class SweepResult(StrictModel):
    node: str
    found: list[str]
    error: str | None = None  # the node could not be swept (unreachable, command failed)


def sweep_script(node: str) -> str:
    """The node-side line of the sweep."""
    d = sh(record_dir(node))
    stop = stop_timer(f'{d}/"$id".timer', '"$id"')
    records = (
        f'for f in {d}/*.revert {d}/*.timer; do [ -e "$f" ] || continue; '
        "id=${f##*/}; id=${id%.*}; "
        f"{stop}; "
        f'if [ -f {d}/"$id".revert ]; then sh {d}/"$id".revert; fi; '
        f'rm -f {d}/"$id".revert {d}/"$id".timer; echo "found record $id"; done'
    )
    jumps = "; ".join(
        quiet(f"while {sh(*IPT, '-D', hook, '-j', IPT_CHAIN)} 2>/dev/null; do :; done")
        for hook in ("INPUT", "OUTPUT", "FORWARD")
    )
    # One listing decides: two (chain? then jumps?) could straddle another session's inject and
    # take its fresh jumps for dangling ones. Under the iptables lock of netfilter.locked().
    chain = locked(
        f"L=$({sh(*IPT, '-S')} 2>/dev/null); "
        f"if {_LISTING} | grep -qxF -- {sh('-N ' + IPT_CHAIN)}; then "
        f"echo {sh('found iptables chain ' + IPT_CHAIN)}; "
        f"{jumps}; {quiet(sh(*IPT, '-F', IPT_CHAIN))}; {quiet(sh(*IPT, '-X', IPT_CHAIN))}; "
        f"elif {_LISTING} | grep -q -- {sh('-j ' + IPT_CHAIN)}; then "
        f"echo 'found dangling jumps'; {jumps}; fi"
    )
    qdiscs = (
        "for i in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do "
        f"if tc qdisc show dev \"$i\" 2>/dev/null | grep -q 'qdisc [a-z_]* {TC_HANDLE} root'; then "
        f'echo "found tc qdisc {TC_HANDLE} on $i"; '
        f'tc qdisc del dev "$i" root handle {TC_HANDLE} >/dev/null 2>&1; fi; done'
    )
    return f"{records}; {chain}; {qdiscs}; :"


def sweep_node(shell: NodeShell, node: str) -> SweepResult:
    """Sweep one node; returns what was found (and removed).

    Raises:
        FaultError: the sweep itself could not run.
    """
    res = shell.run_script(sweep_script(node), timeout=60)
    if not res.ok:
        raise FaultError(f"{node}: sweep failed: {res.brief()}")
    found = [line[len("found ") :] for line in res.stdout.splitlines() if line.startswith("found ")]
    return SweepResult(node=node, found=found)

"""What every fault family shares: the node shell protocol and the Action a family builds.

A family turns a FaultSpec (plus what was resolved on the node: PIDs, container ids) into an
Action: one shell line that injects, one idempotent shell line that reverts, and whether a
node-side timer must guard it. Lines are built from argv lists with shlex.join only, so that
nothing from the inventory or the command line is ever read as shell syntax.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from orchestrator.models.cluster import Node
from orchestrator.models.fault import TARGET_FORMS, TARGET_SYNTAX, FaultKind, FaultSpec, Transport
from orchestrator.remote.base import NodeShell as NodeShell  # re-exported: the fault families' shell

# Everything orch leaves on a node lives under this folder, one sub-folder per node name (the
# lab's nodes share one filesystem; a real node has its own /run, emptied at boot).
RECORD_ROOT = "/run/orch-fault"
IPT_CHAIN = "ORCH-FAULT"
# tc handle of orch's root qdiscs: 0x4f52 is "OR". tc keeps no comments; the handle is the tag.
TC_HANDLE = "4f52:"


def sh(*argv: str) -> str:
    """One command as a shell-safe string."""
    return shlex.join(argv)


def quiet(cmd: str) -> str:
    """``cmd`` with its errors ignored (for idempotent reverts)."""
    return f"{{ {cmd}; }} >/dev/null 2>&1 || :"


def ensure_dir(path: str) -> str:
    """Shell: create the folder ``path`` (a shell word) unless it is there; a test is a built-in,
    ``mkdir`` a process the node pays for on every fault."""
    return f"[ -d {path} ] || mkdir -p {path}"


def record_dir(node: str) -> str:
    """The node-side folder of orch's fault records for ``node``."""
    return f"{RECORD_ROOT}/{node}"


@dataclass(frozen=True)
class Action:
    """What a family wants done on the node for one fault."""

    inject: str
    revert: str = ""
    timer: bool = True
    instant: Literal["ack", "call"] = "ack"
    unsupported: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    """(text in stderr, outcome message) pairs that mean "this node cannot do it", not an error."""
    on_controller: bool = False
    """Run on the controller's shell (where scontrol reaches slurmctld), not on the node's."""


@dataclass
class BuildContext:
    """What a family's builder gets: the fault, its node and shell, the fault id, the inventory's
    Slurm configuration; ``resolved`` collects the PIDs / container ids it acted on."""

    spec: FaultSpec
    node: Node
    shell: NodeShell
    fid: str
    slurm_conf: Path | None = None
    resolved: list[str] = field(default_factory=list)

    @property
    def iface(self) -> str:
        return self.spec.target.iface or ""


ALL_TRANSPORTS: tuple[Transport, ...] = ("rdma-hw", "rdma-soft", "socket")
KERNEL_TRANSPORTS: tuple[Transport, ...] = ("rdma-soft", "socket")


@dataclass(frozen=True)
class FaultInfo:
    """One fault kind, as its family module registers it (``KINDS``, collected by faults.catalog).

    ``timer``: held for the duration and guarded by the node-side timer (reverted at its end); a
    kind without it is instant (a kill, a restart), its service comes back by itself.
    ``finds_processes``: its target is resolved among running processes at prepare time.
    ``serving``: it can hit a serving step's engine. ``order``: its place in `orch fault list`.
    """

    kind: FaultKind
    transports: tuple[Transport, ...]
    revert: str
    timer: bool
    summary: str
    build: Callable[[BuildContext], Action]
    order: int
    finds_processes: bool = False
    serving: bool = True

    @property
    def target(self) -> str:
        """The target syntax, from the kind's target form (models.fault.TARGET_FORMS)."""
        return TARGET_SYNTAX[TARGET_FORMS[self.kind]]

"""Kept-open shells to a cluster's nodes: what faults, sweeps, fingerprints and telemetry run
their lines through.

A run holds one ShellSet (RunLifecycle.shells): each node's shell is made the first time someone
asks for it, and every part of the run (the stack's fingerprint, the nodes' folders, faults,
serving faults, telemetry) uses that same shell, so one run opens one SSH connection per node.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from orchestrator.models.cluster import Cluster, Node
from orchestrator.remote.base import NodeShell
from orchestrator.remote.local import LocalShell


def open_shell(node: Node, connect_timeout: float) -> NodeShell:
    """A shell to node: this machine for local nodes, else a kept-open SSH shell (it connects at
    its first command)."""
    if node.is_local:
        return LocalShell()
    from orchestrator.remote.ssh import SshShell  # paramiko: only where a node is reached over SSH

    return SshShell(node, connect_timeout=connect_timeout)


class ShellSet(Mapping[str, NodeShell]):
    """The shells to a cluster's nodes by name, each made at its first use (thread-safe) and all
    closed by close(); a node of another cluster is a KeyError."""

    def __init__(self, cluster: Cluster, connect_timeout: float = 10.0) -> None:
        self.cluster, self.connect_timeout = cluster, connect_timeout
        self._nodes = {n.name: n for n in cluster.nodes}
        self._shells: dict[str, NodeShell] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> NodeShell:
        with self._lock:
            if name not in self._shells:
                self._shells[name] = open_shell(self._nodes[name], self.connect_timeout)
            return self._shells[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def close(self) -> None:
        """Close every shell made so far (a later use would open it again)."""
        with self._lock:
            shells, self._shells = list(self._shells.values()), {}
        for s in shells:
            close = getattr(s, "close", None)
            if close is not None:
                close()


@contextlib.contextmanager
def node_shells(cluster: Cluster, connect_timeout: float = 10.0) -> Iterator[ShellSet]:
    """Kept-open shells to every node (local nodes: this machine); closed on exit."""
    shells = ShellSet(cluster, connect_timeout)
    try:
        yield shells
    finally:
        shells.close()

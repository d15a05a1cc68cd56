"""Kept-open shells to a cluster's nodes: what faults, sweeps and fingerprints run their lines
through."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from orchestrator.models.cluster import Cluster
from orchestrator.remote.base import NodeShell
from orchestrator.remote.local import LocalShell
from orchestrator.remote.ssh import SshShell


@contextlib.contextmanager
def node_shells(cluster: Cluster, connect_timeout: float = 10.0) -> Iterator[dict[str, NodeShell]]:
    """Kept-open shells to every node (local nodes: this machine); closed on exit."""
    shells: dict[str, NodeShell] = {}
    ssh: list[SshShell] = []
    try:
        for n in cluster.nodes:
            if n.is_local:
                shells[n.name] = LocalShell()
            else:
                s = SshShell(n, connect_timeout=connect_timeout)
                ssh.append(s)
                shells[n.name] = s
        yield shells
    finally:
        for s in ssh:
            s.close()

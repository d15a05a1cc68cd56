"""Fingerprint over the kept-open SSH shells: the same probe as fingerprint.yml, without Ansible.

scale-test fingerprints every run's nodes; through ansible-runner that costs about 5 s on the lab
(runner start-up, one SSH session per task), more than a short ladder's own overhead. Here the
probe (orchestrator/playbooks/files/fingerprint_probe.py, the very file the playbook ships) is fed on stdin to
each node's Python over its kept-open shell, all nodes at once, and its JSON is read with the same
parser. `orch fingerprint` keeps the playbook, for the artifacts and the privilege escalation.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from orchestrator.errors import OrchError, RemoteError
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.stack import Stack
from orchestrator.provision.fingerprint import Fingerprint, from_probe_output
from orchestrator.remote.base import NodeShell
from orchestrator.stacks import PLAYBOOKS_DIR

PROBE = PLAYBOOKS_DIR / "files" / "fingerprint_probe.py"
PROBE_TIMEOUT_S = 60.0
DEFAULT_BENCH_DIR = "/opt/orch"


def probe_script(node: Node, stack: Stack, probe_source: str) -> str:
    """The shell text that runs the probe on the node: its Python, arguments quoted, source on stdin."""
    python = node.python_interpreter or "/usr/bin/python3"
    venv = stack.python.prefix if stack.python else "/opt/orch/venv"
    end = f"ORCH_PROBE_{secrets.token_hex(8)}"
    argv = [python, "-", "--venv", venv, "--bench-dir", DEFAULT_BENCH_DIR]
    return f"{shlex.join(argv)} <<'{end}'\n{probe_source}\n{end}"


def quick_fingerprint(
    cluster: Cluster,
    stack: Stack,
    names: list[str],
    connect_timeout: float = 10.0,
    shells: Mapping[str, NodeShell] | None = None,
) -> tuple[dict[str, Fingerprint], dict[str, str]]:
    """Fingerprints of the named nodes, and for each node that could not be read, why. `shells`:
    kept-open shells to use (the run's, kept open after this); by default opened and closed here."""
    source = PROBE.read_text()
    sub = cluster.model_copy(update={"nodes": [cluster.node(n) for n in names]})
    found: dict[str, Fingerprint] = {}
    failed: dict[str, str] = {}
    with contextlib.ExitStack() as stack_:
        if shells is None:
            from orchestrator.remote.shells import node_shells  # paramiko: only when shells are opened here

            shells = stack_.enter_context(node_shells(sub, connect_timeout=connect_timeout))
        use: Mapping[str, NodeShell] = shells

        def one(node: Node) -> None:
            try:
                res = use[node.name].run_script(probe_script(node, stack, source), timeout=PROBE_TIMEOUT_S)
                if not res.ok:
                    raise RemoteError(res.brief())
                found[node.name] = from_probe_output(node.name, res.stdout)
            except (OrchError, ValueError) as e:
                failed[node.name] = str(e) if not isinstance(e, ValueError) else f"probe output: {e}"

        with ThreadPoolExecutor(max_workers=min(32, max(1, len(sub.nodes)))) as pool:
            list(pool.map(one, sub.nodes))
    return found, failed

"""`orch check --quick NODE`: a prolog-sized check of one node against its newest certificate.

Seconds, not minutes: no job runs. The node fails the check when it has no intact certificate,
when the newest one has expired, or when its fingerprint, read now (provision/quickprint.py, the
probe of `orch fingerprint`), drifted: against the stack (any field not `unchanged`) or against
the fingerprint hash the certificate holds.

Two ways to read the fingerprint. On the node itself (a Slurm prolog, no inventory): the probe
runs on this machine, the stack is the one the certificate names, found by that name among the
package's stacks, and no inventory, SSH or Ansible code is loaded. From a controller with an
inventory: over one kept-open shell to the node as the inventory names it.

When a public key is configured (`--pubkey`, or the inventory's `orch_cert_pubkey`), the
certificate must also carry a valid signature by that key (certs.sign; `cryptography` is loaded
only then).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from orchestrator.certs import digest
from orchestrator.certs.service import latest, node_name, signature_problems
from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.models.cert import Certificate
from orchestrator.models.cluster import Cluster, Node


class QuickCheck(StrictModel):
    node: str
    ok: bool
    certificate: str | None = Field(default=None, description="the certificate file checked")
    problems: list[str] = Field(default_factory=list)


def this_machine(node: str) -> Cluster:
    """A cluster of one local node named `node`: this machine, probed with orch's own Python."""
    here = Node(name=node, address="localhost", connection="local", python_interpreter=sys.executable)
    return Cluster(source=Path("(this machine)"), nodes=[here])


def quick_check(
    node: str, inventory: Path | None, root: Path, *, now: datetime | None = None, pubkey: Path | None = None
) -> QuickCheck:
    """Check node's newest certificate under root, its signature when a public key is configured
    (pubkey, else the inventory's orch_cert_pubkey), and its fingerprint now (see the module doc):
    over SSH from `inventory`, or on this machine when inventory is None.
    Raises ConfigError when the node name is not a plain name, the node is not in the inventory,
    the stack is not one of orch's, or the public key cannot be read."""
    from orchestrator.provision.fingerprint import compare
    from orchestrator.provision.quickprint import quick_fingerprint
    from orchestrator.stacks import manifest_sha256, packaged_stack

    node_name(node)
    cluster: Cluster | None = None
    if inventory is not None:
        from orchestrator.inventory import load_inventory

        cluster = load_inventory(inventory)
        cluster.node(node)
    try:
        path, cert, problems = latest(node, root)
    except ConfigError as e:
        return QuickCheck(node=node, ok=False, problems=[e.message])
    found = [f"certificate edited: {p}" for p in problems]
    key = pubkey or (cluster.vars.orch_cert_pubkey if cluster is not None else None)
    if key is not None and not problems:
        found += [f"certificate signature: {p}" for p in signature_problems(cert, key)]
    if cert.expired(now or datetime.now(UTC)):
        found.append(f"certificate of run {cert.run_id} expired on {cert.valid_until:%Y-%m-%d %H:%M %Z}")
    stack_name = cert.stack.stack if cert.stack else cluster.vars.orch_stack if cluster else None
    if stack_name is None:
        found.append("no stack to check the fingerprint against (the certificate holds none)")
        return QuickCheck(node=node, ok=False, certificate=str(path), problems=found)
    stack = packaged_stack(stack_name)  # by name, from the package: never a path the certificate names
    if cert.stack is not None and cert.stack.manifest_sha256 not in (None, manifest_sha256(stack_name)):
        found.append(f"stack {stack_name}'s manifest changed since the certificate was issued")
    if cluster is not None:
        prints, failed = quick_fingerprint(cluster, stack, [node])
        gpus: int | None = cluster.node(node).gpus_per_node
    else:
        from orchestrator.remote.local import LocalShell

        prints, failed = quick_fingerprint(this_machine(node), stack, [node], shells={node: LocalShell()})
        gpus = _certified_gpus(cert)
    if node in failed:
        found.append(f"fingerprint not read: {failed[node]}")
    else:
        fp = prints[node]
        found += [
            f"drift against stack {stack_name}: {c.field} expected {c.expected}, "
            f"found {c.found} ({c.verdict})"
            for c in compare(stack, fp, gpus_expected=gpus).checks
            if c.verdict != "unchanged"
        ]
        if (
            cert.stack is not None
            and digest.sha256(fp.model_dump(mode="json")) != cert.stack.fingerprint_sha256
        ):
            found.append("fingerprint differs from the one the certificate holds")
    return QuickCheck(node=node, ok=not found, certificate=str(path), problems=found)


def _certified_gpus(cert: Certificate) -> int | None:
    """The GPU count the certified run found on the node (None when it found none)."""
    return len(cert.stack.gpus) or None if cert.stack is not None else None

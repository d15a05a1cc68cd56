"""`orch check --quick NODE`: a prolog-sized check of one node against its newest certificate.

Seconds, not minutes: no job runs. The node fails the check when it has no intact certificate,
when the newest one has expired, or when its fingerprint, read now over one kept-open shell
(provision/quickprint.py, the probe of `orch fingerprint`), drifted: against the stack (any field
not `unchanged`) or against the fingerprint hash the certificate holds. When a public key is
configured (`--pubkey`, or the inventory's `orch_cert_pubkey`), the certificate must also carry a
valid signature by that key (certs.sign; `cryptography` is loaded only then).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from orchestrator.certs import digest
from orchestrator.certs.service import latest, signature_problems
from orchestrator.errors import ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.models.base import StrictModel


class QuickCheck(StrictModel):
    node: str
    ok: bool
    certificate: str | None = Field(default=None, description="the certificate file checked")
    problems: list[str] = Field(default_factory=list)


def quick_check(
    node: str, inventory: Path, root: Path, *, now: datetime | None = None, pubkey: Path | None = None
) -> QuickCheck:
    """Check node's newest certificate under root, its signature when a public key is configured
    (pubkey, else the inventory's orch_cert_pubkey), and its fingerprint now (see the module doc).
    Raises ConfigError when the node is not in the inventory, the stack is unknown, or the public
    key cannot be read."""
    from orchestrator.provision.fingerprint import compare
    from orchestrator.provision.quickprint import quick_fingerprint
    from orchestrator.stacks import load_stack

    cluster = load_inventory(inventory)
    cluster.node(node)
    try:
        path, cert, problems = latest(node, root)
    except ConfigError as e:
        return QuickCheck(node=node, ok=False, problems=[e.message])
    found = [f"certificate edited: {p}" for p in problems]
    key = pubkey or cluster.vars.orch_cert_pubkey
    if key is not None and not problems:
        found += [f"certificate signature: {p}" for p in signature_problems(cert, key)]
    if cert.expired(now or datetime.now(UTC)):
        found.append(f"certificate of run {cert.run_id} expired on {cert.valid_until:%Y-%m-%d %H:%M %Z}")
    stack_name = cert.stack.stack if cert.stack else cluster.vars.orch_stack
    if stack_name is None:
        found.append("no stack to check the fingerprint against (the certificate holds none)")
    else:
        stack = load_stack(stack_name)
        prints, failed = quick_fingerprint(cluster, stack, [node])
        if node in failed:
            found.append(f"fingerprint not read: {failed[node]}")
        else:
            fp = prints[node]
            found += [
                f"drift against stack {stack_name}: {c.field} expected {c.expected}, "
                f"found {c.found} ({c.verdict})"
                for c in compare(stack, fp, gpus_expected=cluster.node(node).gpus_per_node).checks
                if c.verdict != "unchanged"
            ]
            if (
                cert.stack is not None
                and digest.sha256(fp.model_dump(mode="json")) != cert.stack.fingerprint_sha256
            ):
                found.append("fingerprint differs from the one the certificate holds")
    return QuickCheck(node=node, ok=not found, certificate=str(path), problems=found)

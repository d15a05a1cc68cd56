"""Certify: prove that every node runs the stack it should, as far as the fingerprint reads.

After a rollback each node must equal the frozen reference (the fingerprint of A that a migrate
run saved before it touched anything): the same package set of the stack's venv (its hash), the
same environment variables recorded with the stack (their hash), the same stack record, and every
version the fingerprint reads (provision/fingerprint.py diff). Without a reference (`orch rollback
--to A` on its own) the node is held to A's manifest: every pinned field unchanged, and a package
hash and a stack record present with A's environment.

Two fields do not count, and say so in the node's notes: `images` and `stack_image`, the id of the
image that provisioning builds from the venv. A rebuilt image gets a new id even from the same
tree; the venv it is built from is held by the package hash.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.models.fingerprint import Fingerprint, FingerprintSet
from orchestrator.models.migrate import Certification, NodeProof
from orchestrator.models.stack import Stack
from orchestrator.provision.fingerprint import compare, diff, env_hash

_NOT_COUNTED = {"stack_image", "images"}


def _present(fp: Fingerprint) -> list[str]:
    out = []
    if fp.packages_hash is None:
        out.append("no package hash: the stack's venv could not be read")
    if fp.env_hash is None:
        out.append("no stack record (orch-stack.json) beside the venv: provisioned before orch recorded it?")
    return out


def prove_node(
    stack: Stack, node: str, fp: Fingerprint | None, ref: Fingerprint | None, *, against_reference: bool
) -> NodeProof:
    """One node's proof; see the module docstring for the rules."""
    proof = NodeProof(node=node, ok=False)
    if fp is None:
        proof.differences.append("no fingerprint")
        return proof
    proof.stack_record, proof.packages_hash, proof.env_hash = fp.stack_record, fp.packages_hash, fp.env_hash
    if stack.python is not None:
        proof.differences += _present(fp)
    proof.differences += [
        f"{c.field}: expected {c.expected}, found {c.found or 'nothing'} ({c.verdict})"
        for c in compare(stack, fp).checks
        if c.verdict != "unchanged"
    ]
    if against_reference:
        if ref is None:
            proof.differences.append("not in the frozen reference")
        else:
            proof.expected_packages_hash, proof.expected_env_hash = ref.packages_hash, ref.env_hash
            one = {node: ref}, {node: fp}
            for ch in diff(FingerprintSet(stack=stack.name, nodes=one[0]),
                           FingerprintSet(stack=stack.name, nodes=one[1])):  # fmt: skip
                line = f"{ch.field}: {ch.before or '-'} -> {ch.after or '-'}"
                (proof.notes if ch.field in _NOT_COUNTED else proof.differences).append(line)
    elif stack.python is not None:
        proof.expected_env_hash = env_hash(stack.env)
    proof.ok = not proof.differences
    return proof


def certify(
    stack: Stack,
    nodes: Sequence[str],
    fingerprints: Mapping[str, Fingerprint],
    reference: FingerprintSet | None = None,
    *,
    reference_from: str | None = None,
) -> Certification:
    """Every node in `nodes` (in that order) held to the reference, or to the manifest without one.
    Pure; raises nothing."""
    proofs = [
        prove_node(stack, n, fingerprints.get(n), reference.nodes.get(n) if reference else None,
                   against_reference=reference is not None)
        for n in nodes
    ]  # fmt: skip
    return Certification(
        stack=stack.name,
        against="reference" if reference is not None else "manifest",
        reference_from=reference_from,
        nodes=proofs,
    )

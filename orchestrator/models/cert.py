"""A node's certificate: what it passed in one acceptance run, until when, and a hash of it all.

One JSON file per node, `<run>/certs/<node>.json`, written by `orch cert issue` from the run
folder alone (orchestrator.certs). Every figure in it is copied from the run's results, never typed
in, and the content hash (orchestrator.certs.digest) lets `orch cert verify` find any later edit.

The hash is integrity, not authenticity: anyone who can write the file can also recompute the hash.
It tells an edited or damaged certificate from an intact one; it does not prove who issued it. A
certificate issued with `--key` also carries an Ed25519 signature (orchestrator.certs.sign) over a
SignedPayload: the content hash, the fingerprint hash, the raw logs' hashes, the thresholds and
where they came from, and the fleet baseline's hash. Only the holder of the private key can make it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, Field, model_validator

from orchestrator.models.base import StrictModel
from orchestrator.models.diagnostics import DiagFigure, DiagThreshold
from orchestrator.models.fingerprint import Compat as Compatibility
from orchestrator.models.fingerprint import FieldDrift
from orchestrator.models.names import LongId, Name
from orchestrator.models.results import Collective

CERT_FORMAT: Literal[2] = 2
"""Bumped when the fields change meaning; a reader refuses a format it does not know. Format 2 added
raw_logs, thresholds_from, baseline_sha256 and signature; a format 1 file still reads (unsigned)."""

SIGNED_PURPOSE: Literal["orch-certificate-signature-v1"] = "orch-certificate-signature-v1"
"""Written into every signed payload, so a signature made for a certificate means nothing elsewhere."""

SHA256_TEXT = r"^sha256:[0-9a-f]{64}$"
KEY_ID = r"^ed25519:[0-9a-f]{32}$"

Metric = Literal["busbw_gbs", "scaling_efficiency", "wrong"]


class StackSummary(StrictModel):
    """The node's software and hardware as the run's fingerprint found them, and the verdict against
    the stack it was checked against."""

    stack: Name = Field(
        description="the name of the packaged stack the node was checked against (never a path: a "
        "certificate is data, and a reader loads stacks by name from the package only)"
    )
    manifest_sha256: str | None = Field(
        default=None, description="sha256 of that stack's manifest file when the certificate was issued"
    )
    taken_at: datetime | None = Field(default=None, description="when the fingerprint was taken")
    versions: dict[str, str] = Field(
        default_factory=dict, description="component -> version as found (os, kernel, torch, rccl, ...)"
    )
    gpus: list[str] = Field(default_factory=list, description="GPU model names, one per GPU")
    fingerprint_sha256: str = Field(
        description="sha256 of the node's whole fingerprint (canonical JSON): what a later check compares"
    )
    compatibility: Compatibility = Field(description="the worst verdict of the node against the stack")
    drift: list[FieldDrift] = Field(default_factory=list, description="fields that differ (none to certify)")


class CertTest(StrictModel):
    """One figure of one collective of one step the node took part in, held against its limit."""

    step: Name
    collective: Collective
    nnodes: int = Field(ge=1)
    ranks: int = Field(ge=1, description="world size of the step")
    size_bytes: int | None = Field(default=None, ge=0, description="the size of the row judged")
    metric: Metric
    threshold: float | None = Field(
        default=None,
        description="the plan's minimum (busbw GB/s, scaling efficiency) or maximum (#wrong); "
        "None: the plan sets none and the figure is recorded only",
    )
    measured: float | None = Field(default=None, description="None: the step has no such figure")
    passed: bool


class CertDiagnostic(StrictModel):
    """A GPU or NIC diagnostic the node passed (docs/diagnostics.md): the tool's figures on this node
    (or on a perftest pair it was part of, `on` = 'server-client') as printed, and the plan's limits."""

    step: Name
    tool: Name
    on: str = Field(description="the node, or the perftest pair 'server-client'")
    version: str | None = Field(default=None, description="the tool's version where it prints one")
    checks_passed: int = Field(ge=0, description="the tool's own checks that passed (none failed)")
    figures: list[DiagFigure] = Field(default_factory=list)
    thresholds: list[DiagThreshold] = Field(default_factory=list, description="the plan's limits on them")


class RawLog(StrictModel):
    """One raw log of a step the node's figures came from, by its hash."""

    step: Name
    path: str = Field(description="the file, relative to the run folder (steps/<step>/rank-0.log)")
    sha256: str = Field(pattern=SHA256_TEXT, description="'sha256:' + hex digest of the file's bytes")


class CertSignature(StrictModel):
    """An Ed25519 signature over the canonical JSON of the certificate's SignedPayload."""

    algorithm: Literal["ed25519"] = "ed25519"
    key_id: str = Field(
        pattern=KEY_ID, description="'ed25519:' + the first 32 hex digits of sha256(raw public key)"
    )
    value: str = Field(pattern=r"^[A-Za-z0-9+/]*={0,2}$", description="the signature, base64")


class SignedThreshold(StrictModel):
    """A limit a figure of the certificate was held against (a test's threshold, with what it is for)."""

    step: Name
    collective: Collective
    metric: Metric
    size_bytes: int | None
    threshold: float | None


class SignedPayload(StrictModel):
    """What the signature covers. Its canonical JSON (certs.digest.canonical) is the signed bytes.

    content_hash already covers every field of the certificate; the other fields name again, on
    their own, what a reader must be able to trust without re-deriving the hash's input: where the
    figures came from (raw logs), what they were held against, and the node's stack and baseline.
    """

    purpose: Literal["orch-certificate-signature-v1"] = SIGNED_PURPOSE
    node: Name
    run_id: LongId
    content_hash: str = Field(pattern=SHA256_TEXT)
    fingerprint_sha256: str | None = Field(description="the stack fingerprint's hash; None: none taken")
    raw_logs: list[RawLog]
    thresholds: list[SignedThreshold]
    thresholds_from: str | None
    baseline_sha256: str | None = Field(description="the fleet baseline's hash; None: no baseline (today)")


class KeyPair(StrictModel):
    """What `orch cert keygen` wrote."""

    private_key: str = Field(description="the private key file (PEM, PKCS#8, mode 0600)")
    public_key: str = Field(description="the public key file (PEM, SubjectPublicKeyInfo)")
    key_id: str = Field(pattern=KEY_ID)


class SurvivedFault(StrictModel):
    """A fault injected while the node worked, and how the run came through it."""

    fault: str = Field(description="fault kind, e.g. kill_worker, link_flap")
    fault_id: str
    target: str
    role: Literal["target", "peer"] = Field(description="target: injected on this node; peer: in its step")
    step: str | None = None
    outcome: str
    recover_s: float | None = None


class Certificate(StrictModel):
    """What one node passed in one run. `content_hash` covers every other field (see certs.digest)."""

    format: Literal[1, 2] = CERT_FORMAT
    node: Name
    run_id: LongId
    plan: str
    run_status: str = Field(description="the run's status when the certificate was issued")
    issued_at: AwareDatetime
    valid_until: AwareDatetime
    stack: StackSummary | None = Field(
        default=None, description="None: the run took no fingerprint (stack 'none')"
    )
    tests: list[CertTest] = Field(default_factory=list, description="the collective figures")
    faults: list[SurvivedFault] = Field(default_factory=list)
    diagnostics: list[CertDiagnostic] = Field(
        default_factory=list,
        description="the GPU and NIC diagnostics it passed, per node (absent in certificates before them)",
    )
    raw_logs: list[RawLog] = Field(
        default_factory=list, description="the raw logs of the steps its figures came from, by hash"
    )
    thresholds_from: str | None = Field(
        default=None, description="where the thresholds came from: the run's plan, and the hash of them"
    )
    baseline_sha256: str | None = Field(
        default=None, description="the fleet baseline the node was judged against; None: none exists yet"
    )
    field_digests: dict[str, str] = Field(
        default_factory=dict,
        description="sha256 of each other top-level field and of each item of a list field ('tests[3]'): "
        "names what an edit changed",
    )
    content_hash: str = Field(default="", description="'sha256:' + hex digest of the canonical JSON")
    signature: CertSignature | None = Field(
        default=None,
        description="None: unsigned. Not under content_hash: it signs it (certs.sign, SignedPayload)",
    )

    @model_validator(mode="after")
    def _some_figure(self) -> Certificate:
        if not self.tests and not self.diagnostics:
            raise ValueError("a certificate holds at least one test or diagnostic")
        return self

    def expired(self, now: datetime) -> bool:
        """Whether valid_until has passed at now."""
        return now >= self.valid_until


class Refusal(StrictModel):
    """A node of the run that gets no certificate, and why."""

    node: str
    reasons: list[str]


class IssueResult(StrictModel):
    """What `orch cert issue` did with one run folder."""

    run_id: LongId
    issued: dict[str, str] = Field(default_factory=dict, description="node -> certificate file")
    refused: list[Refusal] = Field(default_factory=list)


class CertCheck(StrictModel):
    """The outcome of verifying one certificate file."""

    path: str
    node: str | None = None
    ok: bool
    problems: list[str] = Field(default_factory=list, description="which field changed, or why it is invalid")
    signed_by: str | None = Field(default=None, description="the key id of the signature; None: unsigned")
    signature_checked: bool = Field(
        default=False, description="the signature was verified against a public key given"
    )


class CertEntry(StrictModel):
    """One certificate file found under a folder of runs (`orch cert list`)."""

    path: str
    node: str | None = None
    run_id: str | None = None
    issued_at: datetime | None = None
    valid_until: datetime | None = None
    expired: bool = False
    intact: bool = Field(description="the content hash matches and the fields are valid")
    problems: list[str] = Field(default_factory=list)

"""`orch check --quick`: exit non-zero on an expired certificate or a drifted fingerprint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

import orchestrator.provision.quickprint as quickprint
from orchestrator.certs.build import seal, stack_summary
from orchestrator.certs.quick import quick_check
from orchestrator.certs.service import cert_path, cert_text
from orchestrator.errors import ConfigError
from orchestrator.models.cert import Certificate, CertTest
from orchestrator.models.cluster import Cluster
from orchestrator.models.fingerprint import Fingerprint
from orchestrator.remote.base import NodeShell
from orchestrator.remote.local import LocalShell
from orchestrator.stacks import load_stack

NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)


def _matching(node: str) -> Fingerprint:
    """A fingerprint with every field the cpu-gloo manifest pins, as the manifest says."""
    stack = load_stack("cpu-gloo")
    py = stack.python
    assert py is not None
    from orchestrator import __version__

    return Fingerprint(node=node, venv_python=py.python_version + ".2", torch=py.torch, orch=__version__)


def write_certificate(
    runs: Path, fp: Fingerprint, *, now: datetime, valid_days: int, stack: str = "cpu-gloo"
) -> Path:
    """runs/r1/certs/node1.json: node1's sealed certificate with fingerprint fp, issued a day
    before `now`, valid `valid_days` after it; returns runs (the --dir of check --quick)."""
    cert = Certificate(
        node="node1", run_id="20261201T060000Z-smoke-abcd", plan="smoke", run_status="accepted",
        issued_at=now - timedelta(days=1), valid_until=now + timedelta(days=valid_days),
        stack=stack_summary(stack, now, fp),
        tests=[CertTest(step="n1xg2", collective="all_reduce", nnodes=1, ranks=2, metric="busbw_gbs",
                        measured=1.0, passed=True)],
    )  # fmt: skip
    path = cert_path(runs / "r1", "node1")
    path.parent.mkdir(parents=True)
    path.write_text(cert_text(seal(cert)))
    return runs


def _setup(tmp_path: Path, fp: Fingerprint, valid_days: int, stack: str = "cpu-gloo") -> tuple[Path, Path]:
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node1": {"ansible_host": "198.18.0.11"}}}}))
    return inv, write_certificate(tmp_path / "runs", fp, now=NOW, valid_days=valid_days, stack=stack)


def _fingerprint_now(monkeypatch: pytest.MonkeyPatch, fp: Fingerprint) -> None:
    monkeypatch.setattr(quickprint, "quick_fingerprint", lambda _c, _s, names: ({n: fp for n in names}, {}))


def test_a_valid_certificate_and_the_same_fingerprint_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp = _matching("node1")
    inv, root = _setup(tmp_path, fp, 30)
    _fingerprint_now(monkeypatch, fp)
    res = quick_check("node1", inv, root, now=NOW)
    assert res.ok, res.problems


def test_expired_drifted_or_missing_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fp = _matching("node1")
    inv, root = _setup(tmp_path, fp, 30)
    _fingerprint_now(monkeypatch, fp.model_copy(update={"venv_python": None}))  # the venv removed from /opt
    res = quick_check("node1", inv, root, now=NOW)
    assert not res.ok and any("drift" in p for p in res.problems)
    assert any("differs from the one the certificate holds" in p for p in res.problems)
    _fingerprint_now(monkeypatch, fp)
    late = quick_check("node1", inv, root, now=NOW + timedelta(days=31))
    assert not late.ok and any("expired" in p for p in late.problems)
    none = quick_check("node1", inv, tmp_path / "elsewhere", now=NOW)
    assert not none.ok and "no certificate" in none.problems[0]


def test_without_an_inventory_the_fingerprint_is_read_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp = _matching("node1")
    _, root = _setup(tmp_path, fp, 30)
    seen: list[tuple[Cluster, dict[str, NodeShell] | None]] = []

    def here(
        cluster: Cluster, _s: object, names: list[str], shells: dict[str, NodeShell] | None = None
    ) -> object:
        seen.append((cluster, shells))
        return {n: fp for n in names}, {}

    monkeypatch.setattr(quickprint, "quick_fingerprint", here)
    res = quick_check("node1", None, root, now=NOW)
    assert res.ok, res.problems
    ((cluster, shells),) = seen
    assert cluster.node("node1").is_local and shells is not None and isinstance(shells["node1"], LocalShell)
    monkeypatch.setattr(quickprint, "quick_fingerprint", lambda _c, _s, names, shells=None: (
        {n: fp.model_copy(update={"torch": None}) for n in names}, {}))  # fmt: skip
    drifted = quick_check("node1", None, root, now=NOW)
    assert not drifted.ok and any("torch" in p for p in drifted.problems)


def test_the_stack_is_found_by_name_among_orchs_stacks_never_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp = _matching("node1")
    manifest = tmp_path / "mine.yaml"  # a stack file outside the package, named by the certificate
    manifest.write_text((Path(quickprint.PLAYBOOKS_DIR) / "stacks" / "cpu-gloo.yaml").read_text())
    # A certificate's stack is a name (models/cert.py StackSummary): one naming a path is refused
    # as it is built, or read (test_security_probe plants one), and never loaded.
    with pytest.raises(ValidationError, match="is not a valid name"):
        _setup(tmp_path, fp, 30, stack=str(manifest))
    _, root = _setup(tmp_path, fp, 30, stack="no-such-stack")
    _fingerprint_now(monkeypatch, fp)
    with pytest.raises(ConfigError, match="no stack named 'no-such-stack'"):
        quick_check("node1", None, root, now=NOW)

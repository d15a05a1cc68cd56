"""Signed certificates: keygen, issue --key, verify --pubkey, and check --quick with a public key.

A forged certificate (one figure changed, its content hash recomputed) passes the hash check and
fails the signature; a genuine one passes; unsigned, wrong-key, truncated and 0640-key cases fail
saying why; and no part of the private key lands in the run folder or the store.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_quick_check import _fingerprint_now, _matching
from test_store_build import make_run

from orchestrator.certs import digest, sign
from orchestrator.certs.build import seal, stack_summary
from orchestrator.certs.quick import quick_check
from orchestrator.certs.service import cert_path, cert_text, issue, verify
from orchestrator.errors import ConfigError
from orchestrator.models.cert import Certificate, CertTest

NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
PKG = Path(__file__).resolve().parents[2]


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "keys").mkdir()
    pair = sign.keygen(tmp_path / "keys" / "lab.key")
    return Path(pair.private_key), Path(pair.public_key)


def _other_key(tmp_path: Path) -> tuple[Path, Path]:
    pair = sign.keygen(tmp_path / "other.key")
    return Path(pair.private_key), Path(pair.public_key)


def _signed_run(tmp_path: Path, key: Path) -> Path:
    """A finished run with a rank log in each step folder, certified and signed with key."""
    run = make_run(tmp_path / "runs", "r1")
    for sid in ("n1xg1", "n1xg2"):
        folder = run / "steps" / sid
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "rank-0.log").write_bytes(f"# {sid} rank 0\n 1048576 0.41\n".encode())
    res = issue(run, now=NOW, key=key)
    assert list(res.issued) == ["localhost"], res.refused
    return cert_path(run, "localhost")


def _forge(path: Path, edit: Any) -> None:
    """Edit the file's data, then recompute its digests and content hash as a forger can; the
    signature is kept as it was."""
    data = json.loads(path.read_text())
    signature = data["signature"]
    edit(data)
    forged = digest.seal(data)
    forged["signature"] = signature
    path.write_text(json.dumps(forged, indent=2))


def test_keygen_writes_a_0600_private_key_and_never_overwrites(tmp_path: Path) -> None:
    pair = sign.keygen(tmp_path / "lab.key")
    priv, pub = Path(pair.private_key), Path(pair.public_key)
    assert pub == tmp_path / "lab.key.pub"
    assert oct(os.stat(priv).st_mode & 0o777) == "0o600"
    assert b"PRIVATE KEY" in priv.read_bytes() and b"PUBLIC KEY" in pub.read_bytes()
    raw = sign._public_raw(sign.load_public(pub))
    assert pair.key_id == "ed25519:" + hashlib.sha256(raw).hexdigest()[:32]
    before = priv.read_bytes()
    with pytest.raises(ConfigError, match="exists"):
        sign.keygen(priv)
    with pytest.raises(ConfigError, match="exists"):
        sign.keygen(tmp_path / "new.key", pub)  # the public key file exists: nothing written
    assert priv.read_bytes() == before and not (tmp_path / "new.key").exists()


def test_a_genuine_signed_certificate_passes_and_covers_logs_thresholds_and_baseline(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    priv, pub = keys
    path = _signed_run(tmp_path, priv)
    check = verify(path, pubkey=pub)
    assert check.ok and check.signature_checked, check.problems
    cert = Certificate.model_validate_json(path.read_text())
    assert cert.signature is not None and cert.signature.key_id == check.signed_by
    log = path.parents[1] / "steps" / "n1xg1" / "rank-0.log"
    want = "sha256:" + hashlib.sha256(log.read_bytes()).hexdigest()
    assert [(r.path, r.sha256) for r in cert.raw_logs if r.step == "n1xg1"] == [
        ("steps/n1xg1/rank-0.log", want)
    ]
    assert cert.thresholds_from is not None and "plan smoke of run r1" in cert.thresholds_from
    signed = json.loads(sign.signed_bytes(cert))
    assert signed["content_hash"] == cert.content_hash and signed["baseline_sha256"] is None
    assert "baseline_sha256" in signed and signed["raw_logs"][0]["sha256"].startswith("sha256:")
    assert len(signed["thresholds"]) == len(cert.tests)
    # without a public key the hash is checked and the signature named, not checked
    plain = verify(path)
    assert plain.ok and not plain.signature_checked and plain.signed_by == check.signed_by


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("a figure", lambda d: d["tests"][2].update(measured=d["tests"][2]["measured"] * 2)),
        ("a threshold", lambda d: d["tests"][0].update(threshold=0.0)),
        ("a raw log's hash", lambda d: d["raw_logs"][0].update(sha256="sha256:" + "0" * 64)),
        ("the baseline", lambda d: d.update(baseline_sha256="sha256:" + "1" * 64)),
        ("the thresholds' source", lambda d: d.update(thresholds_from="typed in")),
        ("the validity", lambda d: d.update(valid_until="2099-01-01T00:00:00Z")),
    ],
)
def test_a_forged_certificate_with_its_hash_recomputed_fails_with_the_public_key(
    tmp_path: Path, keys: tuple[Path, Path], what: str, edit: Any
) -> None:
    priv, pub = keys
    path = _signed_run(tmp_path, priv)
    _forge(path, edit)
    assert verify(path).ok, f"{what}: the forger's recomputed hash matches"
    check = verify(path, pubkey=pub)
    assert not check.ok and not check.signature_checked
    assert check.problems == [
        "the signature does not match the certificate: it was edited after signing "
        "(a recomputed content hash does not make it genuine)"
    ]


def test_an_unsigned_certificate_verifies_its_hash_and_fails_with_a_public_key(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    from orchestrator.cli import main

    _, pub = keys
    run = make_run(tmp_path / "runs", "r1")
    issue(run, now=NOW)
    path = cert_path(run, "localhost")
    check = verify(path)
    assert check.ok and check.signed_by is None
    refused = verify(path, pubkey=pub)
    assert not refused.ok and refused.problems[0].startswith("unsigned: a public key was given")
    with pytest.raises(SystemExit) as info:
        main(["cert", "verify", str(path), "--pubkey", str(pub)])
    assert info.value.code == 1


def test_the_cli_says_unsigned_signed_or_valid(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    priv, pub = keys
    run = make_run(tmp_path / "runs", "r1")
    for args in (["cert", "issue", str(run)], ["cert", "verify", str(cert_path(run, "localhost"))]):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 0
    assert "unsigned" in capsys.readouterr().out
    path = _signed_run(tmp_path / "b", priv)
    with pytest.raises(SystemExit) as info:
        main(["cert", "verify", str(path), "--pubkey", str(pub)])
    assert info.value.code == 0 and "signature valid" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        main(["cert", "show", "localhost", "--dir", str(path.parents[2])])
    assert info.value.code == 0 and "signed by ed25519:" in capsys.readouterr().out


def test_a_wrong_key_and_a_swapped_key_id_fail(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    priv, _ = keys
    _, other_pub = _other_key(tmp_path)
    path = _signed_run(tmp_path, priv)
    check = verify(path, pubkey=other_pub)
    assert not check.ok and "not by the key given" in check.problems[0]
    data = json.loads(path.read_text())
    data["signature"]["key_id"] = sign.key_id(sign._public_raw(sign.load_public(other_pub)))
    path.write_text(json.dumps(data))
    check = verify(path, pubkey=other_pub)
    assert not check.ok and "does not match the certificate" in check.problems[0]


def test_a_truncated_signature_fails(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    priv, pub = keys
    path = _signed_run(tmp_path, priv)
    data = json.loads(path.read_text())
    raw = base64.b64decode(data["signature"]["value"])
    data["signature"]["value"] = base64.b64encode(raw[:-1]).decode()
    path.write_text(json.dumps(data))
    assert verify(path).ok  # the signature is outside the content hash
    check = verify(path, pubkey=pub)
    assert not check.ok and check.problems == ["the signature is 63 bytes, not 64 (truncated or damaged)"]


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o400, 0o700])
def test_a_private_key_file_with_another_mode_is_refused_and_nothing_is_written(
    tmp_path: Path, keys: tuple[Path, Path], mode: int
) -> None:
    priv, _ = keys
    os.chmod(priv, mode)
    run = make_run(tmp_path / "runs", "r1")
    with pytest.raises(ConfigError) as info:
        issue(run, now=NOW, key=priv)
    assert str(priv) in info.value.message and f"mode {mode:04o}, not 0600" in info.value.message
    assert not (run / "certs").exists()


def test_a_private_key_through_a_link_or_not_a_key_is_refused(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    priv, pub = keys
    link = tmp_path / "link.key"
    link.symlink_to(priv)
    with pytest.raises(ConfigError, match="cannot open the private key"):
        sign.load_private(link)
    os.chmod(pub, 0o600)
    with pytest.raises(ConfigError, match="not an unencrypted Ed25519 private key") as info:
        sign.load_private(pub)
    assert "BEGIN" not in info.value.message


def _key_parts(priv: Path) -> list[bytes]:
    """Every form a leak of the private key could take: the PEM body and its lines, the raw seed,
    in hex and base64."""
    from cryptography.hazmat.primitives import serialization

    pem = priv.read_bytes()
    body = [ln for ln in pem.splitlines() if ln and not ln.startswith(b"-----")]
    seed = sign.load_private(priv).private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return [
        pem,
        *body,
        seed,
        seed.hex().encode(),
        base64.b64encode(seed),
        base64.b64encode(seed).rstrip(b"="),
    ]


def test_no_part_of_the_private_key_reaches_the_run_folder_or_the_store(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli import main

    priv, pub = keys
    store = tmp_path / "store.db"
    monkeypatch.setenv("ORCH_STORE", str(store))
    run = make_run(tmp_path / "runs", "r1")
    (run / "steps" / "n1xg1").mkdir(parents=True, exist_ok=True)
    (run / "steps" / "n1xg1" / "rank-0.log").write_text("rank 0\n")
    with pytest.raises(SystemExit) as info:
        main(["cert", "issue", str(run), "--key", str(priv)])
    assert info.value.code == 0
    from orchestrator.store.db import ResultsStore

    with ResultsStore.open(store) as db:  # the run, its certificates written, taken into the store
        db.ingest(run)
    parts = _key_parts(priv)
    files = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    files += [p for p in tmp_path.glob("store.db*") if p.is_file()]
    assert any(p.name == "localhost.json" for p in files) and store in files
    for f in files:
        data = f.read_bytes()
        leaked = [i for i, part in enumerate(parts) if part in data]
        assert leaked == [], f"{f} holds part {leaked} of the private key"
    assert verify(cert_path(run, "localhost"), pubkey=pub).ok


def _quick_setup(tmp_path: Path, key: Path | None, *, pubkey_var: Path | None = None) -> tuple[Path, Path]:
    fp = _matching("node1")
    host: dict[str, Any] = {"ansible_host": "198.18.0.11"}
    if pubkey_var is not None:
        host["orch_cert_pubkey"] = str(pubkey_var)
    tmp_path.mkdir(parents=True, exist_ok=True)
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"node1": host}}}))
    cert = seal(
        Certificate(
            node="node1", run_id="20261201T060000Z-smoke-abcd", plan="smoke", run_status="accepted",
            issued_at=NOW, valid_until=datetime(2026, 12, 30, tzinfo=UTC),
            stack=stack_summary("cpu-gloo", NOW, fp),
            tests=[CertTest(step="n1xg2", collective="all_reduce", nnodes=1, ranks=2, metric="busbw_gbs",
                            threshold=0.5, measured=1.0, passed=True)],
        )
    )  # fmt: skip
    if key is not None:
        cert = sign.sign(cert, sign.load_private(key))
    path = cert_path(tmp_path / "runs" / "r1", "node1")
    path.parent.mkdir(parents=True)
    path.write_text(cert_text(cert))
    return inv, tmp_path / "runs"


def test_check_quick_verifies_the_signature_when_a_public_key_is_configured(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.inventory import load_inventory

    priv, pub = keys
    _fingerprint_now(monkeypatch, _matching("node1"))
    inv, root = _quick_setup(tmp_path / "a", priv, pubkey_var=Path("../keys/lab.key.pub"))
    assert load_inventory(inv).vars.orch_cert_pubkey == tmp_path / "a" / "../keys/lab.key.pub"
    assert quick_check("node1", inv, root, now=NOW).ok
    path = cert_path(root / "r1", "node1")
    _forge(path, lambda d: d["tests"][0].update(measured=9.0))
    res = quick_check("node1", inv, root, now=NOW)
    assert not res.ok and res.problems[0].startswith("certificate signature: the signature does not match")
    # the same forgery passes where no key is configured (the hash was recomputed): the key is what catches it
    inv_nokey = tmp_path / "a" / "nokey.yml"
    inv_nokey.write_text(yaml.safe_dump({"all": {"hosts": {"node1": {"ansible_host": "198.18.0.11"}}}}))
    assert quick_check("node1", inv_nokey, root, now=NOW).ok
    assert not quick_check("node1", inv_nokey, root, now=NOW, pubkey=pub).ok
    # an unsigned certificate: fine without a key, refused with --pubkey
    inv2, root2 = _quick_setup(tmp_path / "b", None)
    assert quick_check("node1", inv2, root2, now=NOW).ok
    res = quick_check("node1", inv2, root2, now=NOW, pubkey=pub)
    assert not res.ok and "unsigned" in res.problems[0]


def test_check_quick_without_a_key_never_imports_cryptography(tmp_path: Path) -> None:
    """certs.sign imports it inside the functions that sign or verify (check --quick's start-up;
    whether the CLI module of check loads paramiko and the rest is the start-up work's test)."""
    code = (
        "import sys\n"
        "import orchestrator.certs.quick, orchestrator.certs.service, orchestrator.certs.sign\n"
        "assert 'cryptography' not in sys.modules, sorted(m for m in sys.modules if 'crypt' in m)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(PKG)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

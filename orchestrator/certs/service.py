"""Certificates on disk: issue them into a run folder, verify a file, find and list them.

Layout: `<run folder>/certs/<node>.json`, one file per certified node, written atomically
(safefs.atomic_write: a fresh temporary file, fsync, rename; never through a link). The node name is
an identifier (models/names.py) and the path is built with paths.under, so a name from a run folder
never leads outside it. Files found under a folder of runs are read only when they are regular
files inside it (safefs.read_inside).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator.certs import digest, sign
from orchestrator.errors import ConfigError
from orchestrator.models.cert import CertCheck, CertEntry, Certificate, IssueResult, RawLog
from orchestrator.models.names import check_name
from orchestrator.paths import under
from orchestrator.safefs import NotInside, atomic_write, read_inside, untrusted_folder
from orchestrator.store.rundir import json_data

if TYPE_CHECKING:
    from orchestrator.models.run import RunRecord

# certs.build and store.load are imported where they are used: `orch check --quick` (a prolog)
# reads certificates through this module and must not load the run and plan models.

CERTS_DIR = "certs"
DEFAULT_VALID_DAYS = 30


def node_name(node: str) -> str:
    """node, when it is a plain name (models/names.check_name); raises ConfigError otherwise."""
    try:
        return check_name(node, what="node name")
    except ValueError as e:
        raise ConfigError(str(e)) from e


def cert_path(run_dir: Path, node: str) -> Path:
    """<run_dir>/certs/<node>.json; raises ConfigError when node is not a plain name."""
    node_name(node)
    return under(run_dir, CERTS_DIR, f"{node}.json", what="certificate")


def cert_text(cert: Certificate) -> str:
    """The file's text: the certificate's JSON data, indented (indentation is not hashed)."""
    return json.dumps(cert.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n"


def raw_logs(rec: RunRecord) -> dict[str, list[RawLog]]:
    """step id -> the hash of each raw log in steps/<id>/ of the run folder (its final attempt: the
    one the figures were parsed from; report.common.step_logs finds them, never through a link).

    Raises ConfigError when a log cannot be read.
    """
    from orchestrator.report.common import step_logs  # issue only: check --quick stays light

    out: dict[str, list[RawLog]] = {}
    for res in rec.steps:
        sid = res.step.id
        folder = rec.run_dir / "steps" / sid
        for p in step_logs(rec, sid):
            if p.parent != folder:
                continue
            try:
                data = read_inside(rec.run_dir, p)
            except OSError as e:
                raise ConfigError(f"{p}: raw log cannot be read ({e.strerror or e})") from e
            out.setdefault(sid, []).append(
                RawLog(step=sid, path=p.relative_to(rec.run_dir).as_posix(), sha256=digest.bytes_sha256(data))
            )
    return out


def issue(
    run_dir: Path,
    *,
    valid_days: int = DEFAULT_VALID_DAYS,
    now: datetime | None = None,
    key: Path | None = None,
    baseline_sha256: str | None = None,
    baseline_reasons: dict[str, list[str]] | None = None,
) -> IssueResult:
    """Certify the nodes of the finished run in run_dir that passed; write certs/<node>.json,
    signed with the Ed25519 private key in the file `key` when it is given (certs.sign).
    baseline_sha256, baseline_reasons: the fleet baseline judged against and the nodes outside it
    (certs.fleet.judge_run; certs.build.certify).

    Raises ConfigError when run_dir is not a run folder, is still running or has no readable plan,
    valid_days < 1, or the key file is refused (mode not 0600, not a key): then nothing is written;
    InfraError when a file cannot be written.
    """
    from orchestrator.certs.build import certify
    from orchestrator.store.load import load_run

    private = sign.load_private(key) if key is not None else None
    rec = load_run(run_dir)
    certs, refused = certify(
        rec, now=now or datetime.now(UTC), valid_days=valid_days, logs=raw_logs(rec),
        baseline_sha256=baseline_sha256, baseline_reasons=baseline_reasons,
    )  # fmt: skip
    result = IssueResult(run_id=rec.run_id, refused=refused)
    for cert in certs:
        if private is not None:
            cert = sign.sign(cert, private)
        path = cert_path(run_dir, cert.node)
        atomic_write(path, cert_text(cert))
        result.issued[cert.node] = str(path)
    return result


def _read_json(path: Path, root: Path | None) -> dict[str, Any]:
    try:
        raw = read_inside(root, path) if root is not None else path.read_bytes()
        data = json_data(raw.decode("utf-8"))
    except NotInside:
        raise
    except FileNotFoundError as e:
        raise ConfigError(f"{path}: no such certificate") from e
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read as JSON ({e})") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object, not a certificate")
    return data


def check_data(path: Path, data: dict[str, Any]) -> tuple[Certificate | None, list[str]]:
    """The certificate in data (None when invalid) and what is wrong with it (empty: intact)."""
    problems = digest.changes(data)
    try:
        cert: Certificate | None = Certificate.model_validate(data)
    except ValidationError as e:
        from orchestrator.store.load import invalid

        cert = None
        problems.append(f"invalid: {invalid(path, e, quote=False)}")
    return cert, problems


def signature_problems(cert: Certificate, pubkey: Path) -> list[str]:
    """Why cert's signature does not hold against the public key file pubkey (empty: it holds).
    Loads `cryptography` (certs.sign) only when called. Raises ConfigError when the key is refused."""
    return sign.check(cert, pubkey)


def verify(path: Path, *, pubkey: Path | None = None) -> CertCheck:
    """Whether the certificate file at path is intact and, with pubkey, signed by that key; the
    problems name what changed, or why the signature does not hold (an unsigned certificate fails
    when pubkey is given).

    Raises ConfigError when the file cannot be read or is not a JSON object, or the public key
    cannot be read.
    """
    data = _read_json(path, None)
    cert, problems = check_data(path, data)
    node = cert.node if cert else (str(data["node"]) if isinstance(data.get("node"), str) else None)
    signed_by = cert.signature.key_id if cert is not None and cert.signature is not None else None
    if pubkey is not None:
        if cert is None:
            problems.append("the signature cannot be checked: the certificate is invalid")
        elif not problems:
            problems += signature_problems(cert, pubkey)
    return CertCheck(path=str(path), node=node, ok=not problems, problems=problems, signed_by=signed_by,
                     signature_checked=pubkey is not None and not problems)  # fmt: skip


def cert_files(root: Path) -> list[Path]:
    """Certificate files under root: a run folder (root/certs/*.json) or a folder of run folders."""
    found = sorted(root.glob(f"{CERTS_DIR}/*.json")) + sorted(root.glob(f"*/{CERTS_DIR}/*.json"))
    return [p for p in found if not p.name.startswith(".")]


def untrusted_cert(path: Path) -> str | None:
    """Why the certificate file at path (RUN/certs/NODE.json) may not be believed, or None: its run
    folder or certs folder is owned by someone else (not you, not root) or writable by others,
    who could have planted it (a certificate dated 2030 would win every lookup)."""
    for folder in (path.parent, path.parent.parent):
        if (why := untrusted_folder(folder)) is not None:
            return f"{folder} {why}"
    return None


def entries(root: Path, *, now: datetime | None = None) -> list[CertEntry]:
    """Every certificate under root with its validity at now (default: the current time).

    Raises ConfigError when root is not a folder.
    """
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder of runs")
    at = now or datetime.now(UTC)
    out: list[CertEntry] = []
    for path in cert_files(root):
        if (why := untrusted_cert(path)) is not None:
            out.append(CertEntry(path=str(path), intact=False, problems=[f"not trusted: {why}"]))
            continue
        try:
            data = _read_json(path, root)
        except ConfigError as e:
            out.append(CertEntry(path=str(path), intact=False, problems=[e.message]))
            continue
        cert, problems = check_data(path, data)
        if cert is None:
            out.append(CertEntry(path=str(path), intact=False, problems=problems))
            continue
        out.append(
            CertEntry(path=str(path), node=cert.node, run_id=cert.run_id, issued_at=cert.issued_at,
                      valid_until=cert.valid_until, expired=cert.expired(at), intact=not problems,
                      problems=problems)
        )  # fmt: skip
    out.sort(key=lambda e: (e.node or "", e.issued_at or datetime.min.replace(tzinfo=UTC)))
    return out


def latest(node: str, root: Path) -> tuple[Path, Certificate, list[str]]:
    """The newest certificate of node under root (by issued_at), with its problems (empty: intact).

    Raises ConfigError when node is not a plain name or has no readable certificate under root.
    """
    node_name(node)
    best: tuple[Path, Certificate, list[str]] | None = None
    if root.is_dir():
        for path in (p for p in cert_files(root) if p.name == f"{node}.json"):
            if untrusted_cert(path) is not None:  # planted by someone else: never the answer
                continue
            try:
                cert, problems = check_data(path, _read_json(path, root))
            except ConfigError:
                continue
            if (
                cert is not None
                and cert.node == node
                and (best is None or cert.issued_at > best[1].issued_at)
            ):
                best = (path, cert, problems)
    if best is None:
        raise ConfigError(
            f"no certificate for {node} under {root}",
            hint="orch cert issue RUN_DIR writes them; --dir names the folder of runs",
        )
    return best

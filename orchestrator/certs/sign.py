"""Signed certificates: an Ed25519 key pair the lab team holds, a signature over a SignedPayload.

The signed bytes are digest.canonical(SignedPayload(...).model_dump(mode="json")): the content
hash, the stack fingerprint's hash, each raw log's hash, the thresholds and where they came from,
and the fleet baseline's hash (None today), under a purpose string. The signature and the key id
('ed25519:' + 32 hex digits of sha256 over the 32 raw bytes of the public key) go into the
certificate, outside the content hash (certs.digest).

Key material is read only from the file named (never from the environment or the command line),
the private key file must be a regular file of this user with mode 0600, and nothing here writes,
prints or raises with any part of it. `cryptography` is imported inside the functions, so that
`orch check --quick` without a public key never loads it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.certs import digest
from orchestrator.errors import ConfigError, InfraError
from orchestrator.models.cert import (
    Certificate,
    CertSignature,
    KeyPair,
    SignedPayload,
    SignedThreshold,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

PRIVATE_MODE = 0o600
PUBLIC_MODE = 0o644
SIGNATURE_BYTES = 64
_MAX_KEY_FILE = 64 * 1024


def payload(cert: Certificate) -> SignedPayload:
    """What the signature of cert covers (its content_hash must already be filled in)."""
    return SignedPayload(
        node=cert.node,
        run_id=cert.run_id,
        content_hash=cert.content_hash,
        fingerprint_sha256=cert.stack.fingerprint_sha256 if cert.stack else None,
        raw_logs=cert.raw_logs,
        thresholds=[
            SignedThreshold(
                step=t.step,
                collective=t.collective,
                metric=t.metric,
                size_bytes=t.size_bytes,
                threshold=t.threshold,
            )
            for t in cert.tests
        ],
        thresholds_from=cert.thresholds_from,
        baseline_sha256=cert.baseline_sha256,
    )


def signed_bytes(cert: Certificate) -> bytes:
    """The bytes signed for cert: the canonical JSON of its SignedPayload."""
    return digest.canonical(payload(cert).model_dump(mode="json"))


def key_id(public_raw: bytes) -> str:
    """'ed25519:' + the first 32 hex digits of sha256 over the raw public key."""
    return "ed25519:" + hashlib.sha256(public_raw).hexdigest()[:32]


def _public_raw(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _create(path: Path, data: bytes, mode: int) -> None:
    """Write data to path, created exclusively with mode (never through a link). Raises OSError."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have cut it
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def keygen(private_path: Path, public_path: Path | None = None) -> KeyPair:
    """A new Ed25519 key pair: the private key (PEM, PKCS#8, unencrypted, mode 0600) and the public
    key (PEM, default private_path + '.pub', mode 0644), both created exclusively.

    Raises ConfigError when either file exists (nothing is overwritten), InfraError when one cannot
    be written (then neither is left behind).
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    pub_path = public_path or private_path.with_name(private_path.name + ".pub")
    for p in (private_path, pub_path):
        if os.path.lexists(p):
            raise ConfigError(f"{p} exists; orch cert keygen never overwrites a key", hint="name a new file")
    key = Ed25519PrivateKey.generate()
    pem_private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key()
    pem_public = public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    written: list[Path] = []
    try:
        for path, data, mode in (
            (private_path, pem_private, PRIVATE_MODE),
            (pub_path, pem_public, PUBLIC_MODE),
        ):
            _create(path, data, mode)
            written.append(path)
    except OSError as e:
        for p in written:
            p.unlink(missing_ok=True)
        if isinstance(e, FileExistsError):
            raise ConfigError(
                f"{e.filename or pub_path} exists; orch cert keygen never overwrites a key"
            ) from None
        raise InfraError(f"cannot write {e.filename or private_path}: {e.strerror or e}") from None
    return KeyPair(
        private_key=str(private_path), public_key=str(pub_path), key_id=key_id(_public_raw(public))
    )


def _read_key_file(path: Path, *, private: bool) -> bytes:
    """The bytes of a key file: a regular file (not a link); a private one of this user, mode 0600.

    Raises ConfigError naming the file (and its mode) when it is refused or cannot be read.
    """
    what = "private key" if private else "public key"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what} file") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot open the {what} ({e.strerror or 'a link?'})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: the {what} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if private and mode != PRIVATE_MODE:
            raise ConfigError(
                f"{path}: private key file has mode {mode:04o}, not 0600; refused",
                hint=f"chmod 600 {path} (and check who else could have read it)",
            )
        if private and st.st_uid != os.getuid():
            raise ConfigError(f"{path}: private key file belongs to uid {st.st_uid}, not to you; refused")
        if st.st_size > _MAX_KEY_FILE:
            raise ConfigError(f"{path}: {st.st_size} bytes, too large for a {what}")
        try:
            return fh.read(_MAX_KEY_FILE + 1)
        except OSError as e:
            raise ConfigError(f"{path}: cannot read the {what} ({e.strerror})") from None


def load_private(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 private key in path (PEM, PKCS#8, unencrypted; mode 0600).

    Raises ConfigError naming the file, never quoting it.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = _read_key_file(path, private=True)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):  # not shown: a message could quote the key
        raise ConfigError(
            f"{path}: not an unencrypted Ed25519 private key in PEM (orch cert keygen writes one)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: not an Ed25519 private key")
    return key


def load_public(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in path (PEM, SubjectPublicKeyInfo). Raises ConfigError naming it."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key_file(path, private=False)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(f"{path}: not an Ed25519 public key in PEM (orch cert keygen writes one)") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{path}: not an Ed25519 public key")
    return key


def sign(cert: Certificate, key: Ed25519PrivateKey) -> Certificate:
    """cert (sealed) with its signature by key."""
    sig = key.sign(signed_bytes(cert))
    signature = CertSignature(
        key_id=key_id(_public_raw(key.public_key())), value=base64.b64encode(sig).decode()
    )
    return cert.model_copy(update={"signature": signature})


def check(cert: Certificate, public_path: Path) -> list[str]:
    """Why cert's signature does not hold against the public key in public_path (empty: it holds).

    The content hash is checked apart (digest.changes): a signature over a hash that matches
    nothing proves nothing. Raises ConfigError when the public key cannot be read.
    """
    from cryptography.exceptions import InvalidSignature

    public = load_public(public_path)
    want = key_id(_public_raw(public))
    sig = cert.signature
    if sig is None:
        return [f"unsigned: a public key was given ({want}) but the certificate carries no signature"]
    if sig.key_id != want:
        return [f"signed by key {sig.key_id}, not by the key given ({want}, {public_path})"]
    try:
        raw = base64.b64decode(sig.value, validate=True)
    except (binascii.Error, ValueError):
        return ["the signature is not valid base64"]
    if len(raw) != SIGNATURE_BYTES:
        return [f"the signature is {len(raw)} bytes, not {SIGNATURE_BYTES} (truncated or damaged)"]
    try:
        public.verify(raw, signed_bytes(cert))
    except InvalidSignature:
        return [
            "the signature does not match the certificate: it was edited after signing "
            "(a recomputed content hash does not make it genuine)"
        ]
    return []

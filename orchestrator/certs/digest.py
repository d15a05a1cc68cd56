"""The content hash of a certificate, and what an edit changed.

Canonical form: the certificate as JSON data (pydantic's JSON mode: datetimes as ISO 8601 text,
floats as numbers) without `content_hash`, serialised by `json.dumps` with

- keys sorted (at every depth), so the order of fields in the file does not matter;
- no whitespace (separators "," and ":"), so indentation and line ends do not matter;
- `ensure_ascii=False` and UTF-8 bytes, so a name is hashed as its characters, not its escapes;
- `allow_nan=False`: NaN and infinities are refused (JSON has no such numbers);
- floats as Python's shortest round-trip repr (5.25, 0.1, 1e-07), integers as integers.

This is close to RFC 8785 (JSON Canonicalization Scheme) but not the same: JCS sorts keys by
UTF-16 code units and writes numbers as ECMAScript does (1e+21, 5 for 5.0). A verifier in another
language must follow the rules above, not JCS. The hash is sha256 over those bytes, written as
`sha256:<64 hex digits>`.

Verification hashes the JSON data of the file as read (not the data after pydantic has coerced it),
so a figure written as a string, or a number changed in its last digit, is an edit. Whitespace and
key order are not. `field_digests` holds the same hash of each other top-level field, and of each
item of a list field (`tests[3]`), so a failed check can name what changed; the content hash covers
`field_digests` too, so editing a digest to match is caught as well.

`signature` is outside both: it signs the content hash (certs.sign), so it cannot be under it.
Removing it leaves an intact, unsigned certificate, which a check with a public key refuses.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

HASH_FIELD = "content_hash"
DIGESTS_FIELD = "field_digests"
SIGNATURE_FIELD = "signature"
_NOT_HASHED = (HASH_FIELD, DIGESTS_FIELD, SIGNATURE_FIELD)
PREFIX = "sha256:"


def canonical(data: Any) -> bytes:
    """The canonical JSON bytes of data (see the module doc); raises ValueError on NaN/inf."""
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256(data: Any) -> str:
    """'sha256:' + the hex digest of canonical(data)."""
    return PREFIX + hashlib.sha256(canonical(data)).hexdigest()


def bytes_sha256(data: bytes) -> str:
    """'sha256:' + the hex digest of data as it is (a raw log's bytes)."""
    return PREFIX + hashlib.sha256(data).hexdigest()


def field_digests(data: dict[str, Any]) -> dict[str, str]:
    """sha256 of each top-level field but the hash fields and the signature, and of each item of a
    list field."""
    out: dict[str, str] = {}
    for key, value in data.items():
        if key in _NOT_HASHED:
            continue
        out[key] = sha256(value)
        if isinstance(value, list):
            out.update({f"{key}[{i}]": sha256(item) for i, item in enumerate(value)})
    return out


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """data with field_digests and content_hash filled in, and no signature (a new dict; data is not
    changed): a signature made before no longer signs what was sealed."""
    body = {k: v for k, v in data.items() if k not in _NOT_HASHED}
    body[DIGESTS_FIELD] = field_digests(body)
    return {**body, HASH_FIELD: sha256(body)}


def changes(data: dict[str, Any]) -> list[str]:
    """What does not match in sealed data read back from a file: empty when it is intact.

    Each problem names the field ('tests[2] changed', 'note added', 'faults removed') where the
    recorded field digests allow it, else says that the content hash does not match.
    """
    claimed = data.get(HASH_FIELD)
    body = {k: v for k, v in data.items() if k not in (HASH_FIELD, SIGNATURE_FIELD)}
    if not isinstance(claimed, str) or not claimed.startswith(PREFIX):
        return [f"{HASH_FIELD} is missing or not a 'sha256:' digest"]
    try:
        actual = sha256(body)
    except ValueError as e:
        return [f"not canonical JSON: {e}"]
    if actual == claimed:
        return []
    recorded = body.get(DIGESTS_FIELD)
    problems: list[str] = []
    if isinstance(recorded, dict):
        now = field_digests(body)
        for key in sorted(set(recorded) | set(now), key=_order):
            if key not in now:
                problems.append(f"{key} removed")
            elif key not in recorded:
                problems.append(f"{key} added")
            elif recorded[key] != now[key]:
                problems.append(f"{key} changed")
        problems = _drop_covered(problems)
    if not problems:
        problems.append(f"{DIGESTS_FIELD} or {HASH_FIELD} was edited")
    return [f"the content hash does not match ({claimed} recorded, {actual} now)", *problems]


def _order(key: str) -> tuple[str, int]:
    name, _, idx = key.partition("[")
    return (name, int(idx.rstrip("]")) if idx else -1)


def _drop_covered(problems: list[str]) -> list[str]:
    """'tests changed' is implied by 'tests[2] changed': keep the most precise lines."""
    items = {p.split("[", 1)[0] for p in problems if "[" in p}
    return [p for p in problems if "[" in p or p.split(" ", 1)[0] not in items]

"""Where the results store is: a SQLite file (the embedded default) or a PostgreSQL database.

`ORCH_STORE` (or `--store`) holds either a path, or a libpq URL `postgresql://[user@]host[:port]/db`
(`postgres://` too; `postgresql:///db?host=/run/postgresql` for a unix socket,
`postgresql:///?service=orch` for a pg_service.conf entry).

The URL is written down in many places (cron scripts, the sbatch environment of the nightly job,
the journal's store_error events, logs), so it must never carry a password: one that does is
refused. libpq takes the password from the password file (~/.pgpass, or $PGPASSFILE) or from a
service file (~/.pg_service.conf, or $PGSERVICEFILE, named by $PGSERVICE or ?service=).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from pydantic import ConfigDict

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel

STORE_ENV = "ORCH_STORE"
STORE_NAME = "orch.db"
PG_SCHEMES = ("postgresql", "postgres")
# Query keys of a libpq URL that carry a secret.
_SECRET_KEYS = frozenset({"password", "sslpassword"})
_PGPASS_HINT = (
    "put the password in ~/.pgpass (or the file $PGPASSFILE names; mode 0600), or use a service "
    "from pg_service.conf (postgresql:///?service=NAME), and give the URL without it"
)


class PgUrl(StrictModel):
    """A PostgreSQL store: a libpq connection URL that carries no password."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str

    def __str__(self) -> str:
        return self.url


StoreLocation = Path | PgUrl


def redact(url: str) -> str:
    """url with any password (userinfo or query) replaced by ***, for error messages; a URL too
    malformed to split is shown by its scheme alone (it may hold a password). Raises nothing."""
    try:
        parts = urlsplit(url)
    except ValueError:
        scheme = url.partition("://")[0] if "://" in url else ""
        return f"{scheme[:20]}://<malformed, not shown>"
    netloc = parts.netloc
    if parts.password:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
    query = "&".join(
        f"{k}={'***' if k.lower() in _SECRET_KEYS else v}"
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    return parts._replace(netloc=netloc, query=query).geturl()


def pg_url(text: str) -> PgUrl:
    """A checked PostgreSQL URL; raises ConfigError for a password in it or a malformed URL."""
    try:
        parts = urlsplit(text)
        password = parts.password
        keys = {k.lower() for k, _ in parse_qsl(parts.query, keep_blank_values=True)}
    except ValueError as e:
        raise ConfigError(f"results store URL {redact(text)!r}: {e}") from e
    if parts.scheme not in PG_SCHEMES:
        raise ConfigError(f"results store URL {redact(text)!r}: expected postgresql:// or postgres://")
    if password or keys & _SECRET_KEYS:
        raise ConfigError(
            f"results store URL {redact(text)!r} carries a password, which would be written into cron "
            "scripts, job environments and journals",
            hint=_PGPASS_HINT,
        )
    return PgUrl(url=text)


def is_pg(text: str) -> bool:
    return text.split("://", 1)[0].lower() in PG_SCHEMES and "://" in text


def parse_store(value: str | Path) -> StoreLocation:
    """A --store / $ORCH_STORE value as a store location (a PostgreSQL URL or a file path)."""
    if isinstance(value, Path):
        return value
    if is_pg(value):
        return pg_url(value)
    if "://" in value:
        raise ConfigError(
            f"results store {redact(value)!r}: unknown scheme",
            hint="give a file path, or a postgresql:// URL",
        )
    return Path(value)


def default_store(runs_root: Path | None = None) -> StoreLocation:
    """$ORCH_STORE when set, else <runs_root>/orch.db (runs_root defaults to ./runs)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return parse_store(env)
    return (runs_root or Path("runs")) / STORE_NAME


def store_ref(loc: StoreLocation) -> str:
    """The location as text to hand on (cron scripts, job environments): absolute path, or the URL."""
    return loc.url if isinstance(loc, PgUrl) else str(loc.resolve())

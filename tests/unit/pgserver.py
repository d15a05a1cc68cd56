"""A real PostgreSQL server for the store's tests, started from Debian's postgresql package.

initdb a cluster in a fresh /tmp directory, start it on 127.0.0.1 at a free port and on a unix
socket in that directory, stop it (pg_ctl stop, fast) and remove the directory at the end. PostgreSQL
refuses to run as root: as root, the server runs as the `postgres` user (runuser). TCP logins use
scram-sha-256 with a password, so a test only connects through libpq's password or service file;
the socket trusts (set-up only).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "orch"


def _bindir() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    root: Path
    port: int
    password: str
    socket_dir: Path

    def url(self, db: str) -> str:
        """A URL without password (the password comes from the pgpass file)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{db}"

    def write_pgpass(self, path: Path) -> Path:
        path.write_text(f"127.0.0.1:{self.port}:*:{USER}:{self.password}\n")
        path.chmod(0o600)
        return path

    def admin(self, sql: str) -> None:
        """Run one statement as the superuser over the trusted socket (CREATE DATABASE ...)."""
        import psycopg

        with psycopg.connect(
            host=str(self.socket_dir), port=self.port, user=USER, dbname="postgres", autocommit=True
        ) as c:
            c.execute(sql.encode())


@contextmanager
def pg_server() -> Iterator[PgServer]:
    """Start a server; skips the test when PostgreSQL or psycopg is missing."""
    pytest.importorskip("psycopg")
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries missing (apt-get install postgresql)")
    as_root = os.geteuid() == 0
    if as_root and shutil.which("runuser") is None:
        pytest.skip("running as root without runuser: cannot start PostgreSQL as another user")
    prefix = ["runuser", "-u", "postgres", "--"] if as_root else []
    root = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    password = secrets.token_hex(12)
    data, port = root / "data", _free_port()
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if as_root:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(pwfile, "postgres", "postgres")
    root.chmod(0o700)

    def pg(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=timeout, check=False)

    r = pg(str(bindir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
           "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")  # fmt: skip
    pwfile.unlink()
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {r.stdout}{r.stderr}")
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c fsync=off"
    r = pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start")
    if r.returncode != 0:
        log = (root / "log").read_text() if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed: {r.stdout}{r.stderr}{log}")
    try:
        yield PgServer(root=root, port=port, password=password, socket_dir=root)
    finally:
        pg(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

"""Slurm accounting for the lab: a private MariaDB on loopback and slurmdbd in front of it."""

from __future__ import annotations

import socket

from orchestrator.errors import LabError
from orchestrator.lab import daemons, files, shell
from orchestrator.lab.config import CLUSTER_NAME, LabConfig, controller_address
from orchestrator.lab.render import DB_NAME, DB_USER
from orchestrator.lab.state import DaemonRecord


def tcp_open(port: int, host: str = "127.0.0.1") -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _mariadb_client(cfg: LabConfig) -> list[str]:
    return ["mariadb", "--no-defaults", f"--socket={cfg.mariadb_socket}", "-u", "root"]


def start_mariadb(cfg: LabConfig, env: dict[str, str]) -> DaemonRecord:
    """Initialise the datadir once, start mariadbd on loopback, and wait until it answers.

    Raises:
        LabError: initialisation fails or the server does not answer within 60 s.
    """
    datadir = files.mysql_datadir(cfg)
    if not (datadir / "mysql").is_dir():
        shell.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                "--user=mysql",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            timeout=120,
        )
    log = cfg.log_dir / "mariadb.log"
    record = daemons.spawn(
        "mariadb",
        [
            "mariadbd",
            "--no-defaults",
            "--user=mysql",
            f"--datadir={datadir}",
            f"--socket={cfg.mariadb_socket}",
            f"--pid-file={cfg.mariadb_socket.parent / 'mariadbd.pid'}",
            "--bind-address=127.0.0.1",
            f"--port={cfg.ports.mariadb}",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
        ],
        log=log,
        env=env,
    )

    def answers() -> bool:
        return shell.run([*_mariadb_client(cfg), "-e", "SELECT 1"], check=False, timeout=10).returncode == 0

    daemons.wait_for("MariaDB", answers, timeout=60, log=log)
    return record


def create_database(cfg: LabConfig, password: str) -> None:
    """Create the accounting database afresh and its user (password reset on every `up`).

    The database of an earlier lab is dropped: its slurmctld state is gone too
    (files.clear_slurm_state), so job ids start again at 1, and `sacct -j N` must not find the
    last lab's job N.

    Raises:
        LabError: the SQL fails.
    """
    host = "127.0.0.1"
    sql = "\n".join(
        [
            f"DROP DATABASE IF EXISTS {DB_NAME};",
            f"CREATE DATABASE {DB_NAME};",
            f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';",
            f"ALTER USER '{DB_USER}'@'{host}' IDENTIFIED BY '{password}';",
            f"GRANT ALL ON {DB_NAME}.* TO '{DB_USER}'@'{host}';",
            "FLUSH PRIVILEGES;",
        ]
    )
    shell.run(_mariadb_client(cfg), input_text=sql, timeout=30)


def start_slurmdbd(cfg: LabConfig, env: dict[str, str]) -> DaemonRecord:
    """Start slurmdbd (it finds slurmdbd.conf beside SLURM_CONF) and wait for its port on the
    management bridge, where the nodes reach it.

    Raises:
        LabError: it does not listen within 60 s.
    """
    log = cfg.log_dir / "slurmdbd.stderr.log"
    record = daemons.spawn("slurmdbd", ["slurmdbd", "-D"], log=log, env=env)
    daemons.wait_for(
        "slurmdbd",
        lambda: tcp_open(cfg.ports.slurmdbd, controller_address()),
        timeout=60,
        log=cfg.log_dir / "slurmdbd.log",
    )
    return record


def add_cluster(env: dict[str, str]) -> None:
    """Register the lab's cluster in the accounting database (already there is fine).

    Raises:
        LabError: sacctmgr fails for another reason.
    """
    proc = shell.run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], env=env, check=False, timeout=30)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and "already exists" not in text:
        raise LabError(f"sacctmgr add cluster failed: {text.strip()[-300:]}")


def port_in_use(port: int) -> bool:
    """True when something on this machine already listens on ``port`` (any address)."""
    return tcp_open(port, "127.0.0.1")


def ports_taken(cfg: LabConfig) -> list[int]:
    """Lab ports that something else already holds."""
    ports = [cfg.ports.slurmctld]
    if cfg.accounting:
        ports += [cfg.ports.slurmdbd, cfg.ports.mariadb]
    return [p for p in ports if port_in_use(p)]

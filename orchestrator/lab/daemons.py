"""Start the lab's daemons detached (they outlive `orch lab up`) and stop them by PID.

A node daemon runs in the node's network namespace with its own sysfs (so /sys/class/net shows
the node's NICs), the host's cgroup tree put back under it, and a private /opt — the recipe of
LAB-NOTES.md —, its own scratch and home, and the controller's folders hidden (masks.py). Each
wrapper ends in ``exec``, so the PID that Popen returns is the daemon's.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

from orchestrator.errors import LabError
from orchestrator.lab.netns import netns_path
from orchestrator.lab.shell import BASE_PATH
from orchestrator.lab.state import DaemonRecord, boot_id, start_ticks

# Executables that may belong to a lab; strays are matched on these names plus the state dir.
LAB_EXECUTABLES = frozenset(
    {"slurmctld", "slurmd", "slurmstepd", "slurmdbd", "munged", "mariadbd", "mysqld", "sshd"}
)


def daemon_env(slurm_conf: Path) -> dict[str, str]:
    """A plain environment for daemons (and the jobs they start): no venv, no orch variables."""
    return {
        "PATH": BASE_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "SLURM_CONF": str(slurm_conf),
    }


def in_node(
    netns: str, cgroup_mount: Path, private_opt: Path, argv: list[str], mounts: Sequence[str] = ()
) -> list[str]:
    """Wrap ``argv`` to run in a node: its netns, its own sysfs, host cgroups, private /opt, then
    ``mounts`` (quoted shell lines: the node's scratch, what it must not see; masks.mount_lines)."""
    cg = shlex.quote(str(cgroup_mount))
    script = " && ".join(
        [
            f"mkdir -p {cg}",
            f"mount --rbind /sys/fs/cgroup {cg}",
            "mount -t sysfs none /sys",
            f"mount --rbind {cg} /sys/fs/cgroup",
            f"mount --bind {shlex.quote(str(private_opt))} /opt",
            *mounts,
            f"exec {shlex.join(argv)}",
        ]
    )
    return [
        "nsenter",
        f"--net={netns_path(netns)}",
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
    ]


def spawn(
    name: str,
    argv: list[str],
    *,
    log: Path,
    env: Mapping[str, str],
    node: str | None = None,
    user: str | None = None,
) -> DaemonRecord:
    """Start ``argv`` in its own session, output appended to ``log``; return its record.

    Raises:
        LabError: the program cannot be started or exits at once.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,
                close_fds=True,
                user=user,
                group=user,
                extra_groups=[] if user else None,
            )
        except OSError as e:
            raise LabError(f"cannot start {name}: {e}") from e
    try:
        create_time = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        create_time = time.time()
    record = DaemonRecord(
        name=name,
        pid=proc.pid,
        create_time=create_time,
        start_ticks=start_ticks(proc.pid),
        boot_id=boot_id(),
        node=node,
        argv=argv,
        log=str(log),
    )
    time.sleep(0.05)
    if proc.poll() is not None:
        raise LabError(f"{name} exited at once (exit {proc.returncode})", hint=f"see {log}")
    return record


def pids_to_processes(pids: list[int]) -> list[psutil.Process]:
    """Live processes for ``pids`` (vanished ones are skipped)."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.Error:
            continue
    return out


def stray_processes(state_dir: Path) -> list[psutil.Process]:
    """Lab daemons not (or no longer) recorded: a lab executable whose command line names the state dir."""
    marker = str(state_dir)
    found = []
    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            name = p.info["name"] or ""
            cmdline = p.info["cmdline"] or []
        except psutil.Error:
            continue
        if name not in LAB_EXECUTABLES:
            continue
        if any(marker in arg for arg in cmdline) or _env_names(p, marker):
            found.append(p)
    return found


def running_state_dirs() -> list[Path]:
    """State dirs of labs whose daemons run now (found through SLURM_CONF in their environment)."""
    found: set[Path] = set()
    for p in psutil.process_iter(["name"]):
        try:
            if (p.info["name"] or "") not in LAB_EXECUTABLES:
                continue
            conf = p.environ().get("SLURM_CONF", "")
        except psutil.Error:
            continue
        if conf.endswith("/slurm.conf") and (Path(conf).parent / "state.json").is_file():
            found.add(Path(conf).parent)
    return sorted(found)


def _env_names(proc: psutil.Process, marker: str) -> bool:
    # slurmdbd takes no config flag: it finds the lab through SLURM_CONF in its environment.
    try:
        return marker in proc.environ().get("SLURM_CONF", "")
    except psutil.Error:
        return False


def wait_for(what: str, probe: Callable[[], bool], *, timeout: float, log: Path | None = None) -> None:
    """Poll ``probe()`` (a callable returning bool) every 0.2 s until true.

    Raises:
        LabError: not true within ``timeout`` seconds (names the log to read).
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    raise LabError(f"{what} not ready within {timeout:.0f} s", hint=f"see {log}" if log else None)

"""Integration tests against the real virtual lab (3 nodes): Slurm, SSH, Ansible, fabric, /opt.

The lifecycle tests at the end take labs down and up themselves; each puts the shared lab back
as it found it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import pytest
from conftest import run

from orchestrator.lab import status, up
from orchestrator.lab.config import LINK_PREFIX, NETNS_PREFIX
from orchestrator.lab.daemons import stray_processes

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = pytest.mark.lab


def orch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "orchestrator", *args], check=False, timeout=timeout)


def _sbatch_wait(lab: Lab, out: Path, *args: str) -> str:
    proc = lab.slurm("sbatch", "--parsable", "--wait", "-o", str(out), *args, timeout=120)
    return proc.stdout.strip().split(";")[0]


def _sacct_state(lab: Lab, job: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = lab.slurm(
            "sacct", "--parsable2", "--noheader", "-X", "-j", job, "-o", "jobid,state", check=False
        )
        for line in proc.stdout.splitlines():
            jobid, _, st = line.partition("|")
            if jobid == job:
                state = st
        if state == "COMPLETED":
            return state
        time.sleep(0.5)
    return state


def test_sinfo_idle_and_sacct_completed(lab: Lab, tmp_path: Path) -> None:
    sinfo = lab.slurm("sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
    states = dict(line.split() for line in sinfo if line.strip())
    assert states == {n.name: "idle" for n in lab.nodes}

    job = _sbatch_wait(lab, tmp_path / "hello.out", "-N1", "--wrap", "echo hello")
    assert (tmp_path / "hello.out").read_text().strip() == "hello"
    assert _sacct_state(lab, job) == "COMPLETED"
    # sacct works from a node too, as on a cluster (slurmdbd listens on the management network):
    # allocation mode and the nightly job, which runs orch on a node, follow jobs through it.
    conf = f"SLURM_CONF={lab.config.slurm_conf}"
    on_node = lab.ssh(lab.nodes[-1], "env", conf, "sacct", "--parsable2", "--noheader", "-X", "-j", job,
                      "-o", "jobid,state", check=False)  # fmt: skip
    assert on_node.stdout.split() == [f"{job}|COMPLETED"], on_node.stdout + on_node.stderr


def test_tasks_run_in_their_own_node_namespace(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "fab.out"
    script = "srun ip -4 -o addr show dev fab0"
    _sbatch_wait(lab, out, "-N3", "--ntasks-per-node=1", "--wrap", script)
    addrs = set(re.findall(r"inet (198\.18\.1\.\d+)/", out.read_text()))
    assert addrs == {n.fabric_address for n in lab.nodes}


def test_ssh_reaches_each_node_with_its_own_nic(lab: Lab) -> None:
    macs = [lab.ssh(n, "cat", "/sys/class/net/fab0/address").stdout.strip() for n in lab.nodes]
    assert all(re.fullmatch(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}", m) for m in macs), macs
    assert len(set(macs)) == len(lab.nodes)


_LISTEN = (
    "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind((sys.argv[1], 5999)); s.listen(); print('listening', flush=True); s.settimeout(8); "
    "c, _ = s.accept(); c.sendall(b'ok')"
)
_CONNECT = (
    "import socket,sys; c=socket.create_connection((sys.argv[1], 5999), timeout=3); "
    "sys.exit(0 if c.recv(2) == b'ok' else 1)"
)


def _fabric_reachable(lab: Lab, src: str, dst: str) -> bool:
    """A TCP connection from node ``src`` to node ``dst``'s fabric address (no ping on these hosts)."""
    target = lab.node(dst)
    listener = subprocess.Popen(
        ["ip", "netns", "exec", target.netns, "python3", "-c", _LISTEN, target.fabric_address],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        # Connect once it listens: it says so, or ends (bind failed: then nothing is reachable).
        # Bounded: the listener exits within 8 s of listening.
        assert listener.stdout is not None
        if listener.stdout.readline().strip() != "listening":
            return False
        argv = ["ip", "netns", "exec", lab.node(src).netns, "python3", "-c", _CONNECT, target.fabric_address]
        return run(argv, check=False, timeout=15).returncode == 0
    finally:
        listener.kill()
        listener.wait()


def test_fabric_down_keeps_management_path(lab: Lab) -> None:
    victim, a, b = lab.nodes[1], lab.nodes[0], lab.nodes[2]
    run(["ip", "-n", victim.netns, "link", "set", "fab0", "down"])
    try:
        assert lab.ssh(victim, "cat", "/sys/class/net/fab0/operstate").stdout.strip() == "down"
        srun = lab.slurm("srun", "-w", victim.name, "-N1", "cat", "/sys/class/net/fab0/operstate", timeout=60)
        assert srun.stdout.strip() == "down"
        assert _fabric_reachable(lab, a.name, b.name)
        assert not _fabric_reachable(lab, a.name, victim.name)
    finally:
        run(["ip", "-n", victim.netns, "link", "set", "fab0", "up"])
    assert _fabric_reachable(lab, a.name, victim.name)


def _sighup_sshd(lab: Lab, node: str) -> None:
    record = lab.state().daemon(f"sshd@{node}")
    assert record is not None and record.alive()
    os.kill(record.pid, signal.SIGHUP)  # sshd re-execs itself and reloads its host key


def _ssh_ok_within(lab: Lab, node_name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if lab.ssh(lab.node(node_name), "true", check=False).returncode == 0:
            return True
        time.sleep(0.3)
    return False


def test_changed_host_key_is_refused(lab: Lab, tmp_path: Path) -> None:
    node = lab.nodes[2]
    key = lab.state_dir / "nodes" / node.name / "ssh_host_ed25519_key"
    pub = key.with_suffix(".pub")
    saved = tmp_path / "saved"
    saved.mkdir()
    shutil.copy2(key, saved / key.name)
    shutil.copy2(pub, saved / pub.name)
    new = tmp_path / "new_key"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(new)])
    try:
        shutil.copy2(new, key)
        shutil.copy2(new.with_suffix(".pub"), pub)
        _sighup_sshd(lab, node.name)
        deadline = time.monotonic() + 10
        refused = None
        while time.monotonic() < deadline:
            proc = lab.ssh(node, "true", check=False)
            if "Host key verification failed" in proc.stderr:
                refused = proc
                break
            time.sleep(0.3)
        assert refused is not None and refused.returncode != 0
        assert "IDENTIFICATION HAS CHANGED" in refused.stderr
    finally:
        shutil.copy2(saved / key.name, key)
        shutil.copy2(saved / pub.name, pub)
        _sighup_sshd(lab, node.name)
    assert _ssh_ok_within(lab, node.name, 10)


def test_ansible_ping_through_lab_inventory(lab: Lab) -> None:
    ansible = Path(sys.executable).parent / "ansible"
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "True"}
    proc = run([str(ansible), "all", "-i", str(lab.inventory), "-m", "ping"], env=env, timeout=120)
    assert proc.stdout.count("SUCCESS") == len(lab.nodes), proc.stdout
    assert '"ping": "pong"' in proc.stdout


def test_opt_is_private_per_node(lab: Lab) -> None:
    name = f"orch-test-{uuid.uuid4().hex[:8]}"
    first, *others = lab.nodes
    lab.ssh(first, "touch", f"/opt/{name}")
    try:
        assert lab.ssh(first, "test", "-e", f"/opt/{name}", check=False).returncode == 0
        for node in others:
            assert lab.ssh(node, "test", "-e", f"/opt/{name}", check=False).returncode == 1
        assert not Path("/opt", name).exists()
    finally:
        lab.ssh(first, "rm", "-f", f"/opt/{name}", check=False)


def test_up_refuses_a_state_dir_sshd_would_reject(lab: Lab) -> None:
    # /tmp is world-writable: sshd's StrictModes would refuse every login with keys below it.
    state_dir = Path("/tmp", f"orch-lab-{uuid.uuid4().hex[:8]}")
    proc = orch("lab", "up", "--state-dir", str(state_dir))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "/tmp is writable by group or others" in lines[0], proc.stderr
    assert not state_dir.exists()
    assert status(lab.config).healthy


def test_status_and_down_from_another_state_dir_name_the_running_lab(lab: Lab) -> None:
    other = f"/var/lib/orch-lab-other-{uuid.uuid4().hex[:8]}"
    proc = orch("lab", "status", "--state-dir", other)
    assert proc.returncode == 3
    assert f"a lab runs from state dir {lab.state_dir}" in proc.stdout
    assert "leftovers" not in proc.stdout
    down = orch("lab", "down", "--state-dir", other)
    assert down.returncode == 3
    assert f"a lab runs from state dir {lab.state_dir}" in down.stderr
    assert status(lab.config).healthy
    assert (lab.state_dir / "lab.ini").read_text() == lab.inventory.read_text()


# ---- lifecycle: these take labs down and up; each restores the shared lab afterwards ----


def _lab_namespaces() -> list[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)]


def _lab_links() -> list[str]:
    out = run(["ip", "-o", "link", "show"]).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
    return [n for n in names if n.startswith(LINK_PREFIX)]


def _assert_nothing_left(lab: Lab) -> None:
    assert _lab_namespaces() == []
    assert _lab_links() == []
    assert stray_processes(lab.state_dir) == []
    assert not lab.config.state_file.exists()


@pytest.fixture
def restore(lab: Lab) -> Iterator[None]:
    """Bring the shared lab back up as the session found it."""
    yield
    up(lab.config)


def test_up_twice_leaves_one_lab(lab: Lab, restore: None) -> None:
    proc = orch("lab", "up", "--nodes", str(len(lab.nodes)), "--state-dir", str(lab.state_dir))
    assert proc.returncode == 0, proc.stderr
    assert "already running" in proc.stdout
    assert sorted(_lab_namespaces()) == sorted(n.netns for n in lab.nodes)
    ctl = [p for p in stray_processes(lab.state_dir) if p.name() == "slurmctld"]
    assert len(ctl) == 1


def test_down_after_slurmctld_sigkill_leaves_nothing(lab: Lab, restore: None) -> None:
    ctl = lab.state().daemon("slurmctld")
    assert ctl is not None and ctl.alive()
    os.kill(ctl.pid, signal.SIGKILL)
    proc = orch("lab", "down", "--state-dir", str(lab.state_dir))
    assert proc.returncode == 0, proc.stderr
    _assert_nothing_left(lab)
    again = orch("lab", "down", "--state-dir", str(lab.state_dir))
    assert again.returncode == 0, again.stderr


def test_down_when_half_the_lab_is_gone(lab: Lab, restore: None) -> None:
    state = lab.state()
    for name in ("munged", "sshd@node1", "slurmd@node2"):
        rec = state.daemon(name)
        assert rec is not None
        os.kill(rec.pid, signal.SIGKILL)
    run(["ip", "netns", "del", lab.nodes[0].netns])
    run(["ip", "link", "del", "orch-fab"])
    proc = orch("lab", "down", "--state-dir", str(lab.state_dir))
    assert proc.returncode == 0, proc.stderr
    _assert_nothing_left(lab)


def test_up_clears_remains_of_a_dead_lab(lab: Lab, restore: None) -> None:
    # Daemons gone (e.g. the terminal closed), namespaces and bridges still there.
    for rec in lab.state().daemons:
        proc = rec.process()
        if proc is not None:
            proc.kill()
    psutil.wait_procs([p for r in lab.state().daemons if (p := r.process())], timeout=5)
    proc = orch("lab", "up", "--nodes", str(len(lab.nodes)), "--state-dir", str(lab.state_dir))
    assert proc.returncode == 0, proc.stderr
    assert "clearing remains" in proc.stderr
    assert "already running" not in proc.stdout
    assert sorted(_lab_namespaces()) == sorted(n.netns for n in lab.nodes)


def test_no_accounting_lab_runs_a_job(lab: Lab, tmp_path: Path, restore: None) -> None:
    assert orch("lab", "down", "--state-dir", str(lab.state_dir)).returncode == 0
    inv = tmp_path / "lab.ini"
    proc = orch(
        "lab", "up", "--nodes", "3", "--no-accounting", "--state-dir", str(lab.state_dir),
        "--inventory-out", str(inv),
    )  # fmt: skip
    try:
        assert proc.returncode == 0, proc.stderr
        names = {p.name() for p in stray_processes(lab.state_dir)}
        assert "slurmdbd" not in names and "mariadbd" not in names
        out = tmp_path / "job.out"
        _sbatch_wait(lab, out, "-N2", "--wrap", "srun hostname")
        assert len(out.read_text().split()) == 2
        sacct = lab.slurm("sacct", check=False)
        assert sacct.returncode != 0
    finally:
        orch("lab", "down", "--state-dir", str(lab.state_dir))

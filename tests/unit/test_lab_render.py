"""Rendering of the lab's configs and inventory, and the state record (pure: no root, no network)."""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from orchestrator.errors import ConfigError, LabError
from orchestrator.lab import render
from orchestrator.lab.config import LabConfig, NodeSpec, make_config
from orchestrator.lab.daemons import in_node
from orchestrator.lab.state import DaemonRecord, LabState, boot_id, load_state, save_state, start_ticks


def _cfg(**kw: object) -> LabConfig:
    values: dict[str, object] = {
        "nodes": 3,
        "state_dir": Path("/var/lib/orch-lab"),
        "inventory_out": Path("/tmp/lab.ini"),
        "hostname": "vm",
        "cpus": 2,
    }
    values.update(kw)
    return LabConfig.model_validate(values)


def _conf_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_node_specs_names_addresses_and_links() -> None:
    nodes = _cfg(nodes=8).node_specs
    assert [n.name for n in nodes] == [f"node{i}" for i in range(1, 9)]
    assert nodes[0].mgmt_address == "198.18.0.11" and nodes[7].fabric_address == "198.18.1.18"
    assert all(len(n.mgmt_veth) <= 15 and n.netns.startswith("orch-") for n in nodes)
    assert len({n.mgmt_veth for n in nodes} | {n.fabric_veth for n in nodes}) == 16


def test_slurm_conf_has_what_later_features_rely_on() -> None:
    lines = _conf_lines(render.slurm_conf(_cfg()))
    for want in (
        "SlurmctldHost=vm(198.18.0.1)",
        "AuthInfo=socket=/var/lib/orch-lab/run/munge/munge.socket",
        "AccountingStoragePass=/var/lib/orch-lab/run/munge/munge.socket",
        "AccountingStorageType=accounting_storage/slurmdbd",
        # on the management bridge, where the nodes reach it (sacct on a node)
        "AccountingStorageHost=198.18.0.1",
        "ScronParameters=enable",
        "ReturnToService=2",
        "SlurmdTimeout=10",
        "SelectTypeParameters=CR_Core",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MailProg=/bin/true",
    ):
        assert want in lines, want
    nodes = [ln for ln in lines if ln.startswith("NodeName=")]
    assert nodes[1] == (
        "NodeName=node2 NodeAddr=198.18.0.12 CPUs=2 Sockets=1 CoresPerSocket=2 ThreadsPerCore=1 State=UNKNOWN"
    )
    assert any(ln.startswith("PartitionName=lab Nodes=node1,node2,node3 Default=YES") for ln in lines)
    assert not any("/etc/slurm" in ln or "=/run/munge" in ln for ln in lines)


def test_slurm_conf_without_accounting() -> None:
    lines = _conf_lines(render.slurm_conf(_cfg(accounting=False)))
    assert "AccountingStorageType=accounting_storage/none" in lines
    assert not any(ln.startswith(("AccountingStorageHost", "AccountingStoragePass")) for ln in lines)


def test_slurmdbd_conf_points_at_private_mariadb() -> None:
    lines = _conf_lines(render.slurmdbd_conf(_cfg(), "s3cret"))
    assert "StorageHost=127.0.0.1" in lines and "StoragePort=3316" in lines
    assert "StoragePass=s3cret" in lines and "DbdPort=6919" in lines
    # slurmdbd where the nodes reach it, MariaDB where only slurmdbd does
    assert "DbdAddr=198.18.0.1" in lines


def test_sshd_config_listens_on_management_only() -> None:
    cfg = _cfg()
    text = render.sshd_config(cfg, cfg.node_specs[0])
    assert "ListenAddress 198.18.0.11" in text
    assert "HostKey /var/lib/orch-lab/nodes/node1/ssh_host_ed25519_key" in text
    assert "PasswordAuthentication no" in text and "PidFile none" in text


def test_inventory_parses_as_ini_with_orch_host_vars() -> None:
    text = render.inventory(_cfg())
    hosts = [ln for ln in text.splitlines() if ln.startswith("node")]
    assert len(hosts) == 3
    first = hosts[0]
    for want in (
        "ansible_host=198.18.0.11",
        "ansible_user=root",
        "ansible_ssh_private_key_file=/var/lib/orch-lab/ssh/id_ed25519",
        "ansible_ssh_common_args='-o UserKnownHostsFile=/var/lib/orch-lab/known_hosts "
        "-o StrictHostKeyChecking=yes'",
        "ansible_python_interpreter=/usr/bin/python3",
        "gpu_vendor=none",
        "gpus_per_node=2",
        "mgmt_iface=mgmt0",
        "rdma_ifaces=fab0",
        "fabric_address=198.18.1.11",
        "container_runtime=podman",
    ):
        assert want in first, want
    assert "StrictHostKeyChecking=no" not in text
    parser = configparser.ConfigParser(allow_no_value=True, delimiters=("=",))
    parser.read_string(text.replace("\n\n", "\n"))
    assert parser["all:vars"]["orch_lab_state"] == "/var/lib/orch-lab"
    assert parser["all:vars"]["orch_slurm_conf"] == "/var/lib/orch-lab/slurm.conf"


def test_known_hosts_lines() -> None:
    nodes = [NodeSpec.build(1), NodeSpec.build(2)]
    keys = {"node1": "ssh-ed25519 AAAA1 c1\n", "node2": "ssh-ed25519 AAAA2 c2\n"}
    assert render.known_hosts(nodes, keys) == (
        "node1,198.18.0.11 ssh-ed25519 AAAA1\nnode2,198.18.0.12 ssh-ed25519 AAAA2\n"
    )


def test_in_node_quotes_and_execs() -> None:
    argv = in_node("orch-node1", Path("/s/run/cg/x"), Path("/s/nodes/node1/opt"), ["slurmd", "-N", "a b"])
    assert argv[:2] == ["nsenter", "--net=/run/netns/orch-node1"]
    script = argv[-1]
    assert "mount -t sysfs none /sys" in script and "mount --bind /s/nodes/node1/opt /opt" in script
    assert script.endswith("exec slurmd -N 'a b'")


@pytest.mark.parametrize("bad", ["relative/dir", "/with space", "/semi;colon"])
def test_state_dir_must_be_plain_absolute(bad: str) -> None:
    with pytest.raises(ConfigError, match="state_dir"):
        make_config(
            nodes=3, state_dir=Path(bad), inventory_out=Path("x"), accounting=True, hostname="h", cpus=2
        )


def test_node_count_bounds() -> None:
    with pytest.raises(ConfigError, match="nodes"):
        make_config(
            nodes=0, state_dir=Path("/x"), inventory_out=Path("x"), accounting=True, hostname="h", cpus=2
        )


def test_state_round_trip_and_atomic_write(tmp_path: Path) -> None:
    state = LabState(config=_cfg(state_dir=tmp_path), started_at=datetime.now(UTC))
    state.daemons = [
        DaemonRecord(name="slurmctld", pid=1234, create_time=time.time(), argv=["slurmctld", "-D"])
    ]
    path = tmp_path / "state.json"
    save_state(state, path)
    assert load_state(path) == state
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]
    assert json.loads(path.read_text())["daemons"][0]["pid"] == 1234


def test_state_missing_and_corrupt(tmp_path: Path) -> None:
    assert load_state(tmp_path / "none.json") is None
    bad = tmp_path / "bad.json"
    bad.write_text('{"config": {}, "extra": 1}')
    with pytest.raises(LabError, match="not readable"):
        load_state(bad)


def test_dead_pid_is_not_alive() -> None:
    rec = DaemonRecord(name="x", pid=2**22 + 17, create_time=0.0, argv=["x"])
    assert not rec.alive()


def test_a_live_daemon_stays_alive_when_the_wall_clock_steps() -> None:
    # A paused VM whose clock is put right on resume, or NTP stepping it: the start in seconds
    # since the epoch moves by as much, the start in ticks since boot does not.
    proc = subprocess.Popen(["sleep", "30"])
    try:
        ticks = start_ticks(proc.pid)
        assert ticks is not None
        stepped = psutil.Process(proc.pid).create_time() - 3600.0
        rec = DaemonRecord(
            name="x", pid=proc.pid, create_time=stepped, start_ticks=ticks, boot_id=boot_id(), argv=["sleep"]
        )
        assert rec.alive()
        # the same PID with another start (a reused PID) or from another boot is not our process
        assert not rec.model_copy(update={"start_ticks": ticks + 1}).alive()
        assert not rec.model_copy(update={"boot_id": "0" * 36}).alive()
        # a record from before start_ticks existed falls back to the epoch start, within a second
        legacy = DaemonRecord(name="x", pid=proc.pid, create_time=stepped, argv=["sleep"])
        assert not legacy.alive()
        assert legacy.model_copy(update={"create_time": stepped + 3600.0}).alive()
    finally:
        proc.kill()
        proc.wait()


def test_start_ticks_reads_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    exe = tmp_path / "a (b) c"
    exe.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = subprocess.Popen([str(exe), "30"])
    try:
        ticks = start_ticks(proc.pid)
        assert ticks is not None and ticks == start_ticks(proc.pid)
        assert ticks <= int(float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")) + 1
    finally:
        proc.kill()
        proc.wait()
    assert start_ticks(proc.pid) is None


def test_a_new_lab_starts_with_no_slurm_state_of_the_last_one(tmp_path: Path) -> None:
    from orchestrator.lab.files import clear_slurm_state

    cfg = _cfg(state_dir=tmp_path)
    saved = [tmp_path / "slurmctld" / "job_state", tmp_path / "slurmctld" / "node_state",
             tmp_path / "slurmd" / "node1" / "cred_state"]  # fmt: skip
    kept = [tmp_path / "nodes" / "node1" / "opt" / "orch" / "venv" / "pyvenv.cfg", tmp_path / "log" / "x.log"]
    for f in [*saved, *kept]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")
    clear_slurm_state(cfg)
    assert not any(f.exists() for f in saved)
    assert all(f.exists() for f in kept)  # the nodes' stacks and the logs stay
    clear_slurm_state(cfg)  # nothing left to remove is fine

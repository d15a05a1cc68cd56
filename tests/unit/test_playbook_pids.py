"""The ansible-playbook processes a run starts are recorded, and only those are stopped on resume."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
from fakes import wait_for

from orchestrator.runs.playbook_pids import is_playbook, read_records, recording, stop_left_behind


def _fake_playbook(tmp_path: Path, name: str) -> Path:
    """A stand-in program called `name` that starts a worker of its own and waits."""
    script = tmp_path / name
    script.write_text(
        f"#!{sys.executable}\nimport subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    return script


def test_is_playbook_matches_the_program_not_an_argument() -> None:
    assert is_playbook(["/usr/bin/python3", "/venv/bin/ansible-playbook", "-i", "x"])
    assert is_playbook(["ansible-playbook", "provision.yml"])
    assert not is_playbook(["vim", "notes", "ansible-playbook"])


def test_a_recorded_playbook_left_running_is_stopped_with_its_worker(tmp_path: Path) -> None:
    record = tmp_path / "playbooks.json"
    other = subprocess.Popen([str(_fake_playbook(tmp_path, "not-a-playbook"))])
    with recording(record, poll_s=0.05):
        pb = subprocess.Popen([str(_fake_playbook(tmp_path, "ansible-playbook"))])
        wait_for(lambda: len(read_records(record)) == 1 and psutil.Process(pb.pid).children(), 10,
                 "the playbook recorded, its worker started")  # fmt: skip
    try:
        (rec,) = read_records(record)
        assert rec.pid == pb.pid and is_playbook(rec.cmdline)
        worker = psutil.Process(pb.pid).children()[0]
        assert stop_left_behind(record, grace=2) == [pb.pid]
        assert pb.wait(timeout=5) is not None
        wait_for(lambda: not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE, 10,
                 "the playbook's worker ended")  # fmt: skip
        assert other.poll() is None  # not recorded: left alone
        assert stop_left_behind(record) == []  # gone: nothing more to stop
    finally:
        for p in (other, pb):
            if p.poll() is None:
                for child in psutil.Process(p.pid).children():
                    child.kill()
            p.kill()
            p.wait()


def test_a_reused_pid_is_left_alone(tmp_path: Path) -> None:
    record = tmp_path / "playbooks.json"
    pb = subprocess.Popen([str(_fake_playbook(tmp_path, "ansible-playbook"))])
    try:
        start = psutil.Process(pb.pid).create_time()
        record.write_text(
            json.dumps([{"pid": pb.pid, "create_time": start - 100, "cmdline": ["ansible-playbook"]}])
        )
        assert stop_left_behind(record) == [] and pb.poll() is None
        record.write_text("{damaged")
        assert stop_left_behind(record) == [] and pb.poll() is None
    finally:
        for child in psutil.Process(pb.pid).children():
            child.kill()
        pb.kill()
        pb.wait()

"""A run folder is data: `orch runs cleanup` and `runs resume` never take Slurm's configuration
from it, never cancel a job that is not the user's and the run's, and refuse a folder that others
own or may write into (issue 25, finding 1; the lab half is tests/integration/test_cleanup_trust_lab.py).

Slurm's commands are stand-in scripts on PATH that record their argv and the SLURM_CONF they ran
with, so the test sees exactly what reached them.
"""

from __future__ import annotations

import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.runs.resume import resume
from orchestrator.store.load import run_cluster
from orchestrator.store.rundir import RunDir

ME = pwd.getpwuid(os.getuid()).pw_name
RUN = "20260101T000000Z-smoke-ab12"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def planted_run(root: Path, conf: Path, jobs: tuple[str, ...]) -> Path:
    """An interrupted run whose inventory.json points SLURM_CONF at a planted config."""
    rd = RunDir.create(root, RUN)
    rd.event("run_started", run_id=RUN, steps=["n1xg1"], pid=dead_pid(), host=os.uname().nodename)
    for job in jobs:
        rd.event("step_submitted", step="n1xg1", job_id=job, after=None)
    cluster = Cluster(
        source=root / "lab.ini",
        nodes=[Node(name="node1", address="node1")],
        vars=ClusterVars(orch_slurm_conf=conf),
    )
    (rd.root / "inventory.json").write_text(cluster.model_dump_json())
    os.chmod(rd.root / "inventory.json", 0o600)
    return rd.root


def fake_slurm(bin_dir: Path, log: Path, squeue_out: str) -> None:
    """squeue / sacct / scancel / scontrol that record argv and SLURM_CONF; squeue prints squeue_out."""
    bin_dir.mkdir()
    for tool in ("squeue", "sacct", "scancel", "scontrol"):
        body = f'printf "%s SLURM_CONF=%s\\n" "{tool} $*" "${{SLURM_CONF-}}" >> {log}\n'
        if tool == "squeue":
            body += f"cat <<'EOF'\n{squeue_out}EOF\n"
        (bin_dir / tool).write_text("#!/bin/sh\n" + body)
        (bin_dir / tool).chmod(0o755)


@pytest.fixture
def slurm_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "slurm.log"
    queue = (
        f"101|{ME}|RUNNING|orch-{RUN}-n1xg1\n"  # ours: cancelled
        f"102|mallory|RUNNING|orch-{RUN}-n1xg1\n"  # another user's job named like ours
        f"103|{ME}|RUNNING|my-notebook\n"  # the user's own job of no run
        f"104|{ME}|PENDING|orch-20250101T000000Z-other-ff00-n1xg1\n"  # another run's
    )
    fake_slurm(tmp_path / "bin", log, queue)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    return log


def cleanup(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["runs", "cleanup", *args], standalone_mode=False)
    assert r.exception is None, r.output
    return int(r.return_value), r.output


def test_cleanup_ignores_a_planted_slurm_conf_and_foreign_jobs(tmp_path: Path, slurm_log: Path) -> None:
    """The probe's attack: inventory.json names a config with a PluginDir; the journal names jobs
    of another user, of no run and of another run. Slurm runs without the planted config, and
    only the run's own job of the current user is cancelled."""
    planted = tmp_path / "evil" / "slurm.conf"
    runs = tmp_path / "runs"
    planted_run(runs, planted, ("101", "102", "103", "104"))
    rc, text = cleanup("--runs", str(runs))
    calls = slurm_log.read_text().splitlines()
    assert rc == 0 and calls, text
    assert not any(str(planted) in c for c in calls), calls
    assert [c for c in calls if c.startswith("scancel")] == ["scancel 101 SLURM_CONF="], calls
    squeue = next(c for c in calls if c.startswith("squeue"))
    assert f"--user={os.getuid()}" in squeue and "%u" in squeue and "%j" in squeue, squeue


def test_cleanup_takes_slurm_conf_from_the_inventory_on_the_command_line(
    tmp_path: Path, slurm_log: Path
) -> None:
    runs = tmp_path / "runs"
    planted_run(runs, tmp_path / "evil.conf", ("101",))
    inv = tmp_path / "lab.ini"
    inv.write_text(
        "[all]\nlocalhost ansible_connection=local\n\n[all:vars]\norch_slurm_conf=/etc/slurm/ours.conf\n"
    )
    cleanup("--runs", str(runs), "--inventory", str(inv))
    calls = slurm_log.read_text().splitlines()
    assert calls and all(c.endswith("SLURM_CONF=/etc/slurm/ours.conf") for c in calls), calls


@pytest.mark.parametrize("mode", [0o770, 0o757])
def test_cleanup_refuses_a_run_folder_others_may_write(tmp_path: Path, slurm_log: Path, mode: int) -> None:
    runs = tmp_path / "runs"
    run = planted_run(runs, tmp_path / "evil.conf", ("101",))
    os.chmod(run, mode)
    r = CliRunner().invoke(app, ["runs", "cleanup", "--runs", str(runs)], standalone_mode=False)
    assert r.exception is None, r.output
    assert "refused" in r.output and f"{mode:04o}" in r.output, r.output
    assert not slurm_log.exists() or "scancel" not in slurm_log.read_text()
    assert "orphans_cancelled" not in (run / "journal.jsonl").read_text()  # nothing written into it


def test_resume_never_takes_slurm_conf_from_the_run_folder(tmp_path: Path) -> None:
    run = planted_run(tmp_path, tmp_path / "evil.conf", ())
    assert run_cluster(run, None).vars.orch_slurm_conf is None
    assert run_cluster(run, Path("/etc/slurm/ours.conf")).vars.orch_slurm_conf == Path("/etc/slurm/ours.conf")
    assert json.loads((run / "inventory.json").read_text())["vars"]["orch_slurm_conf"].endswith("evil.conf")


def test_resume_refuses_a_group_writable_run_folder(tmp_path: Path) -> None:
    run = planted_run(tmp_path, tmp_path / "evil.conf", ())
    os.chmod(run, 0o775)
    with pytest.raises(ConfigError, match="0775: group or others may write"):
        resume(run, open_shells=lambda _c: pytest.fail("no shell opened"))  # type: ignore[arg-type,return-value]

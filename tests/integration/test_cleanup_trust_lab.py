"""`orch runs cleanup` against a planted run folder on the lab's real Slurm (issue 25, finding 1).

The folder's inventory.json points SLURM_CONF at a config whose PluginDir holds a library that
would leave a canary file when loaded; its journal names a job of a second Unix user (named like
one of the run's jobs), a job of the current user that belongs to no run, and one job of the run
itself. Cleanup must load no plugin, cancel only the run's own job, and leave the others queued.

Never brings the lab up or down; the second user and every job are removed in `finally`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.models.cluster import Cluster, ClusterVars, Node
from orchestrator.store.rundir import RunDir

if TYPE_CHECKING:
    from conftest import Lab

pytestmark = [pytest.mark.lab]
ORCH = [sys.executable, "-m", "orchestrator"]
OTHER_USER = "orchprobe2"
RUN_ID = "20260101T000000Z-smoke-c1ea"
PLUGIN_C = """
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen("%s", "w");
    if (f) { fputs("loaded\\n", f); fclose(f); }
}
"""


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def sbatch(lab: Lab, *prefix: str, name: str) -> str:
    """Submit a 10-minute sleep named `name` (as the user `prefix` switches to); its job id."""
    res = lab.slurm(*prefix, "sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null",
                    "--time=10", "--wrap", "sleep 600")  # fmt: skip
    return res.stdout.strip().split(";")[0]


def queued(lab: Lab, job: str) -> bool:
    out = lab.slurm("squeue", "--noheader", "-o", "%i|%T", "-j", job, check=False).stdout
    return any(line.startswith(f"{job}|") and "COMPLETING" not in line for line in out.splitlines())


def planted_plugins(tmp_path: Path, canary: Path) -> Path:
    """A PluginDir whose every library, when loaded, writes `canary`."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    src = tmp_path / "planted.c"
    src.write_text(PLUGIN_C % canary)
    lib = plugins / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=60)
    for name in (
        "auth_munge.so",
        "cred_munge.so",
        "accounting_storage_slurmdbd.so",
        "jobacct_gather_none.so",
    ):
        shutil.copy(lib, plugins / name)
    return plugins


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to build the planted plugin")
def test_a_planted_run_folder_loads_no_plugin_and_cancels_no_foreign_job(lab: Lab, tmp_path: Path) -> None:
    canary = tmp_path / "PLUGIN-LOADED"
    conf = tmp_path / "slurm.conf"
    conf.write_text(lab.config.slurm_conf.read_text() + f"\nPluginDir={planted_plugins(tmp_path, canary)}\n")
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER], check=False)
    jobs: list[str] = []
    try:
        foreign = sbatch(lab, "runuser", "-u", OTHER_USER, "--", name=f"orch-{RUN_ID}-n1xg1")
        mine_no_run = sbatch(lab, name="my-notebook")
        ours = sbatch(lab, name=f"orch-{RUN_ID}-n2xg1")
        jobs = [foreign, mine_no_run, ours]
        runs = tmp_path / "runs"
        rd = RunDir.create(runs, RUN_ID)
        rd.event(
            "run_started", run_id=RUN_ID, steps=["n1xg1", "n2xg1"], pid=dead_pid(), host=os.uname().nodename
        )
        for step, job in (("n1xg1", foreign), ("n1xg1", mine_no_run), ("n2xg1", ours)):
            rd.event("step_submitted", step=step, job_id=job, after=None)
        cluster = Cluster(source=lab.inventory, nodes=[Node(name="node1", address="node1")],
                          vars=ClusterVars(orch_slurm_conf=conf))  # fmt: skip
        (rd.root / "inventory.json").write_text(cluster.model_dump_json())
        os.chmod(rd.root / "inventory.json", 0o600)

        res = subprocess.run([*ORCH, "runs", "cleanup", "--runs", str(runs)], capture_output=True,
                             text=True, env=lab.env, timeout=120, check=False)  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        assert not canary.exists(), "a Slurm command loaded the planted PluginDir"
        deadline = time.monotonic() + 30
        while queued(lab, ours) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not queued(lab, ours), "the run's own job was not cancelled"
        assert queued(lab, foreign), "another user's job was cancelled"
        assert queued(lab, mine_no_run), "a job of no run was cancelled"
        assert f"cancelled {ours}" in res.stdout, res.stdout
    finally:
        for job in jobs:
            lab.slurm("scancel", job, check=False)
        subprocess.run(["userdel", OTHER_USER], check=False)
    assert not canary.exists()


def test_cleanup_refuses_a_group_writable_run_folder(lab: Lab, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    rd = RunDir.create(runs, RUN_ID)
    rd.event("run_started", run_id=RUN_ID, steps=["n1xg1"], pid=dead_pid(), host=os.uname().nodename)
    job = sbatch(lab, name=f"orch-{RUN_ID}-n1xg1")
    try:
        rd.event("step_submitted", step="n1xg1", job_id=job, after=None)
        os.chmod(rd.root, 0o775)
        argv = [*ORCH, "runs", "cleanup", "--runs", str(runs), "--inventory", str(lab.inventory)]
        res = subprocess.run(argv, capture_output=True, text=True, env=lab.env, timeout=120, check=False)
        assert res.returncode == 0 and "refused" in res.stderr and "0775" in res.stderr, res.stderr
        assert queued(lab, job)
    finally:
        lab.slurm("scancel", job, check=False)

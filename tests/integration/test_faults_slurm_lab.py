"""Faults through Slurm on the running 3-node lab: node-loss (NODE_FAIL, DOWN, back to service)
and the probe under `sbatch --requeue`.

Never brings the lab up or down (others share it). Every job is named ``flt-*`` (outside the
``orch-*`` prefix that test_scale_test.py cancels) and cancelled in finally; node3's slurmd is
SIGCONTed by its recorded PID in finally whatever happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.faults.engine import FaultEngine
from orchestrator.inventory import load_inventory
from orchestrator.models.cluster import Cluster
from orchestrator.models.fault import FaultSpec, FaultTarget
from orchestrator.remote.base import NodeShell
from orchestrator.remote.shells import node_shells

if TYPE_CHECKING:
    from conftest import Lab

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventories" / "lab.ini"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Cluster:
    return load_inventory(lab.inventory)


@pytest.fixture(scope="module")
def shells(cluster: Cluster) -> Iterator[dict[str, NodeShell]]:
    with node_shells(cluster) as s:
        yield s


def node_state(lab: Lab, node: str) -> str:
    return lab.slurm("sinfo", "-h", "-n", node, "-o", "%T").stdout.strip()


def job_state(lab: Lab, job: str) -> str:
    """The first (latest) allocation record's state in sacct, '' while unknown."""
    out = lab.slurm("sacct", "-X", "-n", "-P", "-o", "State", "-j", job, check=False).stdout
    return out.splitlines()[0].strip() if out.strip() else ""


def wait_for(cond: object, timeout: float, what: str) -> float:
    """Poll cond() every 0.25 s; the monotonic instant it held. Fails the test on timeout."""
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return time.monotonic()
        time.sleep(0.25)
    pytest.fail(f"{what}: not within {timeout:g} s")


@pytest.fixture
def node3_back(lab: Lab) -> Iterator[None]:
    """Whatever happens: node3's slurmd continued (by the lab's recorded PID) and node3 resumed."""
    assert node_state(lab, "node3") in ("idle", "mixed", "allocated"), "node3 must start in service"
    try:
        yield
    finally:
        d = lab.state().daemon("slurmd@node3")
        if d is not None and d.alive():
            os.kill(d.pid, signal.SIGCONT)
        if node_state(lab, "node3").startswith("down"):
            lab.slurm("scontrol", "update", "nodename=node3", "state=resume", check=False)
        wait_for(lambda: not node_state(lab, "node3").startswith("down"), 60, "node3 back in service")


def submit_on_node3(lab: Lab, name: str) -> str:
    # In a folder node3 has: sbatch's default, the current folder (the checkout), is hidden from
    # the nodes (an empty read-only tmpfs), and Slurm could not write slurm-<id>.out there.
    job = lab.slurm("sbatch", "--parsable", "--no-requeue", "-J", name, "-w", "node3", "-N1",
                    "--chdir=/tmp", "--output=/dev/null",
                    "--time=10", "--wrap", "srun sleep 600").stdout.strip().split(";")[0]
    wait_for(lambda: job_state(lab, job) == "RUNNING", 60, f"job {job} running")
    return job


def test_node_loss_ends_the_job_node_fail_and_revert_returns_the_node(
    lab: Lab, cluster: Cluster, shells: dict[str, NodeShell], node3_back: None, tmp_path: Path
) -> None:
    job = submit_on_node3(lab, f"flt-nodeloss-{os.getpid()}")
    engine = FaultEngine(cluster, shells, record_dir=tmp_path)
    try:
        with engine.applied(FaultSpec(kind="node-loss", target=FaultTarget(node="node3"),
                                      duration_s=90, margin_s=5)) as active:
            rec = active.record
            assert rec.outcome == "active", rec.message
            slurmd = lab.state().daemon("slurmd@node3")
            assert slurmd is not None and rec.resolved == [str(slurmd.pid)]
            t0 = rec.injected_at_mono
            assert t0 is not None
            t_fail = wait_for(lambda: job_state(lab, job) == "NODE_FAIL", 60, "job NODE_FAIL")
            t_down = wait_for(lambda: node_state(lab, "node3").startswith("down"), 30, "node3 DOWN")
        t_rev = rec.t_revert_mono
        assert t_rev is not None and rec.model_dump()["outcome"] == "reverted"
        t_back = wait_for(lambda: node_state(lab, "node3") in ("idle", "mixed", "allocated"), 60,
                          "node3 back in service")
        print(f"\nnode-loss: job NODE_FAIL after {t_fail - t0:.1f} s, node DOWN seen after "
              f"{t_down - t0:.1f} s, back in service {t_back - t_rev:.1f} s after revert "
              f"(SlurmdTimeout={slurmd_timeout(lab)})")
        # The job is not requeued (--no-requeue): its one record ends NODE_FAIL.
        assert job_state(lab, job) == "NODE_FAIL"
        assert node_state(lab, "node3") == "idle" or node_state(lab, "node3") in ("mixed", "allocated")
    finally:
        lab.slurm("scancel", job, check=False)


def slurmd_timeout(lab: Lab) -> str:
    out = lab.slurm("scontrol", "show", "config").stdout
    found = (ln.split("=", 1)[1].strip() for ln in out.splitlines() if ln.startswith("SlurmdTimeout"))
    return next(found, "?")


KILLED_ORCH = """
import sys, time
from pathlib import Path
from orchestrator.faults.engine import FaultEngine
from orchestrator.remote.shells import node_shells
from orchestrator.inventory import load_inventory
from orchestrator.models.fault import FaultSpec, FaultTarget
c = load_inventory(Path(sys.argv[1]))
with node_shells(c) as shells:
    e = FaultEngine(c, shells)
    a = e.prepare(FaultSpec(kind="node-loss", target=FaultTarget(node="node3"),
                            duration_s=30.0, margin_s=1.0))
    e.inject(a)
    print("ACTIVE", a.record.outcome, flush=True)
    time.sleep(3600)
"""


def test_node_timer_returns_the_lost_node_after_orch_is_sigkilled(
    lab: Lab, cluster: Cluster, shells: dict[str, NodeShell], node3_back: None
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED_ORCH, str(lab.inventory)],
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["ACTIVE", "active"]
        killed = time.monotonic()
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    # SlurmdTimeout (10 s) passes while orch is dead: the controller takes node3 DOWN ...
    # (its pings found node3 silent 10-21 s after the stop; with a 21 s timer CI once saw DOWN
    # for 0.12 s only, between two polls: the timer is 31 s)
    wait_for(lambda: node_state(lab, "node3").startswith("down"), 40, "node3 DOWN while orch is dead")
    # ... and the timer (30 s + 1 s) SIGCONTs slurmd and resumes the node without orch.
    t_back = wait_for(lambda: node_state(lab, "node3") == "idle", 60, "node3 idle again by the timer")
    print(f"\nnode-loss timer: node3 idle {t_back - killed:.1f} s after orch was SIGKILLed (timer 31 s)")
    assert t_back - killed >= 30.0  # it was the timer, not something earlier
    assert all(r.found == [] for r in FaultEngine(cluster, shells).sweep())


def test_probe_under_slurm_requeue_resumes_from_its_last_step(lab: Lab, cluster: Cluster,
                                                               tmp_path: Path) -> None:
    from orchestrator.metrics import recovery as rmetrics
    from orchestrator.runs.probe_jobs import SlurmProbeJob
    from orchestrator.runs.recovery import wait_steps
    from orchestrator.runs.recovery_request import RecoveryTestRequest

    req = RecoveryTestRequest.model_validate(
        {"kind": "kill-worker", "target": "node2", "launcher": "slurm",
         "probe": {"master_port": 20000 + os.getpid() % 20000}})
    out = tmp_path / "probe"
    job = SlurmProbeJob(cluster, req, out, f"rq{os.getpid()}")
    assert "#SBATCH --requeue" in job.script()
    # The lab's nodes share this machine's clock: node wall - orch monotonic is the same for all.
    offsets = {n.name: time.time() - time.monotonic() for n in cluster.nodes}
    try:
        job.start()
        wait_steps(out, offsets, 30, after=0.0, timeout=120)
        before = rmetrics.completed_steps(rmetrics.load_heartbeats(out), offsets)
        t0 = time.monotonic()
        job.requeue()

        def requeued_steps() -> int:
            return len([c for c in rmetrics.completed_steps(rmetrics.load_heartbeats(out), offsets)
                        if c.gen >= 1])

        wait_for(lambda: requeued_steps() >= 20, 120, "20 steps after the requeue")
        hbs = rmetrics.load_heartbeats(out)
        result = rmetrics.analyse(hbs, t0=t0, offsets=offsets, fault_id="requeue", kind="kill-worker",
                                  repeat=0, window_s=120, gap_s=1.0, fault_end=t0)
    finally:
        job.stop()
    steps = [r for r in hbs if r.get("ev") == "step"]
    gen0 = [r for r in steps if r["gen"] == 0]
    gen1 = [r for r in steps if r["gen"] == 1]
    assert gen1, "no step after the requeue"
    assert {r["slurm_restarts"] for r in gen1} == {1} and {r["slurm_restarts"] for r in gen0} == {0}
    # Resumed right after the last step every rank completed before the requeue: none skipped,
    # none done twice beyond the one the requeue cut short.
    # The probe goes on between that snapshot and the requeue: the last step every rank completed
    # in the first generation is read from the final heartbeats (CI once saw 2 more steps there).
    last_all = max(c.step for c in rmetrics.completed_steps(hbs, offsets) if c.gen == 0)
    assert last_all >= max(c.step for c in before)
    first_after = min(r["step"] for r in gen1)
    assert first_after <= last_all + 2 and first_after >= max(r["step"] for r in gen0 if r["rank"] == 0) - 1
    assert {r["step"] for r in gen1 if r["rank"] == 0} >= set(range(first_after, first_after + 20))
    assert result.verdict == "recovered" and result.restarts == 1, result
    print(f"\nrequeue: resumed at step {first_after} (last complete {last_all}); "
          f"detect {result.detect_s:.1f} s, recover {result.recover_s:.1f} s, steps lost {result.steps_lost}")


def test_recovery_test_kill_worker_through_slurm(lab: Lab, cluster: Cluster, shells: dict[str, NodeShell],
                                                 tmp_path: Path) -> None:
    from orchestrator.runs.recovery import run_recovery_test
    from orchestrator.runs.recovery_request import RecoveryTestRequest

    req = RecoveryTestRequest.model_validate({"kind": "kill-worker", "target": "node2:3",
                                              "duration_s": 0.0, "launcher": "slurm"})
    summary = run_recovery_test(cluster, shells, req, tmp_path / "run")
    (r,) = summary.results
    assert r.verdict == "recovered" and r.restarts >= 1, r
    assert r.detect_s is not None and r.recover_s is not None and r.recover_s >= r.detect_s
    assert (tmp_path / "run" / "probe" / "probe.sbatch").exists()

"""The recovery probe on the nodes: torchrun agents over the kept-open shells, or one Slurm job."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import (
    FaultError,
    SchedulerError,
)
from orchestrator.faults.base import NodeShell, sh
from orchestrator.metrics import recovery as rmetrics
from orchestrator.models.cluster import Cluster
from orchestrator.models.container import container_name
from orchestrator.runs.recovery_request import REPO, RecoveryTestRequest
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.rundir import check_run_id
from orchestrator.workloads.probe import ProbeSettings, torchrun_argv


class ProbeJob:
    """The probe's torchrun agents on the nodes, started detached over the kept-open shells."""

    def __init__(
        self,
        cluster: Cluster,
        shells: Mapping[str, NodeShell],
        req: RecoveryTestRequest,
        out_dir: Path,
        run_id: str,
    ) -> None:
        self.cluster, self.shells, self.req, self.out_dir, self.run_id = cluster, shells, req, out_dir, run_id
        self.pids: dict[str, int] = {}
        self.containers: dict[str, str] = {}

    def master_addr(self) -> str:
        n = self.cluster.nodes[0]
        return str(n.fabric_address or n.address)

    def start(self) -> None:
        """Start one agent per node; raises FaultError when a node refuses."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "stop").unlink(missing_ok=True)
        s = self.req.probe
        c = self.req.container
        # A container sees the node folder at its absolute path only (binds cannot be relative).
        out_dir = self.out_dir if c is None else self.out_dir.absolute()
        for k, node in enumerate(self.cluster.nodes):
            argv = torchrun_argv(
                s,
                python=self.req.python if c is None else c.python,
                out_dir=out_dir,
                node_rank=k,
                nnodes=len(self.cluster.nodes),
                master_addr=self.master_addr(),
                run_id=self.run_id,
            )
            env = {**s.env(), "ORCH_NODE": node.name, "ORCH_PROBE_RUN": self.run_id}
            log = out_dir / f"agent-{node.name}.log"
            if c is None:
                env["PYTHONPATH"] = str(REPO)
                line = (
                    f"cd {sh(str(REPO))} && setsid {sh('env', *(f'{k}={v}' for k, v in env.items()), *argv)}"
                    f" </dev/null >{sh(str(log))} 2>&1 & echo $!"
                )
            else:
                # The stack's image holds the interpreter, torch and orch's probe: only the run's
                # node folder is mounted. A container left by an earlier start of this run goes first.
                name = container_name(self.run_id, node.name)
                run = c.run_argv(node.name, name=name, argv=argv, env=env, binds=[out_dir], log=log)
                line = f"{sh(*c.rm_argv(node.name, name))} >/dev/null 2>&1; {sh(*run)}"
                self.containers[node.name] = name
            res = self.shells[node.name].run_script(line, timeout=120)
            if not res.ok:
                raise FaultError(f"{node.name}: cannot start the probe: {res.brief()}")
            if c is None:
                self.pids[node.name] = int(res.stdout.strip().splitlines()[-1])

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop file, wait, then SIGTERM/SIGKILL the agents orch started (by PID) or rm containers."""
        with contextlib.suppress(OSError):
            (self.out_dir / "stop").touch()
        deadline = time.monotonic() + grace_s
        for name, pid in self.pids.items():
            shell = self.shells[name]
            alive = f"kill -0 {pid} 2>/dev/null"
            while time.monotonic() < deadline and shell.run_script(alive, timeout=10).ok:
                time.sleep(0.3)
            shell.run_script(
                f"kill -TERM -{pid} 2>/dev/null; sleep 1; kill -KILL -{pid} 2>/dev/null; :", timeout=20
            )
        c = self.req.container
        for name, cname in self.containers.items():
            assert c is not None
            self.shells[name].run_script(f"{sh(*c.rm_argv(name, cname))} >/dev/null 2>&1; :", timeout=120)


def probe_job_spec(
    s: ProbeSettings,
    *,
    python: str,
    out_dir: Path,
    run_id: str,
    workdir: Path,
    master_addr: str,
    nodelist: list[str],
) -> JobSpec:
    """The probe as one Slurm job: one torchrun agent per node (srun, one task per node), static
    rendezvous on master_addr, ``--requeue``. Each agent's node rank is its SLURM_NODEID (through
    PET_NODE_RANK, which torchrun reads). The job name is ``probe-<run_id>`` (outside ``orch-*``,
    which some tooling cancels wholesale). Raises ConfigError when run_id is not a valid run id."""
    check_run_id(run_id)
    argv = torchrun_argv(
        s, python=python, out_dir=out_dir, node_rank=None, nnodes=len(nodelist), master_addr=master_addr,
        run_id=run_id,
    )  # fmt: skip
    return JobSpec(
        name=f"probe-{run_id}",
        step_id="probe",
        nodes=nodelist,
        nnodes=len(nodelist),
        ranks_per_node=1,
        argv=argv,
        env={**s.env(), "ORCH_PROBE_RUN": run_id, "PYTHONPATH": str(workdir)},
        master_addr=master_addr,
        workdir=workdir,
        launch="srun",
        rank_logs=False,
        task_env={"PET_NODE_RANK": "SLURM_NODEID", "ORCH_NODE": "SLURMD_NODENAME"},
        kill_on_bad_exit=False,
        exclusive=False,
        requeue=True,
        output=out_dir / "slurm-%j.out",
        append_output=True,
        script=out_dir / "probe.sbatch",
    )


class SlurmProbeJob:
    """The probe as one Slurm job (``sbatch --requeue``, one torchrun agent per node via srun).

    A requeue (``scontrol requeue``, or Slurm's own after a node failure) restarts every agent;
    the probe counts it as a new generation and resumes after its last complete step. Every Slurm
    command goes through the one Slurm client (scheduler/slurm.py).
    """

    def __init__(self, cluster: Cluster, req: RecoveryTestRequest, out_dir: Path, run_id: str) -> None:
        self.cluster, self.req, self.out_dir, self.run_id = cluster, req, out_dir, check_run_id(run_id)
        self.sched = SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
        self.job_id: str | None = None

    def spec(self) -> JobSpec:
        first = self.cluster.nodes[0]
        return probe_job_spec(
            self.req.probe,
            python=self.req.python,
            out_dir=self.out_dir,
            run_id=self.run_id,
            workdir=REPO,
            master_addr=str(first.fabric_address or first.address),
            nodelist=[n.name for n in self.cluster.nodes],
        )

    def script(self) -> str:
        return self.sched.render(self.spec())

    def start(self) -> None:
        """Submit the job; raises SchedulerError when sbatch refuses it."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "stop").unlink(missing_ok=True)
        self.job_id = self.sched.submit(self.spec())

    def state(self) -> str:
        """squeue's state of the job ('' once it left the queue)."""
        if self.job_id is None:
            return ""
        return self.sched.queue_state(self.job_id)

    def node_aliases(self) -> dict[str, str]:
        """Slurm node name -> inventory name (the probe under Slurm names its node $SLURMD_NODENAME)."""
        idents = {n.name: {n.name, str(n.address)} for n in self.cluster.nodes}
        return rmetrics.slurm_node_aliases(self.sched.show_nodes(), idents)

    def requeue(self, start_now: bool = True) -> None:
        """scontrol requeue; with start_now, lift Slurm's requeue BeginTime hold (about 120 s)."""
        assert self.job_id is not None
        self.sched.requeue(self.job_id)
        if not start_now:
            return
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.state() != "PENDING":
            time.sleep(0.25)
        self.sched.start_now(self.job_id)

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop file, wait for the job to end, then scancel it."""
        with contextlib.suppress(OSError):
            (self.out_dir / "stop").touch()
        if self.job_id is None:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.state() in ("RUNNING", "COMPLETING"):
            time.sleep(0.5)
        with contextlib.suppress(SchedulerError):
            self.sched.cancel([self.job_id])

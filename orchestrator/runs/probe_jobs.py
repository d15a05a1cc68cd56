"""The recovery probe on the nodes: torchrun agents over the kept-open shells, or one Slurm job.

The probe runs with the stack's Python (``node_python``) in its own folder on each node
(remote/nodefiles.py): the run directory when the nodes see it (this machine, a share), else
``<orch_node_dir>/<run-id>/probe/`` on each node. There its heartbeats are followed (appended bytes
copied into the run directory's ``probe/`` several times a second, so that the waits and the
analysis read local files), the stop file is created on every node, and everything left is
brought home and the node folder removed when the probe stops.
"""

from __future__ import annotations

import contextlib
import re
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
from orchestrator.remote.nodefiles import Follower, NodeFiles, node_files, run_data_layout
from orchestrator.runs.recovery_request import RecoveryTestRequest, node_python
from orchestrator.safefs import make_dir
from orchestrator.scheduler.base import JobSpec
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.rundir import check_run_id
from orchestrator.workloads.probe import ProbeSettings, torchrun_argv

HEARTBEAT_GLOB = "hb-rank*.jsonl"
_HEARTBEAT_NAME = re.compile(r"hb-rank[0-9]{1,6}\.jsonl")


class ProbeFiles:
    """The probe's folder on every node (``out_dir`` is its place in the run directory here):
    made before the probe starts, heartbeats followed while it runs, the stop file on every
    node, the rest collected and the node folders removed at the end."""

    def __init__(self, cluster: Cluster, out_dir: Path) -> None:
        self.cluster, self.out_dir = cluster, out_dir
        self.layout = run_data_layout(cluster, out_dir.parent)
        self.part = out_dir.name
        self.node_dir = self.layout.node_path(self.part)
        self.nodes = [n.name for n in cluster.nodes]
        self._stack = contextlib.ExitStack()
        self._files: NodeFiles | None = None
        self._follower: Follower | None = None

    def open(self) -> None:
        """Make the folder on every node (and here, without an old stop file) and start following
        the heartbeats. Raises InfraError naming a node where the folder cannot be made."""
        make_dir(self.out_dir)
        (self.out_dir / "stop").unlink(missing_ok=True)
        if self._files is None:
            self._files = self._stack.enter_context(node_files(self.cluster, self.layout))
        self._files.prepare({n: [(self.part,)] for n in self.nodes})
        self._follower = self._files.follow(self.nodes, (self.part,), HEARTBEAT_GLOB, _HEARTBEAT_NAME)
        self._follower.start()

    def stop_file(self) -> None:
        """Create the stop file here and on every node; a node that cannot be reached is skipped
        (its agents are killed by PID or by scancel next)."""
        with contextlib.suppress(OSError):
            (self.out_dir / "stop").touch()
        if self._files is not None:
            self._files.touch(self.nodes, self.part, "stop")

    def close(self) -> None:
        """Stop following, bring the rest home (agent logs, Slurm's output), remove the node folders."""
        try:
            if self._follower is not None:
                self._follower.stop()
            if self._files is not None:
                self._files.collect(self.nodes, self.part)
                self._files.remove_all()
        finally:
            self._stack.close()
            self._files = self._follower = None


class _Probe:
    """What both ways of running the probe share: its files (ProbeFiles), the Python it runs
    with, and stop(): the agents stopped the subclass's way, then the files brought home and the
    node folders removed, whatever the stopping raised."""

    def __init__(self, cluster: Cluster, req: RecoveryTestRequest, out_dir: Path, run_id: str) -> None:
        self.cluster, self.req, self.out_dir, self.run_id = cluster, req, out_dir, run_id
        self.files = ProbeFiles(cluster, out_dir)
        self.python = req.python or node_python(cluster)

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the agents (_stop), then bring the probe's files home and remove its node folders."""
        try:
            self._stop(grace_s)
        finally:
            self.files.close()

    def _stop(self, grace_s: float) -> None:
        raise NotImplementedError


class ProbeJob(_Probe):
    """The probe's torchrun agents on the nodes, started detached over the kept-open shells."""

    def __init__(
        self,
        cluster: Cluster,
        shells: Mapping[str, NodeShell],
        req: RecoveryTestRequest,
        out_dir: Path,
        run_id: str,
    ) -> None:
        super().__init__(cluster, req, out_dir, run_id)
        self.shells = shells
        self.pids: dict[str, int] = {}
        self.containers: dict[str, str] = {}

    def master_addr(self) -> str:
        n = self.cluster.nodes[0]
        return str(n.fabric_address or n.address)

    def start(self) -> None:
        """Start one agent per node; raises FaultError when a node refuses."""
        self.files.open()
        where = self.files.node_dir
        s = self.req.probe
        c = self.req.container
        # A container sees the node folder at its absolute path only (binds cannot be relative).
        where = where if c is None else where.absolute()
        for k, node in enumerate(self.cluster.nodes):
            argv = torchrun_argv(
                s,
                python=self.python if c is None else c.python,
                out_dir=where,
                node_rank=k,
                nnodes=len(self.cluster.nodes),
                master_addr=self.master_addr(),
                run_id=self.run_id,
            )
            env = {**s.env(), "ORCH_NODE": node.name, "ORCH_PROBE_RUN": self.run_id}
            log = where / f"agent-{node.name}.log"
            if c is None:
                line = (
                    f"cd {sh(str(where))} && setsid {sh('env', *(f'{k}={v}' for k, v in env.items()), *argv)}"
                    f" </dev/null >{sh(str(log))} 2>&1 & echo $!"
                )
            else:
                # The stack's image holds the interpreter, torch and orch's probe: only the run's
                # node folder is mounted. A container left by an earlier start of this run goes first.
                name = container_name(self.run_id, node.name)
                run = c.run_argv(node.name, name=name, argv=argv, env=env, binds=[where], log=log)
                line = f"{sh(*c.rm_argv(node.name, name))} >/dev/null 2>&1; {sh(*run)}"
                self.containers[node.name] = name
            res = self.shells[node.name].run_script(line, timeout=120)
            if not res.ok:
                raise FaultError(f"{node.name}: cannot start the probe: {res.brief()}")
            if c is None:
                self.pids[node.name] = int(res.stdout.strip().splitlines()[-1])

    def _stop(self, grace_s: float) -> None:
        """Stop file, wait, then SIGTERM/SIGKILL the agents orch started (by PID) or rm containers."""
        self.files.stop_file()
        deadline = time.monotonic() + grace_s
        for name, pid in self.pids.items():
            shell = self.shells[name]
            alive = f"kill -0 {pid} 2>/dev/null"
            while time.monotonic() < deadline and shell.run_script(alive, timeout=10).ok:
                time.sleep(0.3)
            # the agent's whole process group (setsid): TERM, then KILL what is left a second
            # later; nothing (no second's wait) when the group has ended by itself. No `exit`:
            # the line runs in the node's kept-open shell
            shell.run_script(
                f"if kill -0 -{pid} 2>/dev/null; then kill -TERM -{pid} 2>/dev/null;"
                f" for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 -{pid} 2>/dev/null || break; sleep 0.1; done;"
                f" kill -KILL -{pid} 2>/dev/null; fi; :",
                timeout=20,
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
    script: Path | None = None,
) -> JobSpec:
    """The probe as one Slurm job: one torchrun agent per node (srun, one task per node), static
    rendezvous on master_addr, ``--requeue``. Each agent's node rank is its SLURM_NODEID (through
    PET_NODE_RANK, which torchrun reads). The job name is ``probe-<run_id>`` (outside ``orch-*``,
    which some tooling cancels wholesale). ``out_dir`` (heartbeats, Slurm's output) and
    ``workdir`` are folders on the nodes; ``script`` is where the job script is written here
    (default out_dir/probe.sbatch). Raises ConfigError when run_id is not a valid run id."""
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
        env={**s.env(), "ORCH_PROBE_RUN": run_id},
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
        script=script or out_dir / "probe.sbatch",
    )


class SlurmProbeJob(_Probe):
    """The probe as one Slurm job (``sbatch --requeue``, one torchrun agent per node via srun).

    A requeue (``scontrol requeue``, or Slurm's own after a node failure) restarts every agent;
    the probe counts it as a new generation and resumes after its last complete step. Every Slurm
    command goes through the one Slurm client (scheduler/slurm.py).
    """

    def __init__(self, cluster: Cluster, req: RecoveryTestRequest, out_dir: Path, run_id: str) -> None:
        super().__init__(cluster, req, out_dir, check_run_id(run_id))
        self.sched = SlurmScheduler(slurm_conf=cluster.vars.orch_slurm_conf)
        self.job_id: str | None = None

    def spec(self) -> JobSpec:
        first = self.cluster.nodes[0]
        where = self.files.node_dir
        return probe_job_spec(
            self.req.probe,
            python=self.python,
            out_dir=where,
            run_id=self.run_id,
            workdir=where,
            master_addr=str(first.fabric_address or first.address),
            nodelist=[n.name for n in self.cluster.nodes],
            script=self.out_dir.absolute() / "probe.sbatch",
        )

    def script(self) -> str:
        return self.sched.render(self.spec())

    def start(self) -> None:
        """Make the probe's folder on every node, then submit the job; raises SchedulerError when
        sbatch refuses it, InfraError when a node's folder cannot be made."""
        self.files.open()
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

    def _stop(self, grace_s: float) -> None:
        """Stop file, wait for the job to end, then scancel it."""
        self.files.stop_file()
        if self.job_id is None:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and self.state() in ("RUNNING", "COMPLETING"):
            time.sleep(0.5)
        with contextlib.suppress(SchedulerError):
            self.sched.cancel([self.job_id])

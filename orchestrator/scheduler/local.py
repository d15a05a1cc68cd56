"""The local backend: a job's ranks run as processes on this machine.

Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and
MASTER_PORT (the spec's port when it is free, else a free one), and writes stdout+stderr to
`<workdir>/rank-<r>.log` (a one-rank job with rank_logs off and an `output` writes there instead,
as srun's output goes to sbatch's --output on Slurm; appended to with append_output, as sbatch
--open-mode=append does). A job's ranks share one process group. A job
submitted with `after=` waits (PENDING) until that job has ended, whatever its outcome (Slurm's
afterany); it starts on the next poll() after that. The time limit is enforced by a timer: the
ranks are killed and the job ends FAILED with raw_state TIMEOUT.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from orchestrator.errors import SchedulerError
from orchestrator.safefs import atomic_write, make_dir, open_write
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus, RankOutput

LOCAL_ADDR = "127.0.0.1"
_PYTHON_NAMES = ("python", "python3")


@dataclass
class RankLaunch:
    """What one rank runs: argv and the variables orch adds to the environment."""

    rank: int
    node: str | None
    argv: list[str]
    env: dict[str, str]


@dataclass
class _Job:
    spec: JobSpec
    after: str | None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    timed_out: bool = False
    cancelled: bool = False
    timer: threading.Timer | None = None


def launch_plan(spec: JobSpec, port: int | None) -> list[RankLaunch]:
    """Per-rank argv and added env for spec, with MASTER_PORT=port (pure; no side effects).

    argv[0] `python` or `python3` is replaced by this interpreter (sys.executable), so ranks run
    in orch's own environment.
    """
    argv = list(spec.argv)
    if argv[0] in _PYTHON_NAMES:
        argv[0] = sys.executable
    world = spec.nnodes * spec.ranks_per_node
    out = []
    for r in range(world):
        env = dict(spec.env)
        env.update(
            RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_RANK=str(r % spec.ranks_per_node),
            LOCAL_WORLD_SIZE=str(spec.ranks_per_node),
            NODE_RANK=str(r // spec.ranks_per_node),
            MASTER_ADDR=LOCAL_ADDR,
        )
        if port is not None:
            env["MASTER_PORT"] = str(port)
        node = spec.nodes[r // spec.ranks_per_node] if len(spec.nodes) == spec.nnodes else None
        out.append(RankLaunch(rank=r, node=node, argv=argv, env=env))
    return out


def rank_log(spec: JobSpec, rank: int) -> Path:
    """Where a rank's stdout and stderr go: `output` for a one-rank job without rank logs (an
    engine's log), else rank-<r>.log in the workdir."""
    if not spec.rank_logs and spec.output is not None and spec.nnodes * spec.ranks_per_node == 1:
        return spec.output
    return spec.workdir / f"rank-{rank}.log"


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOCAL_ADDR, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCAL_ADDR, 0))
        return int(s.getsockname()[1])


class LocalScheduler:
    """JobScheduler running each job's ranks as local processes."""

    name = "local"

    def __init__(self, *, kill_grace_s: float = 3.0) -> None:
        self.kill_grace_s = kill_grace_s
        self._jobs: dict[str, _Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.RLock()

    def render(self, spec: JobSpec) -> str:
        """The launch description: workdir, time limit, then argv and added env of each rank."""
        lines = [
            f"# orch local launch: {spec.name} (step {spec.step_id})",
            f"# workdir {spec.workdir}  time limit {spec.time_limit_s}s",
        ]
        for rl in launch_plan(spec, spec.master_port):
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(rl.env.items()))
            lines.append(f"# rank {rl.rank}" + (f" (node {rl.node})" if rl.node else ""))
            lines.append(
                f"env {env} {shlex.join(rl.argv)} > {shlex.quote(str(rank_log(spec, rl.rank)))} 2>&1"
            )
        return "\n".join(lines) + "\n"

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """Start the job now, or queue it until `after` has ended; returns its id.

        Raises SchedulerError when `after` is unknown or the ranks cannot be started.
        """
        with self._lock:
            if after is not None and after not in self._jobs:
                raise SchedulerError(f"local: unknown job {after!r} to run after")
            job_id = f"local-{os.getpid()}-{next(self._ids)}"
            job = _Job(spec=spec, after=after)
            self._jobs[job_id] = job
            if after is None or self._ended(self._jobs[after]):
                self._start(job_id, job)
            return job_id

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """State of each job; starts queued jobs whose dependency has ended."""
        with self._lock:
            self._start_ready()
            return {j: self._state(j) for j in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        """Kill the jobs' processes (SIGTERM, then SIGKILL after kill_grace_s); idempotent."""
        for j in job_ids:
            with self._lock:
                job = self._jobs.get(j)
                if job is None or self._ended(job):
                    continue
                job.cancelled = True
            self._kill(job)

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        """This machine is always available to itself."""
        return {}

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        """The rank logs of the job (whether or not each exists yet)."""
        return JobOutput(
            job_id=job_id,
            ranks=[
                RankOutput(rank=rl.rank, node=rl.node, log=rank_log(spec, rl.rank))
                for rl in launch_plan(spec, spec.master_port)
            ],
        )

    def wait(self, job_id: str, timeout_s: float, interval_s: float = 0.1) -> JobState:
        """Poll until the job is terminal or timeout_s passes; returns the last state."""
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.poll([job_id])[job_id]
            if state.status.terminal or time.monotonic() >= deadline:
                return state
            time.sleep(interval_s)

    # -- internals ------------------------------------------------------------------------------

    def _start(self, job_id: str, job: _Job) -> None:
        spec = job.spec
        port = spec.master_port if spec.master_port and port_is_free(spec.master_port) else free_port()
        make_dir(spec.workdir)
        atomic_write(spec.workdir / "launch.txt", self.render(spec.model_copy(update={"master_port": port})))
        job.started = time.monotonic()
        try:
            for rl in launch_plan(spec, port):
                log = os.fdopen(open_write(rank_log(spec, rl.rank), append=spec.append_output), "wb")
                job.logs.append(log)
                pgid = job.procs[0].pid if job.procs else 0
                job.procs.append(
                    subprocess.Popen(
                        rl.argv,
                        env={**os.environ, **rl.env},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        cwd=spec.workdir,
                        process_group=pgid,
                    )
                )
        except OSError as e:
            self._kill(job)
            job.ended = time.monotonic()
            raise SchedulerError(f"local: cannot start {spec.argv[0]!r} for {job_id}: {e}") from e
        if spec.time_limit_s is not None:
            job.timer = threading.Timer(spec.time_limit_s, self._on_timeout, args=(job,))
            job.timer.daemon = True
            job.timer.start()

    def _on_timeout(self, job: _Job) -> None:
        with self._lock:
            if self._ended(job):
                return
            job.timed_out = True
        self._kill(job)

    def _kill(self, job: _Job) -> None:
        """SIGTERM every rank and its descendants, wait kill_grace_s, SIGKILL what is left."""
        victims: list[psutil.Process] = []
        for p in job.procs:
            with contextlib.suppress(psutil.Error):
                parent = psutil.Process(p.pid)
                victims.extend(parent.children(recursive=True))
                victims.append(parent)
        for v in victims:
            with contextlib.suppress(psutil.Error):
                v.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(victims, timeout=self.kill_grace_s)
        for v in alive:
            with contextlib.suppress(psutil.Error):
                v.kill()
        psutil.wait_procs(alive, timeout=self.kill_grace_s)
        for p in job.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=self.kill_grace_s)
        self._finish(job)

    def _finish(self, job: _Job) -> None:
        if job.ended is None and all(p.poll() is not None for p in job.procs):
            job.ended = time.monotonic()
            if job.timer is not None:
                job.timer.cancel()
            for log in job.logs:
                log.close()

    def _ended(self, job: _Job) -> bool:
        if job.started is None:
            return job.cancelled
        self._finish(job)
        return job.ended is not None

    def _start_ready(self) -> None:
        for job_id, job in self._jobs.items():
            waiting = job.started is None and not job.cancelled and job.after is not None
            if waiting and job.after is not None and self._ended(self._jobs[job.after]):
                self._start(job_id, job)

    def _state(self, job_id: str) -> JobState:
        job = self._jobs.get(job_id)
        if job is None:
            return JobState(job_id=job_id, status=JobStatus.UNKNOWN, raw_state="UNKNOWN")
        if job.started is None:
            if job.cancelled:
                return JobState(job_id=job_id, status=JobStatus.CANCELLED, raw_state="CANCELLED")
            return JobState(
                job_id=job_id, status=JobStatus.PENDING, raw_state="PENDING", reason=f"Dependency {job.after}"
            )
        ended = self._ended(job)
        elapsed = (job.ended if job.ended is not None else time.monotonic()) - job.started
        if not ended:
            return JobState(job_id=job_id, status=JobStatus.RUNNING, raw_state="RUNNING", elapsed_s=elapsed)
        codes = [p.returncode for p in job.procs]
        bad = [c for c in codes if c != 0]
        exit_code = next((c for c in bad if c > 0), 0)
        sig = next((-c for c in bad if c < 0), None)
        if job.timed_out:
            status, raw, reason = JobStatus.FAILED, "TIMEOUT", f"time limit {job.spec.time_limit_s}s"
        elif job.cancelled:
            status, raw, reason = JobStatus.CANCELLED, "CANCELLED", "cancelled by orch"
        elif not bad:
            status, raw, reason = JobStatus.COMPLETED, "COMPLETED", None
        else:
            ranks = [r for r, c in enumerate(codes) if c != 0]
            status, raw, reason = JobStatus.FAILED, "FAILED", f"rank(s) {ranks} exited {bad}"
        return JobState(
            job_id=job_id, status=status, raw_state=raw, exit_code=exit_code, signal=sig,
            reason=reason, elapsed_s=elapsed, nodelist=",".join(job.spec.nodes) or "localhost",
        )  # fmt: skip

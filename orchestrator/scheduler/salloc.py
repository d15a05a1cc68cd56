"""Allocation mode with the job steps launched by orch: `salloc --no-shell`, then one
`srun --jobid=ALLOC` per ladder step, started by orch as soon as the previous one exits.

The driver of allocation.py (an sbatch'd script that runs the sruns) waits for Slurm's batch
launch before its first step (about 1.1 s on the lab between `sched: Allocate` and the batch
script on the first node, docs/benchmarks.md), and orch learns a step's end only at its next
sacct poll. Here the allocation is made by `salloc --no-shell`, which has no batch script to
launch; orch runs each step's srun itself (the same srun argv as the driver's, plus --jobid and
--chdir) from a thread, one after another in ladder order, and the run's loop wakes as soon as an
srun exits (wait_for_news) instead of sleeping out its poll interval.

What stays as in allocation.py: the same allocation (the union of the steps' nodes, exclusive,
the sum of the steps' limits plus a margin), the same srun options (job name, --output rank logs,
--kill-on-bad-exit, task wrapper), the step ids ALLOC.K, and the step states and elapsed times
from sacct's job-step lines (poll): the srun's exit only says when to look.

Each srun gets the environment the driver's would have had: the allow-list of orch's own
environment (JOB_ENV_ALLOW), SLURM_CONF, and the step's exports (MASTER_ADDR/PORT, JobSpec.env);
nothing else of orch's environment (no SLURM_* of an enclosing job). srun's and salloc's own
messages go to files in the run's alloc/ folder on this machine (salloc.out, srun-ALLOC.out).

The allocation has no shell that ends it: orch releases it (scancel) once the run's steps are
judged (release), and cancelling any step cancels it, as in allocation.py; the lifecycle does that
on any error, Ctrl-C or SIGTERM. An srun that exits without a job step in sacct (it could not
start one) ends its step as an infrastructure failure after SRUN_GRACE_S, naming srun's exit
status and its last message. salloc and the sruns run in their own session, so that a Ctrl-C in
the terminal reaches orch (which cancels the allocation) and not srun (which would only print
its tasks' states at a first Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Protocol, Unpack

from orchestrator.errors import SchedulerError
from orchestrator.safefs import atomic_write, make_dir, open_write
from orchestrator.scheduler.allocation import (
    AllocationScheduler,
    ladder_job_name,
    ladder_nodes,
    ladder_time_limit,
    srun_argv,
)
from orchestrator.scheduler.base import JobSpec, JobState, JobStatus
from orchestrator.scheduler.slurm import (
    CMD_TIMEOUT_S,
    JOB_ENV_ALLOW,
    SlurmOptions,
    check_output_path,
    slurm_time,
)

# salloc says the allocation's id on stderr whether it is granted at once or queued.
_ALLOC_ID = re.compile(r"(?:Granted|Pending) job allocation (\d+)")
# How long a step's line may stay missing from sacct after its srun exited (slurmdbd behind).
SRUN_GRACE_S = 10.0
# The loop's poll interval while a step's srun has exited and sacct has not recorded its end yet.
FAST_POLL_S = 0.05


class StepProcess(Protocol):
    """A started salloc or srun (subprocess.Popen)."""

    def wait(self) -> int: ...

    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...


Launch = Callable[[list[str], dict[str, str], Path], StepProcess]
"""Start argv with exactly this environment, its output and errors appended to the file."""


def popen_launch(argv: list[str], env: dict[str, str], log: Path) -> StepProcess:
    """Launch: a subprocess in its own session, output appended to log (never through a planted
    link: safefs.open_write), run from log's folder."""
    with os.fdopen(open_write(log, append=True), "ab") as out:
        return subprocess.Popen(
            argv, env=env, cwd=log.parent, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


class SallocScheduler(AllocationScheduler):
    """Allocation mode, sruns launched by orch (module docstring)."""

    driver_on_nodes = False

    def __init__(
        self,
        *,
        launch: Launch = popen_launch,
        srun_grace_s: float = SRUN_GRACE_S,
        **slurm: Unpack[SlurmOptions],
    ) -> None:
        super().__init__(**slurm)
        self._launch, self._grace = launch, srun_grace_s
        self._news = threading.Event()
        self._stop = threading.Event()  # release: no srun starts any more
        self._stopped: set[str] = set()  # allocations cancelled: no srun starts in them
        self._lock = threading.Lock()
        self._exits: dict[str, tuple[int, float, Path]] = {}  # step id -> (srun status, when, its log)
        self._running: dict[str, StepProcess] = {}  # salloc and sruns not known to have exited
        self._unseen: set[str] = set()  # steps whose srun exited and whose end sacct has not shown
        self._allocs: list[str] = []
        self._ended: set[str] = set()  # allocations scancelled
        self._threads: list[threading.Thread] = []
        self._booked: tuple[list[str], str, StepProcess] | None = None  # salloc argv, id, process

    # -- pure -----------------------------------------------------------------------------
    def salloc_argv(self, specs: list[JobSpec]) -> list[str]:
        """The allocation: what the driver's #SBATCH lines ask for, on salloc's command line."""
        limit = ladder_time_limit(specs)
        cpus = max(s.cpus_per_task or 0 for s in specs)
        gpus = max(s.gpus_per_node for s in specs)
        nodes = ladder_nodes(specs)
        return [
            "salloc",
            "--no-shell",
            f"--job-name={ladder_job_name(specs)}",
            f"--nodes={len(nodes)}",
            f"--ntasks-per-node={max(s.ranks_per_node for s in specs)}",
            *([f"--cpus-per-task={cpus}"] if cpus else []),
            f"--nodelist={','.join(nodes)}",
            *([f"--time={slurm_time(limit)}"] if limit else []),
            "--exclusive",
            *([f"--partition={specs[0].partition}"] if specs[0].partition else []),
            *([f"--gres=gpu:{gpus}"] if gpus else []),
        ]

    @staticmethod
    def step_argv(alloc: str, spec: JobSpec) -> list[str]:
        """The step's srun as the driver runs it, into allocation `alloc`, in the step's workdir."""
        srun = srun_argv(spec)
        return [srun[0], f"--jobid={alloc}", f"--chdir={spec.workdir}", *srun[1:]]

    def base_env(self) -> dict[str, str]:
        """What salloc and every srun get of this process's environment: the jobs' allow-list, and
        SLURM_CONF: the scheduler's own (the inventory's orch_slurm_conf), else orch's (a run
        resumed without an inventory takes orch's own configuration, never the run folder's)."""
        own = {"SLURM_CONF": os.environ["SLURM_CONF"]} if "SLURM_CONF" in os.environ else {}
        return {**{k: os.environ[k] for k in JOB_ENV_ALLOW if k in os.environ}, **own, **self.env}

    def step_env(self, spec: JobSpec) -> dict[str, str]:
        """An srun's environment: base_env and the step's exports, as the driver exported them."""
        env = {**self.base_env(), **spec.env}
        if spec.master_addr:
            env["MASTER_ADDR"] = spec.master_addr
        if spec.master_port:
            env["MASTER_PORT"] = str(spec.master_port)
        return env

    # -- commands -------------------------------------------------------------------------
    def book(self, specs: list[JobSpec], local: Path) -> None:
        """salloc the allocation of these steps now, while orch still checks the run (the stack's
        fingerprint): Slurm queues and grants it meanwhile, and no srun starts before
        submit_ladder. salloc's messages go to `local`. Raises SchedulerError as submit_ladder."""
        self.render_ladder(specs)
        argv = self.salloc_argv(specs)
        alloc, salloc = self._salloc(argv, local)
        self._booked = (argv, alloc, salloc)

    def submit_ladder(
        self, specs: list[JobSpec], workdir: Path, *, script_dir: Path | None = None
    ) -> list[str]:
        """Start the thread that runs the steps' sruns in the allocation booked for them (book), or
        in one salloc'd now; returns the steps' ids ALLOC.K. salloc's and srun's messages, and the
        commands as run (commands.sh, a record), go to script_dir (default workdir), on this
        machine. Raises ConfigError when a step cannot run in the allocation, SchedulerError when
        salloc refuses it or names no job."""
        check_output_path(workdir)
        self.render_ladder(specs)  # the driver's checks: every step, the partition, the job name
        for spec in specs:
            if spec.script is None:
                make_dir(spec.workdir)
        local = script_dir or workdir
        argv = self.salloc_argv(specs)
        booked, self._booked = self._booked, None
        if booked is not None and booked[0] == argv:
            _, alloc, salloc = booked
        else:
            if booked is not None:  # booked for other steps (one was abandoned): not this one
                self._end_allocations([booked[1]])
            alloc, salloc = self._salloc(argv, local)
        ids = [f"{alloc}.{k}" for k in range(len(specs))]
        self._names.update({i: s.name for i, s in zip(ids, specs, strict=True)})
        record = [argv, *(self.step_argv(alloc, s) for s in specs)]
        atomic_write(local / "commands.sh", "".join(shlex.join(a) + "\n" for a in record))
        thread = threading.Thread(
            target=self._drive, args=(alloc, salloc, list(zip(ids, specs, strict=True)), local),
            name=f"orch-alloc-{alloc}", daemon=True,
        )  # fmt: skip
        self._threads.append(thread)
        thread.start()
        return ids

    def _salloc(self, argv: list[str], local: Path) -> tuple[str, StepProcess]:
        """Start salloc; its allocation's id once salloc names it (granted or queued)."""
        make_dir(local)
        if self._submitted_at is None:
            self._submitted_at = datetime.now()
        log = local / "salloc.out"
        start = log.stat().st_size if log.exists() else 0  # an earlier salloc's lines come before
        try:
            salloc = self._launch(argv, self.base_env(), log)
        except OSError as e:
            raise SchedulerError(f"salloc could not be started: {e}") from e
        alloc = self._await_id(salloc, log, start)
        self._allocs.append(alloc)
        with self._lock:
            self._running[alloc] = salloc
        return alloc, salloc

    def _await_id(self, salloc: StepProcess, log: Path, start: int) -> str:
        """The job id salloc wrote to log after byte `start`."""
        deadline = time.monotonic() + CMD_TIMEOUT_S
        while True:
            text = ""
            if log.exists():
                with open(log, "rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace")
            if m := _ALLOC_ID.search(text):
                return m.group(1)
            if salloc.poll() is not None:
                raise SchedulerError(f"salloc refused the ladder: {_tail(log) or 'no message'}")
            if time.monotonic() > deadline:
                salloc.terminate()
                raise SchedulerError(
                    f"salloc named no job within {CMD_TIMEOUT_S:.0f} s", hint="is slurmctld running?"
                )
            time.sleep(0.01)

    def _drive(self, alloc: str, salloc: StepProcess, steps: list[tuple[str, JobSpec]], local: Path) -> None:
        """The thread: wait for the allocation, then each step's srun in turn, noting its exit."""
        granted = salloc.wait() == 0
        with self._lock:
            self._running.pop(alloc, None)
        if not granted:  # refused or cancelled while queued: sacct/squeue tell the steps' fate
            self._news.set()
            return
        log = local / f"srun-{alloc}.out"
        for job_id, spec in steps:
            if self._stop.is_set() or alloc in self._stopped:
                return
            try:
                proc = self._launch(self.step_argv(alloc, spec), self.step_env(spec), log)
            except OSError as e:
                with contextlib.suppress(OSError), os.fdopen(open_write(log, append=True), "a") as f:
                    f.write(f"orch: srun could not be started: {e}\n")
                status = -1
            else:
                with self._lock:
                    self._running[job_id] = proc
                status = proc.wait()
            with self._lock:
                self._running.pop(job_id, None)
                self._exits[job_id] = (status, self._clock(), log)
                self._unseen.add(job_id)
            self._news.set()

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """allocation.py's states from sacct; a step whose srun exited without a job step line
        for SRUN_GRACE_S is an infrastructure failure naming srun's status and last message."""
        states = super().poll(job_ids)
        now = self._clock()
        with self._lock:
            exits = {j: self._exits[j] for j in job_ids if j in self._exits}
        for job_id, (status, when, log) in exits.items():
            state = states.get(job_id)
            if state is not None and state.status == JobStatus.PENDING and now - when > self._grace:
                states[job_id] = JobState(
                    job_id=job_id, status=JobStatus.INFRA, raw_state="NO_STEP",
                    reason=f"srun exited {status} without a job step in sacct: {_tail(log) or 'no message'}",
                )  # fmt: skip
        with self._lock:
            self._unseen -= {j for j, s in states.items() if s.status.terminal}
        return states

    def wait_for_news(self, timeout: float) -> None:
        """Sleep until an srun exits or timeout passes; only FAST_POLL_S while a step's srun has
        exited and sacct has not shown its end yet (slurmdbd is a moment behind slurmctld)."""
        with self._lock:
            if self._unseen:
                timeout = min(timeout, FAST_POLL_S)
        self._news.wait(timeout)
        self._news.clear()

    def cancel(self, job_ids: list[str]) -> None:
        """No further srun starts in these steps' allocations; scancel them (their sruns end with
        them). Steps never submitted (no ids) stop nothing."""
        allocs = sorted({j.partition(".")[0] for j in job_ids})
        self._stopped.update(allocs)
        self._end_allocations(allocs)

    def release(self) -> None:
        """End the run's allocations, a booked one included (scancel): the run's steps are judged,
        or it is ending. An salloc still waiting or an srun still running is terminated as well.
        Idempotent."""
        self._stop.set()
        self._booked = None
        self._end_allocations(list(self._allocs))
        with self._lock:
            left = list(self._running.values())
        for proc in left:
            if proc.poll() is None:
                proc.terminate()

    def _end_allocations(self, allocs: list[str]) -> None:
        """scancel each allocation once (release after a cancel, or the other way round)."""
        todo = [a for a in allocs if a not in self._ended]
        self._allocs = [a for a in self._allocs if a not in todo]
        self._ended.update(todo)
        super().cancel(todo)

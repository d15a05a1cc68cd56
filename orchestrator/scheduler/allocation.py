"""Slurm allocation mode: the whole ladder in one allocation, one `srun` job step per ladder step.

One sbatch of a small driver script books the union of the ladder's nodes (the largest node set)
for the sum of the steps' time limits plus a margin; the driver runs each ladder step, in ladder
order, as `srun --nodes=N --nodelist=... --ntasks-per-node=R ...` inside it. No scheduler
round-trip falls between two steps, which on the lab removes the 0.6-1.8 s that Slurm adds
between a chained job's end and the next job's start (docs/benchmarks.md).

Step states come from sacct's job-step lines (`sacct -j ALLOC` without -X: ALLOC, ALLOC.batch,
ALLOC.0, ALLOC.1, ...). Each srun is named `orch-<run id>-<step>` and a step line is matched by
that name, not by its number, so a step whose srun never started (Slurm then numbers the next one
in its place) cannot be mistaken for another; a line whose name slurmdbd has not filled in yet is
taken by its number. A line still RUNNING after the driver COMPLETED is slurmdbd behind, not an
end. A ladder step gets the id `ALLOC.K` (K its place in
the driver); a step with no line yet is PENDING while the allocation waits or runs earlier steps,
and ends with the allocation if the allocation ends first. The mode needs Slurm accounting.

The driver obeys the rules of every job script (slurm.py, docs/reliability.md): its #SBATCH lines
hold only numbers and identifier-pattern names (check_spec on every step); its output path and the
environment allow-list (--export) go on sbatch's argv; every value in its body passes the one `sh`
filter; and each srun passes --export=ALL, so that a step's tasks get the variables the driver
exported for that step (sbatch's --export list would otherwise be handed down to them).

Cancelling any step cancels the allocation: every caller of cancel (Ctrl-C, SIGTERM, an error,
a step abandoned) means that what is left of the ladder must not run. The allocation ends by
itself after its last step, and never outlives orch by more than its time limit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Unpack

from orchestrator import __version__
from orchestrator.errors import ConfigError, SchedulerError
from orchestrator.models.base import StrictModel
from orchestrator.models.names import ID_MAX, is_name
from orchestrator.safefs import atomic_write, make_dir
from orchestrator.scheduler import slurm_state
from orchestrator.scheduler.base import JobSpec, JobState, JobStatus
from orchestrator.scheduler.slurm import (
    _NO_ACCOUNTING,
    _UNKNOWN_JOB,
    SlurmOptions,
    SlurmScheduler,
    _check_word,
    check_output_path,
    check_spec,
    rank_output,
    sbatch_base,
    slurm_time,
    task_wrapper,
)

# Slack of the allocation's time limit over the sum of its steps' limits: the driver's own start
# and the launch of each srun.
ALLOC_MARGIN_S = 60
_NEEDS_ACCOUNTING = (
    "allocation mode follows job steps through Slurm accounting; without it use --slurm-mode per-step"
)


class LadderStep(StrictModel):
    """One ladder step inside the allocation: its job spec and the srun argv that runs it."""

    spec: JobSpec
    srun: list[str]


def step_name(spec: JobSpec) -> str:
    """The name of the step's srun (and of its sacct line): the job name per-step mode gives it."""
    return spec.name


def srun_argv(spec: JobSpec) -> list[str]:
    """The srun that runs one ladder step inside the allocation; ranks log to rank-<t>.log.

    Raises ConfigError for a spec this mode cannot run as a job step (no nodes named, a batch job,
    sbatch-only options)."""
    if not spec.nodes:
        raise ConfigError(f"step {spec.step_id}: allocation mode needs the step's nodes named")
    if spec.launch != "srun" or spec.requeue or spec.begin or spec.daily or spec.extra_args:
        raise ConfigError(
            f"step {spec.step_id}: allocation mode runs srun steps only (no batch launch, requeue, "
            "--begin or extra sbatch options); use --slurm-mode per-step"
        )
    argv = [
        "srun",
        # sbatch --export=<allow-list> puts its list in SLURM_EXPORT_ENV, which srun would read as
        # its own --export: the step would lose MASTER_* and the env the driver exported for it.
        # ALL hands each task the driver's environment, i.e. the allow-list plus those exports.
        "--export=ALL",
        f"--job-name={step_name(spec)}",
        f"--nodes={spec.nnodes}",
        f"--ntasks={spec.nnodes * spec.ranks_per_node}",
        f"--ntasks-per-node={spec.ranks_per_node}",
        f"--nodelist={','.join(spec.nodes)}",
    ]
    if spec.cpus_per_task:
        argv.append(f"--cpus-per-task={spec.cpus_per_task}")
    if spec.time_limit_s:
        argv.append(f"--time={slurm_time(spec.time_limit_s)}")
    argv.append(f"--kill-on-bad-exit={1 if spec.kill_on_bad_exit else 0}")
    if spec.rank_logs:
        argv.append(f"--output={rank_output(spec)}")
    if spec.gpus_per_node:
        argv.append(f"--gres=gpu:{spec.gpus_per_node}")
    if wrapper := task_wrapper(spec):
        argv += ["bash", "-c", wrapper, "orch-task"]
    return [*argv, *spec.argv]


def ladder_nodes(specs: list[JobSpec]) -> list[str]:
    """The union of the steps' nodes, in the order the ladder first names them."""
    return list(dict.fromkeys(n for s in specs for n in s.nodes))


def ladder_time_limit(specs: list[JobSpec]) -> int | None:
    """The allocation's time limit: the steps' limits and a margin; None (the partition's limit)
    when a step has none."""
    limits = [s.time_limit_s for s in specs]
    if any(t is None for t in limits):
        return None
    return sum(t for t in limits if t is not None) + ALLOC_MARGIN_S


def ladder_job_name(specs: list[JobSpec]) -> str:
    """The allocation's job name: orch-<run id>-<step> (scheduler/base.py run_job_name) gives
    orch-<run id>-ladder, which still carries the run's id (orch runs cleanup looks for it).
    Raises ConfigError when it is not a valid name."""
    job_name = f"{specs[0].name.removesuffix(specs[0].step_id).rstrip('-') or 'orch'}-ladder"
    if not is_name(job_name, ID_MAX):
        raise ConfigError(f"allocation mode: job name {job_name!r} is not a valid name")
    return job_name


class AllocationScheduler(SlurmScheduler):
    """JobScheduler on Slurm that runs a ladder as job steps of one allocation (module docstring)."""

    # The driver runs on the allocation's first node and writes its output into the run's alloc/
    # folder there (the step executor: prepared before, collected after the run).
    driver_on_nodes = True

    def __init__(self, **options: Unpack[SlurmOptions]) -> None:
        super().__init__(use_sacct=True, **options)  # step states come from sacct's job-step lines
        self._driver = self._jinja.get_template("alloc-driver.sh.j2")
        self._names: dict[str, str] = {}  # ladder step id (ALLOC.K) -> its srun's name

    # -- pure -----------------------------------------------------------------------------
    def render_ladder(self, specs: list[JobSpec]) -> str:
        """The driver script: one allocation of every step's nodes, one srun per step, in order.

        Its #SBATCH lines hold only numbers and Slurm words (check_spec, as for a job of its own);
        the driver's output path and --export go on sbatch's argv (submit_ladder). Raises
        ConfigError when a value cannot go into it safely or the steps cannot share an allocation.
        """
        if not specs:
            raise ConfigError("allocation mode: no step to run")
        steps = []
        for spec in specs:
            check_spec(spec)
            steps.append(LadderStep(spec=spec, srun=srun_argv(spec)))
        partitions = {s.partition for s in specs}
        if len(partitions) > 1:
            raise ConfigError(f"allocation mode: the steps ask for different partitions {partitions}")
        job_name = ladder_job_name(specs)
        limit = ladder_time_limit(specs)
        return str(
            self._driver.render(
                version=__version__,
                job_name=job_name,
                nnodes=len(ladder_nodes(specs)),
                nodes=ladder_nodes(specs),
                ranks_per_node=max(s.ranks_per_node for s in specs),
                cpus_per_task=max(s.cpus_per_task or 0 for s in specs),
                gpus_per_node=max(s.gpus_per_node for s in specs),
                partition=specs[0].partition,
                time_limit=slurm_time(limit) if limit else "",
                steps=steps,
            )
        )

    def render(self, spec: JobSpec) -> str:
        """The driver script of a ladder of one step."""
        return self.render_ladder([spec])

    @staticmethod
    def ladder_argv(workdir: Path) -> list[str]:
        """The driver's sbatch command, without the script: its output file in workdir and the
        environment allow-list, on the command line as for every job (slurm.sbatch_base)."""
        return sbatch_base(workdir / "alloc-%j.out")

    # -- commands -------------------------------------------------------------------------
    def submit_ladder(
        self, specs: list[JobSpec], workdir: Path, *, script_dir: Path | None = None
    ) -> list[str]:
        """sbatch the driver of these steps (driver output in workdir, its script in script_dir,
        default workdir); returns the steps' ids ALLOC.K in the order given. Folders are made
        here only where they are on this machine (workdir when it holds the script, a step's
        workdir when it holds the step's script: JobSpec.script). Raises ConfigError when the
        ladder cannot be rendered safely, SchedulerError when sbatch refuses it."""
        check_output_path(workdir)
        text = self.render_ladder(specs)
        for spec in specs:
            if spec.script is None:
                make_dir(spec.workdir)
        script = (script_dir or workdir) / "alloc.sbatch"
        make_dir(script.parent)
        atomic_write(script, text)
        alloc = self._sbatch([*self.ladder_argv(workdir), str(script)], "the ladder")
        ids = [f"{alloc}.{k}" for k in range(len(specs))]
        self._names.update({i: step_name(s) for i, s in zip(ids, specs, strict=True)})
        return ids

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """A ladder of one step (the protocol's single submit); `after` is not supported here."""
        if after is not None:
            raise SchedulerError("allocation mode runs its steps in order inside one job; no dependency")
        return self.submit_ladder([spec], spec.workdir)[0]

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """State of each ladder step from sacct's job-step lines (module docstring).

        A failing sacct is retried at the next poll, as in per-step mode: meanwhile the steps of
        that allocation are left out of the answer (no news, not a guess). Raises SchedulerError
        once sacct has failed `max_failures` polls in a row over `failure_window_s`, or at once
        when Slurm accounting is disabled."""
        allocs = sorted({j.partition(".")[0] for j in job_ids})
        states: dict[str, JobState] = {}
        for alloc in allocs:
            lines = self._sacct_steps(alloc)
            if lines is None:
                continue
            whole = self._allocation_state(alloc, lines.get(alloc))
            by_name = {s.name: s for k, s in lines.items() if k.startswith(f"{alloc}.") and s.name}
            for job_id in (j for j in job_ids if j.partition(".")[0] == alloc):
                line = by_name.get(self._names.get(job_id, ""))
                if line is None and (own := lines.get(job_id)) is not None and not own.name:
                    line = own  # slurmdbd fills a step's name a moment after its line
                states[job_id] = step_state(job_id, line, whole)
        return states

    def _sacct_steps(self, alloc: str) -> dict[str, JobState] | None:
        """sacct's lines of the allocation and its steps, by id; None when sacct failed this poll."""
        _check_word("job id", alloc)
        argv = ["sacct", *slurm_state.SACCT_ARGS, "-j", alloc]
        if self._submitted_at is not None:
            argv += ["-S", self._submitted_at.strftime("%Y-%m-%dT%H:%M:%S")]
        res = self._query("sacct", argv, (_UNKNOWN_JOB, _NO_ACCOUNTING), hint=_NEEDS_ACCOUNTING)
        if res is None:
            return None
        if not res.ok:
            if _NO_ACCOUNTING in res.stderr.lower():
                raise SchedulerError(f"sacct: {res.brief()}", hint=_NEEDS_ACCOUNTING)
            return {}  # a job id sacct does not know (yet): no lines
        return slurm_state.parse_sacct(res.stdout, steps=True)

    def _allocation_state(self, alloc: str, from_sacct: JobState | None) -> JobState:
        # sacct lags behind the submission by a moment, and keeps a pending job's first reason;
        # squeue (then scontrol) has the live word, as in per-step mode.
        if from_sacct is not None and from_sacct.status != JobStatus.PENDING:
            return from_sacct
        live = self._poll_squeue([alloc]).get(alloc)
        return live or from_sacct or self._poll_scontrol(alloc)

    def cancel(self, job_ids: list[str]) -> None:
        """scancel the allocations these steps belong to (what is left of the ladder must not run)."""
        super().cancel(sorted({j.partition(".")[0] for j in job_ids}))

    def book(self, specs: list[JobSpec], local: Path) -> None:
        """Nothing booked ahead: the driver would start the steps as soon as it is allocated."""

    def wait_for_news(self, timeout: float) -> None:
        """Sleep between two polls (the driver's steps end without telling orch)."""
        time.sleep(timeout)

    def release(self) -> None:
        """Nothing to release: the driver's allocation ends after its last step."""


def step_state(job_id: str, line: JobState | None, allocation: JobState) -> JobState:
    """One ladder step's state from its sacct step line (None: not started) and the allocation's."""
    if line is not None and (
        line.status.terminal or not allocation.status.terminal or allocation.status == JobStatus.COMPLETED
    ):
        # A driver that completed ran every srun to its end: a step line still RUNNING is only
        # slurmdbd behind, and the next poll has its end.
        return line.model_copy(update={"job_id": job_id})
    if allocation.status.terminal:
        # The allocation ended before this step did (or before it started): it shares the end.
        status = JobStatus.CANCELLED if allocation.status == JobStatus.CANCELLED else JobStatus.INFRA
        started = "" if line is None else "while this step ran "
        return JobState(
            job_id=job_id,
            status=status,
            raw_state=allocation.raw_state,
            reason=f"the allocation {allocation.job_id} ended {started}({allocation.raw_state})",
            elapsed_s=None if line is None else line.elapsed_s,
            nodelist=None if line is None else line.nodelist,
        )
    if allocation.status == JobStatus.UNKNOWN:
        return allocation.model_copy(update={"job_id": job_id})
    # Not started: the allocation waits (its reason tells why) or runs the steps before this one.
    reason = allocation.reason if allocation.status == JobStatus.PENDING else None
    return JobState(job_id=job_id, status=JobStatus.PENDING, raw_state="PENDING", reason=reason)

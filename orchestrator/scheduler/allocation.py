"""Slurm allocation mode: the whole ladder in one allocation, one `srun` job step per ladder step.

One sbatch of a small driver script books the union of the ladder's nodes (the largest node set)
for the sum of the steps' time limits plus a margin; the driver runs each ladder step, in ladder
order, as `srun --nodes=N --nodelist=... --ntasks-per-node=R ...` inside it. No scheduler
round-trip falls between two steps, which on the lab removes the 0.6-1.8 s that Slurm adds
between a chained job's end and the next job's start (docs/benchmarks.md).

Step states come from sacct's job-step lines (`sacct -j ALLOC` without -X: ALLOC, ALLOC.batch,
ALLOC.0, ALLOC.1, ...). Each srun is named `orch-<plan>-<step>` and a step line is matched by
that name, not by its number, so a step whose srun never started (Slurm then numbers the next one
in its place) cannot be mistaken for another; a line whose name slurmdbd has not filled in yet is
taken by its number. A line still RUNNING after the driver COMPLETED is slurmdbd behind, not an
end. A ladder step gets the id `ALLOC.K` (K its place in
the driver); a step with no line yet is PENDING while the allocation waits or runs earlier steps,
and ends with the allocation if the allocation ends first. The mode needs Slurm accounting.

Cancelling any step cancels the allocation: every caller of cancel (Ctrl-C, SIGTERM, an error,
a step abandoned) means that what is left of the ladder must not run. The allocation ends by
itself after its last step, and never outlives orch by more than its time limit.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator import __version__
from orchestrator.errors import ConfigError, SchedulerError
from orchestrator.models.base import StrictModel
from orchestrator.remote.base import CommandRunner
from orchestrator.scheduler import slurm_state
from orchestrator.scheduler.base import JobSpec, JobState, JobStatus
from orchestrator.scheduler.slurm import SlurmScheduler, _check_word, check_spec, slurm_time

# Slack of the allocation's time limit over the sum of its steps' limits: the driver's own start
# and the launch of each srun.
ALLOC_MARGIN_S = 60


class LadderStep(StrictModel):
    """One ladder step inside the allocation: its job spec and the srun argv that runs it."""

    spec: JobSpec
    srun: list[str]


def step_name(spec: JobSpec) -> str:
    """The name of the step's srun (and of its sacct line)."""
    return f"orch-{spec.name}"


def srun_argv(spec: JobSpec) -> list[str]:
    """The srun that runs one ladder step inside the allocation; ranks log to rank-<t>.log."""
    if not spec.nodes:
        raise ConfigError(f"step {spec.step_id}: allocation mode needs the step's nodes named")
    argv = [
        "srun",
        f"--job-name={step_name(spec)}",
        f"--nodes={spec.nnodes}",
        f"--ntasks={spec.nnodes * spec.ranks_per_node}",
        f"--ntasks-per-node={spec.ranks_per_node}",
        f"--nodelist={','.join(spec.nodes)}",
        f"--time={slurm_time(spec.time_limit_s)}",
        "--kill-on-bad-exit=1",
        f"--output={spec.workdir}/rank-%t.log",
    ]
    if spec.gpus_per_node:
        argv.append(f"--gres=gpu:{spec.gpus_per_node}")
    return [*argv, *spec.argv]


def ladder_nodes(specs: list[JobSpec]) -> list[str]:
    """The union of the steps' nodes, in the order the ladder first names them."""
    return list(dict.fromkeys(n for s in specs for n in s.nodes))


class AllocationScheduler(SlurmScheduler):
    """JobScheduler on Slurm that runs a ladder as job steps of one allocation (module docstring)."""

    def __init__(self, *, slurm_conf: Path | None = None, runner: CommandRunner | None = None) -> None:
        super().__init__(slurm_conf=slurm_conf, runner=runner, use_sacct=True)
        self._driver = self._env.get_template("alloc-driver.sh.j2")
        self._names: dict[str, str] = {}  # ladder step id (ALLOC.K) -> its srun's name

    # -- pure -----------------------------------------------------------------------------
    def render_ladder(self, specs: list[JobSpec]) -> str:
        """The driver script: one allocation of every step's nodes, one srun per step, in order."""
        if not specs:
            raise ConfigError("allocation mode: no step to run")
        for spec in specs:
            check_spec(spec)
            _check_word("step name", step_name(spec))
        partitions = {s.partition for s in specs}
        if len(partitions) > 1:
            raise ConfigError(f"allocation mode: the steps ask for different partitions {partitions}")
        job_name = f"orch-{specs[0].name.removesuffix(specs[0].step_id).rstrip('-') or 'ladder'}-ladder"
        _check_word("job name", job_name)
        return str(
            self._driver.render(
                version=__version__,
                job_name=job_name,
                nnodes=len(ladder_nodes(specs)),
                nodes=ladder_nodes(specs),
                ranks_per_node=max(s.ranks_per_node for s in specs),
                gpus_per_node=max(s.gpus_per_node for s in specs),
                partition=specs[0].partition,
                time_limit=slurm_time(sum(s.time_limit_s for s in specs) + ALLOC_MARGIN_S),
                steps=[LadderStep(spec=s, srun=srun_argv(s)) for s in specs],
            )
        )

    def render(self, spec: JobSpec) -> str:
        """The driver script of a ladder of one step."""
        return self.render_ladder([spec])

    # -- commands -------------------------------------------------------------------------
    def submit_ladder(self, specs: list[JobSpec], workdir: Path) -> list[str]:
        """sbatch the driver of these steps (script and driver output in workdir); returns the
        steps' ids ALLOC.K in the order given. Raises SchedulerError when sbatch refuses it."""
        workdir.mkdir(parents=True, exist_ok=True)
        for spec in specs:
            spec.workdir.mkdir(parents=True, exist_ok=True)
        script = workdir / "alloc.sbatch"
        script.write_text(self.render_ladder(specs))
        alloc = self._sbatch(["--parsable", f"--output={workdir}/alloc-%j.out", str(script)], "the ladder")
        ids = [f"{alloc}.{k}" for k in range(len(specs))]
        self._names.update({i: step_name(s) for i, s in zip(ids, specs, strict=True)})
        return ids

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """A ladder of one step (the protocol's single submit); `after` is not supported here."""
        if after is not None:
            raise SchedulerError("allocation mode runs its steps in order inside one job; no dependency")
        return self.submit_ladder([spec], spec.workdir)[0]

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """State of each ladder step from sacct's job-step lines (module docstring)."""
        allocs = sorted({j.partition(".")[0] for j in job_ids})
        states: dict[str, JobState] = {}
        for alloc in allocs:
            lines = self._sacct_steps(alloc)
            whole = self._allocation_state(alloc, lines.get(alloc))
            by_name = {s.name: s for k, s in lines.items() if k.startswith(f"{alloc}.") and s.name}
            for job_id in (j for j in job_ids if j.partition(".")[0] == alloc):
                line = by_name.get(self._names.get(job_id, ""))
                if line is None and (own := lines.get(job_id)) is not None and not own.name:
                    line = own  # slurmdbd fills a step's name a moment after its line
                states[job_id] = step_state(job_id, line, whole)
        return states

    def _sacct_steps(self, alloc: str) -> dict[str, JobState]:
        argv = ["sacct", *slurm_state.SACCT_ARGS, "-j", alloc]
        if self._submitted_at is not None:
            argv += ["-S", self._submitted_at.strftime("%Y-%m-%dT%H:%M:%S")]
        res = self._run(argv)
        if not res.ok:
            raise SchedulerError(
                f"sacct failed: {res.brief()}",
                hint="allocation mode follows job steps through Slurm accounting; "
                "without it use --slurm-mode per-step",
            )
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
        allocs = sorted({j.partition(".")[0] for j in job_ids})
        if allocs:
            self._run(["scancel", *allocs])


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

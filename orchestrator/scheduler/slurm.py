"""Slurm backend: sbatch scripts from a Jinja2 template, state from sacct (or squeue + scontrol).

Rendering is pure and tested by comparing `#SBATCH` lines; the methods that run Slurm commands
stay thin and go through a CommandRunner so tests can swap in recorded outputs.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from pathlib import Path

import jinja2

from orchestrator import __version__
from orchestrator.errors import ConfigError, RemoteError, SchedulerError
from orchestrator.remote.base import CmdResult, CommandRunner
from orchestrator.remote.local import LocalRunner
from orchestrator.scheduler import slurm_state
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus, RankOutput

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")
_UNAVAILABLE_STATE = re.compile(r"drain|down|fail|maint|inval|future|unknown|power", re.IGNORECASE)
_TEMPLATES = Path(__file__).parent / "templates"
# Slurm commands are quick; a slurmctld that does not answer within this is an infrastructure fault.
CMD_TIMEOUT_S = 30.0


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # noqa: S701 - a shell script, quoted by the sh/shjoin filters
    )
    env.filters["sh"] = lambda v: shlex.quote(str(v))
    env.filters["shjoin"] = lambda v: shlex.join([str(x) for x in v])
    return env


def slurm_time(seconds: int) -> str:
    """Seconds as Slurm's [D-]HH:MM:SS, rounded up to whole minutes' worth of seconds."""
    days, rest = divmod(max(1, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    hms = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{hms}" if days else hms


def _check_word(what: str, value: str) -> None:
    if not _SAFE_WORD.match(value):
        raise ConfigError(f"{what} {value!r} is not a valid Slurm name (letters, digits, _ . - only)")


def check_spec(spec: JobSpec) -> None:
    """Refuse a spec whose node, partition or environment names could not go into a script."""
    for node in spec.nodes:
        _check_word("node", node)
    if spec.partition:
        _check_word("partition", spec.partition)
    for key in spec.env:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ConfigError(f"environment variable name {key!r} is not valid")


class SlurmScheduler:
    """JobScheduler on Slurm. `slurm_conf`: the SLURM_CONF of the cluster, when not the default."""

    name = "slurm"

    def __init__(
        self,
        *,
        slurm_conf: Path | None = None,
        runner: CommandRunner | None = None,
        use_sacct: bool | None = None,
    ) -> None:
        env = {"SLURM_CONF": str(slurm_conf)} if slurm_conf else {}
        self.runner: CommandRunner = runner or LocalRunner(env)
        self._use_sacct = use_sacct  # None: find out on first poll
        self._submitted_at: datetime | None = None
        self._env = _env()
        self._template = self._env.get_template("sbatch.sh.j2")

    # -- pure -----------------------------------------------------------------------------
    def render(self, spec: JobSpec) -> str:
        """The sbatch script for spec."""
        check_spec(spec)
        return str(
            self._template.render(
                spec=spec,
                version=__version__,
                job_name=f"orch-{spec.name}",
                time_limit=slurm_time(spec.time_limit_s),
            )
        )

    # -- commands -------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> CmdResult:
        try:
            return self.runner.run(argv, timeout=CMD_TIMEOUT_S)
        except RemoteError as e:
            raise SchedulerError(str(e), hint="is slurmctld running and SLURM_CONF right?") from e

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """Write the script into spec.workdir and sbatch it; returns the job id."""
        spec.workdir.mkdir(parents=True, exist_ok=True)
        script = spec.workdir / "job.sbatch"
        script.write_text(self.render(spec))
        argv = ["sbatch", "--parsable"]
        if after:
            _check_word("job id", after)
            argv.append(f"--dependency=afterany:{after}")
        argv.append(str(script))
        return self._sbatch(argv[1:], f"step {spec.step_id}")

    def _sbatch(self, args: list[str], what: str) -> str:
        """Run `sbatch ARGS` (with --parsable among them); the job id it printed."""
        if self._submitted_at is None:
            self._submitted_at = datetime.now()
        res = self._run(["sbatch", *args])
        if not res.ok:
            raise SchedulerError(f"sbatch refused {what}: {res.brief()}")
        job_id = res.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed no job id for {what}: {res.stdout!r}")
        return job_id

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """State of each job: sacct when accounting works, else squeue, then scontrol."""
        if not job_ids:
            return {}
        states: dict[str, JobState] = {}
        if self._use_sacct is not False:
            states = self._poll_sacct(job_ids)
        # sacct keeps the reason a job had when it was recorded ("Dependency" long after the
        # dependency is met); squeue has the live one, e.g. ReqNodeNotAvail for a drained node.
        ask_squeue = [j for j in job_ids if j not in states or states[j].status == JobStatus.PENDING]
        if ask_squeue:
            states.update(self._poll_squeue(ask_squeue))
        for job_id in [j for j in job_ids if j not in states]:
            states[job_id] = self._poll_scontrol(job_id)
        return states

    def _poll_sacct(self, job_ids: list[str]) -> dict[str, JobState]:
        argv = ["sacct", *slurm_state.SACCT_ARGS, "-j", ",".join(job_ids)]
        if self._submitted_at is not None:
            argv += ["-S", self._submitted_at.strftime("%Y-%m-%dT%H:%M:%S")]
        res = self._run(argv)
        if not res.ok:
            if "accounting storage is disabled" in res.stderr.lower() or self._use_sacct is None:
                self._use_sacct = False
                return {}
            raise SchedulerError(f"sacct failed: {res.brief()}")
        self._use_sacct = True
        return {k: v for k, v in slurm_state.parse_sacct(res.stdout).items() if k in job_ids}

    def _poll_squeue(self, job_ids: list[str]) -> dict[str, JobState]:
        res = self._run(["squeue", *slurm_state.SQUEUE_ARGS, "-j", ",".join(job_ids)])
        if not res.ok:
            # squeue exits non-zero for job ids it no longer knows; scontrol is asked next.
            return {}
        return {k: v for k, v in slurm_state.parse_squeue(res.stdout).items() if k in job_ids}

    def _poll_scontrol(self, job_id: str) -> JobState:
        res = self._run(["scontrol", "show", "job", job_id])
        if not res.ok:
            return JobState(job_id=job_id, status=JobStatus.UNKNOWN, raw_state="UNKNOWN", reason=res.brief())
        found = slurm_state.parse_scontrol(res.stdout)
        if job_id in found:
            return found[job_id]
        return JobState(job_id=job_id, status=JobStatus.UNKNOWN, raw_state="UNKNOWN")

    def cancel(self, job_ids: list[str]) -> None:
        """scancel the jobs; ids Slurm no longer knows are fine."""
        if job_ids:
            self._run(["scancel", *job_ids])

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        """Nodes sinfo shows drained, down, failed, in maintenance or not responding (state ends in *)."""
        if not nodes:
            return {}
        for node in nodes:
            _check_word("node", node)
        res = self._run(["sinfo", "--noheader", "--Node", "--format=%N|%T", f"--nodes={','.join(nodes)}"])
        if not res.ok:
            raise SchedulerError(f"sinfo failed: {res.brief()}")
        bad: dict[str, str] = {}
        for line in res.stdout.splitlines():
            name, _, state = line.strip().partition("|")
            if name in nodes and (state.endswith("*") or _UNAVAILABLE_STATE.search(state)):
                bad[name] = state
        missing = [n for n in nodes if n not in {ln.partition("|")[0] for ln in res.stdout.splitlines()}]
        for name in missing:
            bad[name] = "unknown to Slurm"
        return bad

    def collect(self, job_id: str, spec: JobSpec) -> JobOutput:
        """Each rank's log, as srun wrote it (rank-<t>.log in the step's workdir)."""
        total = spec.nnodes * spec.ranks_per_node
        ranks = [RankOutput(rank=r, log=spec.workdir / f"rank-{r}.log") for r in range(total)]
        return JobOutput(job_id=job_id, ranks=ranks)

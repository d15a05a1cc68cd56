"""Slurm backend: sbatch scripts from a Jinja2 template, state from sacct (or squeue + scontrol).

Rendering is pure and tested by comparing `#SBATCH` lines; the methods that run Slurm commands
stay thin and go through a CommandRunner so tests can swap in recorded outputs.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TypedDict

import jinja2

from orchestrator import __version__
from orchestrator.errors import ConfigError, RemoteError, SchedulerError
from orchestrator.remote.base import CmdResult, CommandRunner
from orchestrator.remote.local import LocalRunner
from orchestrator.safefs import atomic_write, make_dir
from orchestrator.scheduler import slurm_state
from orchestrator.scheduler.base import JobOutput, JobSpec, JobState, JobStatus, QueuedJob, RankOutput

_SAFE_WORD = re.compile(r"^[A-Za-z0-9_.\-]+$")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What squeue / scontrol / sacct say of a job id the controller no longer knows (not a failure).
_UNKNOWN_JOB = "Invalid job id"
_NO_ACCOUNTING = "accounting storage is disabled"
_UNAVAILABLE_STATE = re.compile(r"drain|down|fail|maint|inval|future|unknown|power", re.IGNORECASE)
_TEMPLATES = Path(__file__).parent / "templates"
# Slurm commands are quick; a slurmctld that does not answer within this is an infrastructure fault.
CMD_TIMEOUT_S = 30.0
# What a job takes from orch's own environment (sbatch --export): names whose values are not
# secret and that a job needs to find its programs and write its files. Everything else the job
# needs is exported by name in the script's body (JobSpec.env); Slurm adds its SLURM_* variables.
JOB_ENV_ALLOW = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR")


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


def slurm_pattern(path: Path) -> str:
    """path as a literal in a Slurm filename pattern (--output): '%' doubled, so only the
    replacement symbols orch appends (%j, %t) are replaced."""
    return str(path).replace("%", "%%")


def _check_word(what: str, value: str) -> None:
    if not _SAFE_WORD.match(value) or value.startswith("-"):
        raise ConfigError(f"{what} {value!r} is not a valid Slurm name (letters, digits, _ . - only)")


def _check_env_name(key: str) -> None:
    if not _ENV_NAME.fullmatch(key):
        raise ConfigError(f"environment variable name {key!r} is not valid")


DRAIN_REASON = re.compile(r"[A-Za-z0-9 _.,:;()+=/@%-]{1,200}")


def check_drain_reason(reason: str) -> str:
    """reason when it is plain text Slurm keeps as one value (letters, digits, spaces and
    _.,:;()+=/@%-, at most 200); raises ConfigError naming the first character refused."""
    if not DRAIN_REASON.fullmatch(reason):
        bad = next((c for c in reason if not DRAIN_REASON.fullmatch(c)), "")
        raise ConfigError(
            f"drain reason {reason[:60]!r} refused"
            + (f": character {bad!r} is not allowed" if bad else ": empty or longer than 200")
        )
    return reason


def drain_reason(run_id: str, why: str) -> str:
    """'orch <run-id>: <why>', reduced to the characters a drain reason may hold (isolate's
    --drain-bad, orch health)."""
    keep = "".join(c if c.isalnum() or c in " _.,:;()+=/@%-" else " " for c in why)
    return check_drain_reason(f"orch {run_id}: {keep}"[:200].rstrip())


def check_output_path(path: Path) -> None:
    """Refuse a path Slurm would misread in an --output pattern; raises ConfigError."""
    if "\\" in str(path):
        # Slurm reads a backslash in an output path as "replace nothing": every rank's
        # rank-%t.log would be one file.
        raise ConfigError(f"path {str(path)!r}: Slurm cannot take a backslash in an output path")


def check_spec(spec: JobSpec) -> None:
    """Refuse a spec with a value that cannot go into a job script safely (raises ConfigError):
    what goes on an #SBATCH line or is a name in the body must be a Slurm word or a variable name.

    JobSpec already holds the job name and step id to the identifier pattern (models/names.py);
    every other value in a script body is quoted by the template's `sh` filter. The one check of
    every script orch renders: a job's (render) and allocation mode's driver (render_ladder)."""
    for node in spec.nodes:
        _check_word("node", node)
    if spec.partition:
        _check_word("partition", spec.partition)
    for key in [*spec.env, *spec.task_env, *spec.task_env.values()]:
        _check_env_name(key)
    for path in (spec.workdir, spec.output):
        if path is not None:
            check_output_path(path)


def task_wrapper(spec: JobSpec) -> str:
    """The bash snippet that sets spec.task_env in each task before its argv ("$@"); '' if none."""
    if not spec.task_env:
        return ""
    # A constant snippet (names only, checked by check_spec); the argv follows as "$@".
    sets = " ".join(f'{k}="${v}"' for k, v in sorted(spec.task_env.items()))
    return f'export {sets}; exec "$@"'


def rank_output(spec: JobSpec) -> str:
    """srun's --output pattern of the step's rank logs: rank-<t>.log in its workdir."""
    return f"{slurm_pattern(spec.workdir)}/rank-%t.log"


def sbatch_base(output: Path) -> list[str]:
    """The start of every sbatch command orch runs: what goes on the command line rather than on
    #SBATCH lines (a path, the environment allow-list). `output` may end in a %j pattern."""
    return [
        "sbatch",
        "--parsable",
        f"--export={','.join(JOB_ENV_ALLOW)}",
        f"--output={slurm_pattern(output.parent)}/{output.name}",
    ]


class SlurmOptions(TypedDict, total=False):
    """SlurmScheduler's settings that the allocation-mode schedulers take as they are."""

    slurm_conf: Path | None
    runner: CommandRunner | None
    max_failures: int
    failure_window_s: float
    clock: Callable[[], float]


class SlurmScheduler:
    """JobScheduler on Slurm. `slurm_conf`: the SLURM_CONF of the cluster, when not the default."""

    name = "slurm"

    def __init__(
        self,
        *,
        slurm_conf: Path | None = None,
        runner: CommandRunner | None = None,
        use_sacct: bool | None = None,
        max_failures: int = 5,
        failure_window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.env = {"SLURM_CONF": str(slurm_conf)} if slurm_conf else {}
        self.max_failures, self.failure_window_s, self._clock = max_failures, failure_window_s, clock
        self._failures: dict[str, tuple[int, float]] = {}  # command -> (failures in a row, since)
        self.runner: CommandRunner = runner or LocalRunner()
        self._use_sacct = use_sacct  # None: find out on first poll
        self._submitted_at: datetime | None = None
        self._jinja = _env()
        self._template = self._jinja.get_template("sbatch.sh.j2")

    # -- pure -----------------------------------------------------------------------------
    def render(self, spec: JobSpec) -> str:
        """The sbatch script for spec; raises ConfigError when a value cannot go into it safely."""
        check_spec(spec)
        daily_at = spec.begin.strftime("%H:%M") if spec.begin and spec.daily else ""
        return str(
            self._template.render(
                spec=spec,
                version=__version__,
                time_limit=slurm_time(spec.time_limit_s) if spec.time_limit_s else "",
                rank_output=rank_output(spec),
                task_wrapper=task_wrapper(spec),
                resubmit=self.sbatch_argv(spec) if daily_at else [],
                daily_at=daily_at,
                script=self.script_path(spec),
            )
        )

    @staticmethod
    def script_path(spec: JobSpec) -> Path:
        """Where submit writes the job script."""
        return spec.script or spec.workdir / "job.sbatch"

    @staticmethod
    def sbatch_argv(spec: JobSpec) -> list[str]:
        """The sbatch command of spec, without --begin, --dependency and the script: what goes on
        the command line rather than on #SBATCH lines (paths, the environment allow-list)."""
        argv = sbatch_base(spec.output or spec.workdir / "slurm-%j.out")
        if spec.append_output:
            argv.append("--open-mode=append")
        return [*argv, *spec.extra_args]

    # -- commands -------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> CmdResult:
        try:
            return self.runner.run(argv, timeout=CMD_TIMEOUT_S, env=self.env or None)
        except RemoteError as e:
            raise SchedulerError(str(e), hint="is slurmctld running and SLURM_CONF right?") from e

    def _checked(self, argv: list[str], failed: str) -> CmdResult:
        """Run a Slurm command that must succeed; raises SchedulerError "<failed>: <its error>"."""
        res = self._run(argv)
        if not res.ok:
            raise SchedulerError(f"{failed}: {res.brief()}")
        return res

    def submit(self, spec: JobSpec, *, after: str | None = None) -> str:
        """Write the script (script_path(spec)) and sbatch it; returns the job id.

        Raises ConfigError when spec cannot be rendered safely, SchedulerError when sbatch refuses.
        """
        script = self.script_path(spec)
        text = self.render(spec)
        if spec.script is None:
            # The script goes into the workdir, so the workdir is here; a spec that names its
            # script elsewhere has a workdir on the nodes, which its caller made there.
            make_dir(spec.workdir)
        make_dir(script.parent)
        atomic_write(script, text)
        argv = self.sbatch_argv(spec)
        if after:
            _check_word("job id", after)
            argv.append(f"--dependency=afterany:{after}")
        if spec.begin:
            argv.append(f"--begin={spec.begin.strftime('%Y-%m-%dT%H:%M:%S')}")
        argv.append(str(script))
        return self._sbatch(argv, f"step {spec.step_id}")

    def _sbatch(self, argv: list[str], what: str) -> str:
        """Run the sbatch command argv (sbatch_base first); the job id it printed. Raises
        SchedulerError when sbatch refuses it."""
        if self._submitted_at is None:
            self._submitted_at = datetime.now()
        res = self._checked(argv, f"sbatch refused {what}")
        job_id = res.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise SchedulerError(f"sbatch printed no job id for {what}: {res.stdout!r}")
        return job_id

    def poll(self, job_ids: list[str]) -> dict[str, JobState]:
        """State of each job: sacct when accounting works, else squeue, then scontrol.

        A failing sacct, squeue or scontrol (slurmctld or slurmdbd restarting, a timeout) is
        retried at the next poll, as ReFrame does, with the other commands as fallbacks meanwhile;
        a job id the controller no longer knows is not a failure. Raises SchedulerError once one
        command has failed `max_failures` polls in a row over at least `failure_window_s`.
        """
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

    def _query(
        self, what: str, argv: list[str], benign: tuple[str, ...] = (_UNKNOWN_JOB,), *, hint: str = ""
    ) -> CmdResult | None:
        """Run a polling command; None when it failed (counted, see poll), else its result, which
        may still be a non-zero exit whose stderr says one of `benign` (e.g. a job id the
        controller no longer knows). `hint`: what the SchedulerError says to do, once raised."""
        try:
            res = self._run(argv)
        except SchedulerError as e:
            self._failed(what, str(e), hint)
            return None
        if res.ok or any(b.lower() in res.stderr.lower() for b in benign):
            self._failures.pop(what, None)
            return res
        self._failed(what, res.brief(), hint)
        return None

    def _failed(self, what: str, why: str, hint: str = "") -> None:
        count, since = self._failures.get(what, (0, self._clock()))
        count += 1
        self._failures[what] = (count, since)
        waited = self._clock() - since
        if count >= self.max_failures and waited >= self.failure_window_s:
            raise SchedulerError(
                f"{what} failed {count} times in a row over {waited:.0f} s: {why}",
                hint=hint or "is slurmctld (and slurmdbd, for sacct) running and SLURM_CONF right?",
            )

    def _poll_sacct(self, job_ids: list[str]) -> dict[str, JobState]:
        argv = ["sacct", *slurm_state.SACCT_ARGS, "-j", ",".join(job_ids)]
        if self._submitted_at is not None:
            argv += ["-S", self._submitted_at.strftime("%Y-%m-%dT%H:%M:%S")]
        if self._use_sacct is None:
            # First use: a sacct that fails now means no accounting here; squeue/scontrol serve.
            res = self._run(argv)
            if not res.ok:
                self._use_sacct = False
                return {}
        else:
            if (found := self._query("sacct", argv, (_UNKNOWN_JOB, _NO_ACCOUNTING))) is None:
                return {}
            res = found
            if not res.ok and _NO_ACCOUNTING in res.stderr.lower():
                self._use_sacct = False
                return {}
        self._use_sacct = True
        return {k: v for k, v in slurm_state.parse_sacct(res.stdout).items() if k in job_ids}

    def _poll_squeue(self, job_ids: list[str]) -> dict[str, JobState]:
        res = self._query("squeue", ["squeue", *slurm_state.SQUEUE_ARGS, "-j", ",".join(job_ids)])
        if res is None or not res.ok:
            # squeue exits non-zero for job ids it no longer knows; scontrol is asked next.
            return {}
        return {k: v for k, v in slurm_state.parse_squeue(res.stdout).items() if k in job_ids}

    def _poll_scontrol(self, job_id: str) -> JobState:
        res = self._query("scontrol", ["scontrol", "show", "job", job_id])
        if res is None or not res.ok:
            why = res.brief() if res is not None else "scontrol failed"
            return JobState(job_id=job_id, status=JobStatus.UNKNOWN, raw_state="UNKNOWN", reason=why)
        found = slurm_state.parse_scontrol(res.stdout)
        if job_id in found:
            return found[job_id]
        return JobState(job_id=job_id, status=JobStatus.UNKNOWN, raw_state="UNKNOWN")

    def cancel(self, job_ids: list[str]) -> None:
        """scancel the jobs; ids Slurm no longer knows are fine. An id that is not one Slurm word
        (a tampered journal read by orphan cleanup) raises ConfigError: scancel would read it as an
        option."""
        for job_id in job_ids:
            _check_word("job id", job_id)
        if job_ids:
            self._run(["scancel", *job_ids])

    def wait_gone(self, job_ids: list[str], timeout: float) -> list[str]:
        """Wait until squeue no longer lists the jobs (a cancelled job stays COMPLETING while
        slurmd ends its processes; sacct already says CANCELLED); the ids still listed when
        ``timeout`` ran out. A failing squeue counts as gone (poll's fallbacks report it)."""
        for job_id in job_ids:
            _check_word("job id", job_id)
        deadline = time.monotonic() + timeout
        left = list(job_ids)
        while left:
            res = self._run(["squeue", "-h", "-o", "%i", "-j", ",".join(left)])
            left = [j for j in res.stdout.split() if j in left] if res.ok else []
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        return left

    def show_nodes(self) -> str:
        """`scontrol show node -o`: one line per node, as Slurm names them ('' when it fails)."""
        res = self._run(["scontrol", "show", "node", "-o"])
        return res.stdout if res.ok else ""

    def queue_state(self, job_id: str) -> str:
        """squeue's state word for the job now ('' once it left the queue, or squeue fails)."""
        _check_word("job id", job_id)
        res = self._run(["squeue", "-h", "-j", job_id, "-o", "%T"])
        return res.stdout.strip() if res.ok else ""

    def requeue(self, job_id: str) -> None:
        """scontrol requeue (the job must have been submitted with requeue); raises SchedulerError."""
        _check_word("job id", job_id)
        self._checked(["scontrol", "requeue", job_id], f"cannot requeue job {job_id}")

    def start_now(self, job_id: str) -> None:
        """Lift a pending job's BeginTime (Slurm holds a requeued job about 120 s); best effort."""
        _check_word("job id", job_id)
        self._run(["scontrol", "update", f"jobid={job_id}", "starttime=now"])

    def queued_named(self, prefix: str) -> dict[str, str]:
        """'job ID STATE (begins START)' of every queued job whose name starts with prefix, by name.

        Raises SchedulerError when squeue fails: "not queued" would then be a guess."""
        _check_word("job name prefix", prefix)
        res = self._checked(["squeue", "-h", "-o", "%j|%i|%T|%S"], "squeue failed")
        out: dict[str, str] = {}
        for line in res.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 4 and parts[0].startswith(prefix):
                out[parts[0]] = f"job {parts[1]} {parts[2]} (begins {parts[3]})"
        return out

    def my_queued_jobs(self) -> list[QueuedJob]:
        """The current user's jobs that Slurm still holds (squeue --user=<uid>), each with the user
        and name squeue reports (explicit -o format). Raises SchedulerError when squeue fails."""
        fmt = slurm_state.SQUEUE_OWNER_FORMAT
        res = self._checked(["squeue", "--noheader", f"--user={os.getuid()}", "-o", fmt], "squeue failed")
        return slurm_state.parse_squeue_owners(res.stdout)

    def cancel_named(self, name: str) -> None:
        """scancel every job of this name; raises SchedulerError when scancel fails."""
        _check_word("job name", name)
        self._checked(["scancel", "--name", name], f"cannot cancel jobs named {name}")

    def scrontab(self) -> str:
        """The user's scrontab ('' when there is none: `scrontab -l` then says so and exits 1)."""
        res = self._run(["scrontab", "-l"])
        return res.stdout if res.ok else ""

    def set_scrontab(self, path: Path | None) -> None:
        """Install the scrontab file at path, or remove the user's scrontab (None); raises
        SchedulerError when scrontab refuses it."""
        self._checked(["scrontab", str(path)] if path is not None else ["scrontab", "-r"], "scrontab failed")

    def drain(self, nodes: list[str], reason: str) -> None:
        """`scontrol update nodename=A,B state=drain reason=…` (one argv item each, no shell).
        Raises ConfigError when a node is not one word or the reason holds a character outside
        DRAIN_REASON (quotes, $, backticks, newlines), SchedulerError when scontrol refuses."""
        self._set_state(nodes, "drain", check_drain_reason(reason))

    def resume_nodes(self, nodes: list[str]) -> None:
        """`scontrol update nodename=… state=resume`: back to service; raises like drain."""
        self._set_state(nodes, "resume", None)

    def _set_state(self, nodes: list[str], state: str, reason: str | None) -> None:
        for node in nodes:
            _check_word("node", node)
        if not nodes:
            return
        argv = ["scontrol", "update", f"nodename={','.join(nodes)}", f"state={state}"]
        if reason is not None:
            argv.append(f"reason={reason}")
        self._checked(argv, f"cannot set {', '.join(nodes)} to {state}")

    def node_state(self, node: str) -> tuple[str, str]:
        """(state, reason) of one node from `scontrol show node -o`; raises SchedulerError."""
        state, reason, _ = self.node_status(node)
        return state, reason

    def node_status(self, node: str) -> tuple[str, str, datetime | None]:
        """(state, reason, when the reason was set) of one node from `scontrol show node -o` (the
        reason's `[user@YYYY-MM-DDTHH:MM:SS]`, the controller's local time; None when absent);
        raises SchedulerError."""
        _check_word("node", node)
        res = self._checked(["scontrol", "show", "node", "-o", node], f"scontrol show node {node} failed")
        state = re.search(r"\bState=(\S+)", res.stdout)
        reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?(?= \w+=|$)", res.stdout.strip())
        since = re.search(r"\bReason=.*? \[[^\]@]*@(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]", res.stdout)
        when = datetime.fromisoformat(since.group(1)) if since else None
        return (state.group(1) if state else "", reason.group(1) if reason else "", when)

    def node_names(self) -> list[str]:
        """Every node Slurm knows (`sinfo --Node`), once each, in sinfo's order; raises SchedulerError."""
        res = self._checked(["sinfo", "--noheader", "--Node", "--format=%N"], "sinfo failed")
        return list(dict.fromkeys(ln.strip() for ln in res.stdout.splitlines() if ln.strip()))

    def unavailable_nodes(self, nodes: list[str]) -> dict[str, str]:
        """Nodes sinfo shows drained, down, failed, in maintenance or not responding (state ends in *)."""
        if not nodes:
            return {}
        for node in nodes:
            _check_word("node", node)
        argv = ["sinfo", "--noheader", "--Node", "--format=%N|%T", f"--nodes={','.join(nodes)}"]
        res = self._checked(argv, "sinfo failed")
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

"""Nightly runs under Slurm: `orch cron install/list/remove`.

The entry runs `orch scale-test` with the given inventory and plan, into a run directory root and
results store, so every night lands in `orch history`. Two ways to have Slurm run it:

- scrontab (Slurm's cron; slurm.conf ScronParameters=enable): a block between
  `# BEGIN orch-cron NAME` and `# END orch-cron NAME` in the user's scrontab, edited through
  `scrontab -l` / `scrontab FILE` so other entries are kept.
- sbatch-begin, where no scrontab binary exists (Debian 12's slurm-client 22.05 does not ship
  one): a batch job held with `--begin` to the next HH:MM which, when it starts, first submits
  itself again for the next day and then runs the plan. `orch cron list` reads squeue, and
  `orch cron remove` cancels it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.models.names import Name, is_name
from orchestrator.paths import under
from orchestrator.remote.base import CommandRunner
from orchestrator.safefs import make_dir, untrusted_folder
from orchestrator.scheduler.base import JobSpec, check_sbatch_options
from orchestrator.scheduler.slurm import SlurmScheduler
from orchestrator.store.location import parse_store
from orchestrator.store.rundir import atomic_write

CronMode = Literal["scrontab", "sbatch-begin"]
# what an entry runs: the plan's scale-test, or `orch health` on every node of the inventory
CronKind = Literal["scale-test", "health"]
CRON_KINDS: tuple[CronKind, ...] = ("scale-test", "health")
# Paths that may go on a #SCRON line as they are (read by scrontab, not by a shell).
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_./+-]+")


class CronEntry(StrictModel):
    """One nightly schedule."""

    # A refused store URL carries a password: keep it out of the error's text.
    model_config = ConfigDict(hide_input_in_errors=True)

    name: Name
    kind: CronKind = Field(
        default="scale-test",
        description="scale-test: the plan; health: `orch health` on the inventory's nodes (plan unused)",
    )
    at: str = Field(description="HH:MM, local time of the Slurm controller")
    inventory: Path
    plan: str
    out_dir: Path
    store: str = Field(description="results store: absolute path, or a postgresql:// URL without password")
    orch: str = Field(description="absolute path of the orch executable")
    workdir: Path
    slurm_conf: Path | None = None
    extra_args: list[str] = Field(default_factory=list, description="more scale-test flags")
    job_args: list[str] = Field(
        default_factory=list,
        description="more sbatch options of the entry's own job, e.g. --partition=service: it holds a CPU "
        "for the whole run, and steps are --exclusive, so it must not sit on a node the plan uses",
    )
    time_limit_min: int | None = Field(
        default=None, ge=1, description="Slurm --time of the entry's job: the plan's run timeout + margin"
    )
    pythonpath: str | None = Field(
        default=None, description="PYTHONPATH orch was installed with: the job runs the same orch"
    )

    @field_validator("store", mode="before")
    @classmethod
    def _store(cls, v: object) -> object:
        if isinstance(v, Path):
            return str(v)
        try:
            if isinstance(v, str):
                parse_store(v)  # refuses a URL with a password: this one is written into scripts
        except ConfigError as e:
            raise ValueError(f"{e.message} ({e.hint})" if e.hint else e.message) from e
        return v

    @field_validator("job_args")
    @classmethod
    def _job_args(cls, v: list[str]) -> list[str]:
        return check_sbatch_options(v)

    @field_validator("at")
    @classmethod
    def _at(cls, v: str) -> str:
        m = re.match(r"^(\d{1,2}):(\d{2})$", v)
        if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
            raise ValueError(f"--at {v!r}: expected HH:MM (00:00..23:59)")
        return f"{int(m.group(1)):02d}:{m.group(2)}"

    @property
    def job_name(self) -> str:
        return f"orchcron-{self.name}"

    def command(self) -> list[str]:
        if self.kind == "health":
            return [self.orch, "health", "--inventory", str(self.inventory), *self.extra_args]
        return [
            self.orch,
            "scale-test",
            "--inventory",
            str(self.inventory),
            "--plan",
            self.plan,
            "--out",
            str(self.out_dir),
            *self.extra_args,
        ]

    def env(self) -> dict[str, str]:
        env = {"ORCH_STORE": self.store}
        if self.slurm_conf:
            env["SLURM_CONF"] = str(self.slurm_conf)
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath
        return env

    def log_path(self) -> Path:
        return self.out_dir / "cron" / f"{self.name}.log"


def _exports(entry: CronEntry) -> str:
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(entry.env().items()))


def _scron_output(entry: CronEntry) -> list[str]:
    """#SCRON --output=PATH when PATH is plain: #SCRON lines are read by scrontab, not by a shell,
    so nothing quotes them; any other path leaves Slurm's own output where Slurm puts it (the
    command's log still goes to log_path, through the quoted cron line)."""
    path = str(entry.out_dir / "cron" / f"{entry.name}-%j.out")
    return [f"#SCRON --output={path}"] if _PLAIN_PATH.fullmatch(path) else []


def render_scrontab_block(entry: CronEntry) -> str:
    """The entry's lines in a scrontab file (a crontab line plus #SCRON options).

    Raises ConfigError when the cron line would hold a '%' (cron reads it as a newline) or a
    character that is not printable."""
    hh, mm = entry.at.split(":")
    line = (
        f"cd {shlex.quote(str(entry.workdir))} && {_exports(entry)} {shlex.join(entry.command())} "
        f">> {shlex.quote(str(entry.log_path()))} 2>&1"
    )
    if "%" in line or not line.isprintable():
        raise ConfigError(f"cron line {line[:200]!r}: '%' and control characters cannot go into a cron line")
    return (
        "\n".join(
            [
                f"# BEGIN orch-cron {entry.name}",
                f"# orch-cron-entry {entry.model_dump_json()}",
                f"#SCRON --job-name={entry.job_name}",
                "#SCRON --ntasks=1",
                "#SCRON --cpus-per-task=1",
                *(f"#SCRON {a}" for a in time_args(entry)),
                *_scron_output(entry),
                f"{int(mm)} {int(hh)} * * * {line}",
                f"# END orch-cron {entry.name}",
            ]
        )
        + "\n"
    )


def strip_block(text: str, name: str) -> str:
    """text without the orch-cron block called name."""
    out, skip = [], False
    for line in text.splitlines():
        if line.strip() == f"# BEGIN orch-cron {name}":
            skip = True
            continue
        if skip and line.strip() == f"# END orch-cron {name}":
            skip = False
            continue
        if not skip:
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def entries_in(text: str) -> list[CronEntry]:
    """The orch entries of a scrontab (or of sbatch scripts) text."""
    found = []
    for line in text.splitlines():
        if line.startswith("# orch-cron-entry "):
            found.append(CronEntry.model_validate_json(line.removeprefix("# orch-cron-entry ")))
    return found


def next_occurrence(at: str, now: datetime) -> datetime:
    hh, mm = (int(x) for x in at.split(":"))
    t = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    return t if t > now else t + timedelta(days=1)


def time_args(entry: CronEntry) -> list[str]:
    """sbatch's --time for the entry (when it has a limit) and its extra job options."""
    return ([f"--time={entry.time_limit_min}"] if entry.time_limit_min else []) + entry.job_args


def time_limit_min(run_timeout_s: int | None, step_timeout_s: int, n_steps: int, margin_s: int = 600) -> int:
    """Minutes for the job: the plan's run timeout (else one step timeout per step) plus a margin
    for provisioning, fingerprinting and reports; rounded up."""
    run_s = run_timeout_s if run_timeout_s is not None else step_timeout_s * max(n_steps, 1)
    return -(-(run_s + margin_s) // 60)


def script_path(entry: CronEntry) -> Path:
    """<out>/cron/<name>.sbatch, absolute: the job resubmits it from its own working directory."""
    return under(entry.out_dir.resolve(), "cron", f"{entry.name}.sbatch", what="cron script")


def cron_job_spec(entry: CronEntry, now: datetime | None = None) -> JobSpec:
    """The self-resubmitting job of sbatch-begin mode: held to the next HH:MM; when it starts, it
    submits itself again for tomorrow (the same sbatch command), then runs the plan."""
    return JobSpec(
        name=entry.job_name,
        step_id="cron",
        nodes=[],
        nnodes=1,
        ranks_per_node=1,
        cpus_per_task=1,
        argv=entry.command(),
        env=entry.env(),
        workdir=entry.workdir,
        time_limit_s=entry.time_limit_min * 60 if entry.time_limit_min else None,
        launch="batch",
        exclusive=False,
        # Never requeued by Slurm: a requeue after the node stopped answering re-ran the plan and,
        # on the lab, met the old job still on the node ("Duplicate jobid", node drained).
        requeue=False,
        begin=next_occurrence(entry.at, now or datetime.now()),
        daily=True,
        output=entry.out_dir.resolve() / "cron" / f"{entry.name}-%j.out",
        log=entry.log_path(),
        script=script_path(entry),
        # ASCII JSON on one line: a comment of the script, whatever the paths hold.
        notes=["orch-cron-entry " + json.dumps(entry.model_dump(mode="json"), ensure_ascii=True)],
        extra_args=entry.job_args,
    )


def cron_sbatch_argv(entry: CronEntry) -> list[str]:
    """The sbatch command of sbatch-begin mode, without --begin and the script: the same for the
    first submission (CronManager.install) and the daily resubmission (in the job's script)."""
    return SlurmScheduler.sbatch_argv(cron_job_spec(entry))


class CronManager:
    """Install, list and remove nightly entries through a CommandRunner (swappable in tests)."""

    def __init__(self, runner: CommandRunner, slurm_conf: Path | None, mode: CronMode | None = None) -> None:
        self.runner = runner
        self.env = {"SLURM_CONF": str(slurm_conf)} if slurm_conf else {}
        self.sched = SlurmScheduler(slurm_conf=slurm_conf, runner=runner)
        self.mode: CronMode = mode or ("scrontab" if shutil.which("scrontab") else "sbatch-begin")

    def _crontab(self) -> str:
        return self.sched.scrontab()

    def install(self, entry: CronEntry, now: datetime | None = None) -> str:
        """Install (or replace) entry; returns a one-line description. Raises SchedulerError."""
        cron = make_dir(entry.out_dir / "cron")
        # A job (root's, often) resubmits cron/NAME.sbatch every day: what others may write is refused.
        for folder in (entry.out_dir, cron):
            if (why := untrusted_folder(folder)) is not None:
                raise ConfigError(
                    f"cron folder {folder} {why}", hint=f"chmod go-w {folder}, or choose another --out"
                )
        if self.mode == "scrontab":
            text = strip_block(self._crontab(), entry.name) + render_scrontab_block(entry)
            tmp = entry.out_dir / "cron" / f".{entry.name}.scrontab"
            atomic_write(tmp, text)
            self.sched.set_scrontab(tmp)
            return f"scrontab entry {entry.name}: {entry.at} daily"
        self.remove(entry.name, entry.out_dir, missing_ok=True)
        spec = cron_job_spec(entry, now)
        job = self.sched.submit(spec)
        begin = spec.begin.strftime("%Y-%m-%dT%H:%M:%S") if spec.begin else "now"
        return f"Slurm job {job} ({entry.job_name}) begins {begin}, then resubmits itself daily"

    def list(self, out_dir: Path) -> list[tuple[CronEntry, str]]:
        """(entry, Slurm state) of every orch entry.

        Raises:
            SchedulerError: squeue fails (Slurm unreachable), so no state can be told.
        """
        if self.mode == "scrontab":
            text = self._crontab()
            queued = self._squeue()
            return [(e, queued.get(e.job_name, "not queued")) for e in entries_in(text)]
        queued = self._squeue()
        out = []
        for script in sorted((out_dir / "cron").glob("*.sbatch")):
            for e in entries_in(script.read_text(encoding="utf-8")):
                out.append((e, queued.get(e.job_name, "not queued")))
        return out

    def _squeue(self) -> dict[str, str]:
        return self.sched.queued_named("orchcron-")

    def remove(self, name: str, out_dir: Path, *, missing_ok: bool = False) -> bool:
        """Remove the entry; returns whether there was one. Raises ConfigError if none (unless missing_ok)."""
        if not is_name(name):
            raise ConfigError(f"{name!r} is not a cron entry name", hint="orch cron list")
        found = False
        if self.mode == "scrontab":
            text = self._crontab()
            if f"# BEGIN orch-cron {name}" in text:
                found = True
                rest = strip_block(text, name)
                tmp = out_dir / "cron" / f".{name}.scrontab"
                atomic_write(tmp, rest)
                self.sched.set_scrontab(tmp if rest.strip() else None)
        else:
            script = under(out_dir, "cron", f"{name}.sbatch", what="cron script")
            queued = self._squeue()
            if f"orchcron-{name}" in queued:
                found = True
                self.sched.cancel_named(f"orchcron-{name}")
            if script.exists():
                found = True
                script.unlink()
        if not found and not missing_ok:
            raise ConfigError(f"no orch cron entry named {name!r}", hint="orch cron list")
        return found

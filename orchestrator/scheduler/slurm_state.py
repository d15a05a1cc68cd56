"""Parsers for Slurm's own words about jobs: sacct, squeue and `scontrol show job`.

The Slurm backend must call the tools with the formats exported here, so that the parse and the
call never drift apart. JobName is the last sacct field: with --parsable2 a '|' inside a name
would otherwise shift every field after it; counting the fixed fields from the left and joining the
rest keeps the name whole.
"""

from __future__ import annotations

import re

from orchestrator.errors import ParseError
from orchestrator.scheduler.base import JobState, JobStatus, QueuedJob

SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "State",
    "ExitCode",
    "Elapsed",
    "NodeList",
    "Reason",
    "Submit",
    "Start",
    "End",
    "JobName",
)
SACCT_FORMAT = ",".join(SACCT_FIELDS)
SACCT_ARGS: tuple[str, ...] = ("--parsable2", "--noheader", "-o", SACCT_FORMAT)

# %N is last for the same reason JobName is last in sacct: node lists never hold '|', but
# keeping one free-text field last is the rule. %r (reason) can hold spaces, never '|'.
SQUEUE_FORMAT = "%i|%T|%r|%M|%N"
SQUEUE_FIELDS: tuple[str, ...] = ("JobID", "State", "Reason", "Elapsed", "NodeList")
SQUEUE_ARGS: tuple[str, ...] = ("--noheader", "-o", SQUEUE_FORMAT)
# Who owns a queued job and what it is called (orch runs cleanup): the name last, it is free text.
SQUEUE_OWNER_FORMAT = "%i|%u|%T|%j"

_STATUS: dict[str, JobStatus] = {
    "COMPLETED": JobStatus.COMPLETED,
    "FAILED": JobStatus.FAILED,
    "TIMEOUT": JobStatus.FAILED,
    "OUT_OF_MEMORY": JobStatus.FAILED,
    "DEADLINE": JobStatus.FAILED,
    "CANCELLED": JobStatus.CANCELLED,
    "NODE_FAIL": JobStatus.INFRA,
    "BOOT_FAIL": JobStatus.INFRA,
    "PREEMPTED": JobStatus.INFRA,
    "PENDING": JobStatus.PENDING,
    "REQUEUED": JobStatus.PENDING,
    "REQUEUE_HOLD": JobStatus.PENDING,
    "REQUEUE_FED": JobStatus.PENDING,
    "RESIZING": JobStatus.PENDING,
    "CONFIGURING": JobStatus.PENDING,
    "RUNNING": JobStatus.RUNNING,
    "COMPLETING": JobStatus.RUNNING,
    "SUSPENDED": JobStatus.RUNNING,
    "STAGE_OUT": JobStatus.RUNNING,
    "SIGNALING": JobStatus.RUNNING,
    "STOPPED": JobStatus.RUNNING,
    "SPECIAL_EXIT": JobStatus.FAILED,
    "REVOKED": JobStatus.CANCELLED,
}
# squeue --long and sacct abbreviate in places; map the short forms too.
_SHORT = {
    "CD": "COMPLETED", "F": "FAILED", "TO": "TIMEOUT", "OOM": "OUT_OF_MEMORY", "DL": "DEADLINE",
    "CA": "CANCELLED", "NF": "NODE_FAIL", "BF": "BOOT_FAIL", "PR": "PREEMPTED", "PD": "PENDING",
    "RQ": "REQUEUED", "RH": "REQUEUE_HOLD", "RS": "RESIZING", "CF": "CONFIGURING", "R": "RUNNING",
    "CG": "COMPLETING", "S": "SUSPENDED", "SO": "STAGE_OUT", "SI": "SIGNALING", "ST": "STOPPED",
    "SE": "SPECIAL_EXIT", "RV": "REVOKED",
}  # fmt: skip
_ELAPSED_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")
_STEP_RE = re.compile(r"^(\d+(?:_\d+|_\[[^\]]*\])?(?:\+\d+)?)\.(\S+)$")


def classify(raw_state: str) -> JobStatus:
    """orch's status for a Slurm state word ("CANCELLED by 0", "PD", "NODE_FAIL" ...)."""
    words = raw_state.strip().upper().split()
    if not words:
        return JobStatus.UNKNOWN
    word = words[0].rstrip("+")
    word = _SHORT.get(word, word)
    return _STATUS.get(word, JobStatus.UNKNOWN)


def parse_elapsed(text: str) -> float | None:
    """Seconds from Slurm's `[D-][HH:]MM:SS`; None for empty, INVALID, UNLIMITED and the like."""
    m = _ELAPSED_RE.match(text.strip())
    if not m:
        return None
    days, hours, minutes, seconds = m.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """(exit code, signal) from sacct's `a:b`; (None, None) when absent."""
    code, _, sig = text.strip().partition(":")
    exit_code = int(code) if code.isdigit() else None
    signal = int(sig) if sig.isdigit() else None
    return exit_code, signal


def _none(value: str) -> str | None:
    value = value.strip()
    return None if value in ("", "None", "(null)", "None assigned", "Unknown") else value


def _state(job_id: str, raw_state: str, **extra: str | None) -> JobState:
    exit_code, signal = parse_exit_code(extra.pop("exit", None) or "")
    elapsed = parse_elapsed(extra.pop("elapsed", None) or "")
    return JobState(
        job_id=job_id,
        status=classify(raw_state),
        raw_state=raw_state.strip(),
        exit_code=exit_code,
        signal=signal,
        elapsed_s=elapsed,
        reason=_none(extra.get("reason") or ""),
        nodelist=_none(extra.get("nodelist") or ""),
        name=_none(extra.get("name") or ""),
    )


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("# source:")]


_SACCT_NAMES = {f.lower(): f for f in (*SACCT_FIELDS, "JobIDRaw")}
_EXIT_RE = re.compile(r"^\d+:\d+$")
_JOBID_RE = re.compile(r"^\d+(?:[_+.]\S*)?$")


def _sacct_header(line: str) -> tuple[str, ...] | None:
    """The field names of a sacct header line (any order, any case), or None if it is a data line."""
    cells = [c.strip() for c in line.split("|")]
    if not all(re.fullmatch(r"[A-Za-z]+", c) for c in cells) or not any(
        c.lower() in _SACCT_NAMES for c in cells
    ):
        return None
    names = tuple(_SACCT_NAMES.get(c.lower(), c) for c in cells)
    if "JobID" not in names and "JobIDRaw" in names:
        names = tuple("JobID" if n == "JobIDRaw" else n for n in names)
    return names


def _check_default_order(line: str, row: dict[str, str], raw: str) -> None:
    """Refuse a headerless line whose fields do not fit SACCT_FIELDS (another -o order)."""
    problems = []
    if not _JOBID_RE.match(row["JobID"].strip()):
        problems.append(f"JobID {row['JobID']!r} is not a job id")
    if classify(row["State"]) is JobStatus.UNKNOWN:
        problems.append(f"State {row['State']!r} is not a Slurm state")
    exit_code, elapsed = row.get("ExitCode", "").strip(), row.get("Elapsed", "").strip()
    if exit_code and not _EXIT_RE.match(exit_code):
        problems.append(f"ExitCode {exit_code!r} is not N:M")
    if elapsed and parse_elapsed(elapsed) is None:
        problems.append(f"Elapsed {elapsed!r} is not a duration")
    if problems:
        raise ParseError(
            f"sacct output without a header, and its fields are not in orch's order "
            f"({'|'.join(SACCT_FIELDS)}): {'; '.join(problems)} in {line[:80]!r}",
            raw=raw,
            hint=f"print the header (drop -n/--noheader) or run sacct -P -n -o {SACCT_FORMAT}",
        )


def parse_sacct(
    text: str, fields: tuple[str, ...] = SACCT_FIELDS, *, check_order: bool = False, steps: bool = False
) -> dict[str, JobState]:
    """Job states from `sacct --parsable2` output in `fields` order (a header line is allowed).

    Job steps (123.batch, 123.0, 123.extern) are folded into their job: the job's own line gives
    its fields, a step only fills in for a job whose own line is missing, and every step's state is
    kept in `steps`. A job whose own record says COMPLETED while one of its steps did not complete
    takes the worst state among its steps (`step_verdict`; the rule is in its docstring). The
    header, if present, decides the field order, whatever order and case it has. Without a
    header and with `check_order`, every line must fit `fields` (a job id, a Slurm state, N:M, a
    duration where those fields are), so that output of another `-o` order is refused rather than
    read with fields in the wrong places.
    With `steps`, job steps are not folded: each line is kept under its own id (123, 123.batch,
    123.0), as the allocation mode needs to follow the ladder's steps inside one job.
    Raises ParseError when a line has too few fields, or no JobID/State column exists.
    """
    lines = _lines(text)
    header = _sacct_header(lines[0]) if lines else None
    if header is not None:
        fields = header
        lines = lines[1:]
        check_order = False
    missing = [f for f in ("JobID", "State") if f not in fields]
    if missing:
        raise ParseError(f"sacct output without {' and '.join(missing)} field(s)", raw=text,
                         hint="print JobID and State (sacct -P -o JobID,State,...)")  # fmt: skip
    states: dict[str, JobState] = {}
    from_step: set[str] = set()
    step_states: dict[str, dict[str, str]] = {}
    for line in lines:
        parts = line.split("|")
        if len(parts) < len(fields):
            raise ParseError(
                f"sacct line has {len(parts)} fields, expected {len(fields)}: {line!r}", raw=text
            )
        if len(parts) > len(fields):
            if "JobName" not in fields:
                raise ParseError(f"sacct line has too many fields: {line!r}", raw=text)
            # a '|' inside the job name: the fields before and after it are fixed
            k = fields.index("JobName")
            tail = len(fields) - k - 1
            name = "|".join(parts[k : len(parts) - tail])
            parts = [*parts[:k], name, *parts[len(parts) - tail :]]
        row = dict(zip(fields, parts, strict=True))
        if check_order:
            _check_default_order(line, row, text)
        job_id = row["JobID"].strip()
        m = _STEP_RE.match(job_id)
        step = m is not None and not steps
        if m and not steps:
            job_id = m.group(1)
        if not job_id or not row["State"].strip():
            raise ParseError(f"sacct line without JobID or State: {line!r}", raw=text)
        if step and m is not None:
            step_states.setdefault(job_id, {})[m.group(2)] = row["State"].strip()
        if step and job_id in states and job_id not in from_step:
            continue
        states[job_id] = _state(
            job_id,
            row["State"],
            exit=row.get("ExitCode"),
            elapsed=row.get("Elapsed"),
            reason=row.get("Reason"),
            nodelist=row.get("NodeList"),
            name=row.get("JobName"),
        )
        if step:
            from_step.add(job_id)
        else:
            from_step.discard(job_id)
    for job_id, steps_of in step_states.items():
        if job_id in states:
            states[job_id] = step_verdict(states[job_id], steps_of)
    return states


# worst first: a job that ran on a node that failed says more than one whose program failed, which
# says more than one that was cancelled
_SEVERITY = (JobStatus.INFRA, JobStatus.FAILED, JobStatus.CANCELLED)
# Slurm's own step for the processes it adopts into the job (PrologFlags=contain): Slurm ends it
# when the job ends, so its state says how the job ended, not how its work did
_IGNORED_STEPS = ("extern",)


def step_verdict(job: JobState, steps: dict[str, str]) -> JobState:
    """The job with its steps' states, its status the worst among them where its record said COMPLETED.

    Slurm records a batch job COMPLETED when its batch script exits 0, even when an `srun` step
    in it was CANCELLED, FAILED, NODE_FAIL or OUT_OF_MEMORY (a script that does not pass srun's
    exit on; published in martius-lab/cluster_utils#87: `239023 COMPLETED`, `239023.0 CANCELLED
    0:10`). Such a job did not complete: it takes the worst terminal state among its steps,
    INFRA before FAILED before CANCELLED, and `decided_by` names that step. The `.batch` step
    (the script) and `.interactive` (salloc) count like any srun step; `.extern` does not (Slurm
    ends it itself with the job). A step still running or pending under a COMPLETED job is
    accounting catching up and changes nothing. A job whose own record says anything other than
    COMPLETED keeps it: CANCELLED (orch's own scancel of a serving engine, say), TIMEOUT or
    NODE_FAIL name the cause, and the steps that ended with the job are its consequence.
    """
    counted = {k: v for k, v in steps.items() if k not in _IGNORED_STEPS}
    updated = job.model_copy(update={"steps": dict(steps)})
    if job.status is not JobStatus.COMPLETED:
        return updated
    for worst in _SEVERITY:
        for step_id, raw in counted.items():
            if classify(raw) is worst:
                return updated.model_copy(update={"status": worst, "decided_by": step_id})
    return updated


def parse_squeue(text: str, fields: tuple[str, ...] = SQUEUE_FIELDS) -> dict[str, JobState]:
    """Job states from `squeue --noheader -o SQUEUE_FORMAT` output (a header line is allowed).

    Raises ParseError on a line with the wrong number of fields.
    """
    lines = _lines(text)
    if lines and lines[0].split("|", 1)[0].strip() in ("JOBID", "JobID"):
        lines = lines[1:]
    states: dict[str, JobState] = {}
    for line in lines:
        parts = line.split("|")
        if len(parts) != len(fields):
            raise ParseError(
                f"squeue line has {len(parts)} fields, expected {len(fields)}: {line!r}", raw=text
            )
        row = dict(zip(fields, parts, strict=True))
        job_id = row["JobID"].strip()
        if not job_id:
            raise ParseError(f"squeue line without a job id: {line!r}", raw=text)
        states[job_id] = _state(
            job_id, row["State"], elapsed=row.get("Elapsed"), reason=row.get("Reason"),
            nodelist=row.get("NodeList"),
        )  # fmt: skip
    return states


_KV_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/]*)=")


def parse_scontrol_pairs(text: str) -> dict[str, str]:
    """The key=value pairs of one `scontrol show job` record (values may hold spaces)."""
    pairs: dict[str, str] = {}
    for line in _lines(text):
        matches = list(_KV_RE.finditer(line))
        for k, m in enumerate(matches):
            end = matches[k + 1].start() if k + 1 < len(matches) else len(line)
            pairs.setdefault(m.group(1), line[m.end() : end].strip())
    return pairs


def parse_scontrol(text: str) -> dict[str, JobState]:
    """Job states from `scontrol show job [ID]` output (one or more records, blank-line separated).

    Raises ParseError when a record has no JobId or JobState.
    """
    states: dict[str, JobState] = {}
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("# source:"))
    for record in re.split(r"\n\s*\n", body):
        if not record.strip():
            continue
        pairs = parse_scontrol_pairs(record)
        if not pairs.get("JobId", "").split() or not pairs.get("JobState", "").split():
            raise ParseError("scontrol record without JobId and JobState", raw=text)
        job_id = pairs["JobId"].split()[0]
        states[job_id] = _state(
            job_id,
            pairs["JobState"].split()[0],
            exit=pairs.get("ExitCode"),
            elapsed=pairs.get("RunTime"),
            reason=pairs.get("Reason"),
            nodelist=pairs.get("NodeList"),
        )
    if not states:
        raise ParseError("no job record in scontrol output", raw=text)
    return states


def parse_squeue_owners(text: str) -> list[QueuedJob]:
    """Jobs of `squeue --noheader -o SQUEUE_OWNER_FORMAT` output; a line that does not have the
    three fixed fields is skipped (the name may hold '|': it is the rest of the line)."""
    jobs: list[QueuedJob] = []
    for line in text.splitlines():
        parts = line.split("|", 3)
        if len(parts) == 4 and parts[0].strip():
            jobs.append(
                QueuedJob(
                    job_id=parts[0].strip(), user=parts[1].strip(), state=parts[2].strip(), name=parts[3]
                )
            )
    return jobs

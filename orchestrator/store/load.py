"""Read a run directory back into one typed value, whatever state the run was left in.

The run directory is the source of truth: result.json when the run finished, else the per-step
results (steps/<id>/result.json, written as each step ends) and the journal. A run whose journal
does not end with run_finished is `running` while its process lives, `interrupted` otherwise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast, get_args

from pydantic import ValidationError

from orchestrator.errors import ConfigError
from orchestrator.metrics import verdict as V
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.events import RunKind
from orchestrator.models.fingerprint import DriftReport, FingerprintSet
from orchestrator.models.isolation import IsolationRun
from orchestrator.models.names import ID_MAX, is_name
from orchestrator.models.plan import Plan, Step
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.models.recovery_request import RecoveryTestRequest
from orchestrator.models.run import RunRecord as RunRecord  # re-exported: the readers of load_run
from orchestrator.models.run import RunResult, RunStatus, StepResult
from orchestrator.models.serving import ServingStep
from orchestrator.models.serving_results import ServingStepResult
from orchestrator.models.stack import Stack
from orchestrator.paths import under
from orchestrator.safefs import NotInside, read_inside
from orchestrator.store.rundir import RunDir, json_data
from orchestrator.text import plural

STEP_RESULT = "result.json"
STEPS_FILE = "steps.json"
SERVING_STEPS_FILE = "serving-steps.json"  # the plan's serving steps (runs/serving.py)
SERVING_RESULT = "serving.json"  # steps/<id>/serving.json: a serving step's result
REQUEST_FILE = "recovery-test.json"  # written by orch recovery-test instead of plan.json
_START_EVENTS = ("run_started", "run_resumed")
M = TypeVar("M", bound=StrictModel)
R = TypeVar("R", StepResult, ServingStepResult)


def step_result_path(run_dir: Path, step_id: str) -> Path:
    """steps/<step_id>/result.json; raises ConfigError when step_id would leave the run folder."""
    # The step's folder is checked here (a step id from data, a steps/ link); the file itself is
    # read only through read_inside, which refuses a link.
    return under(run_dir, "steps", step_id, what="step folder") / STEP_RESULT


def invalid(path: Path, e: ValidationError, *, quote: bool = True) -> str:
    """'FILE: FIELD = VALUE: why' for the first error of e (what a refusal names). With quote
    false (a warning, which every report of the run repeats), 'FILE: FIELD: why' without the value
    and with the value cut out of pydantic's reason: a file's content never reaches a warning (a
    hard-linked or planted file would otherwise leak into every report)."""
    first = e.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    if quote:
        value = repr(first.get("input"))
        return f"{path}: {loc} = {value[:200]}: {first['msg']}"
    msg, given = str(first["msg"]), first.get("input")
    if isinstance(given, str) and len(given) >= 4:
        msg = msg.replace(repr(given), "<the value>").replace(given, "<the value>")
    return f"{path}: {loc}: {msg[:200]}"


def require_model(cls: type[M], root: Path, path: Path) -> M:
    """The model in the JSON file at path, a regular file inside the run folder root; raises
    ConfigError naming the file, the field and the value when it is a link, leads out of root,
    is unreadable or invalid (resume trusts nothing a run folder says)."""
    try:
        text = json_data(read_inside(root, path).decode("utf-8"))
    except NotInside:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot be read ({e}); cannot resume") from e
    try:
        return cls.model_validate(text)
    except ValidationError as e:
        raise ConfigError(invalid(path, e), hint="the run folder was edited or is damaged") from e


def run_cluster(run_dir: Path, slurm_conf: Path | None) -> Cluster:
    """The cluster a run folder recorded (inventory.json), with the Slurm configuration that orch
    itself was given instead of the one the folder names: a run folder is data, and a planted
    orch_slurm_conf would make every Slurm command load its PluginDir (docs/reliability.md).
    ``slurm_conf``: the --inventory's orch_slurm_conf, or None for orch's own SLURM_CONF.

    Raises ConfigError naming the file when it is a link, unreadable or invalid.
    """
    cluster = require_model(Cluster, run_dir, run_dir / "inventory.json")
    return cluster.model_copy(
        update={"vars": cluster.vars.model_copy(update={"orch_slurm_conf": slurm_conf})}
    )


def _shown(path: Path, root: Path) -> str:
    """path relative to the run directory (steps/n1xg2/result.json), or its name outside it."""
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


def _json_file(root: Path, path: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The JSON object in path, a regular file inside the run folder root; None when it is missing;
    None and a warning naming it when it is a link, leads out of root, or is not JSON."""
    if not os.path.lexists(path):
        return None
    try:
        data = json_data(read_inside(root, path).decode("utf-8"))
    except NotInside as e:
        warnings.append(f"{_shown(path, root)}: not read: {e.why}")
        return None
    except UnicodeDecodeError:  # its message quotes the bytes
        warnings.append(f"{_shown(path, root)}: unreadable (not UTF-8)")
        return None
    except (OSError, json.JSONDecodeError) as e:
        warnings.append(f"{_shown(path, root)}: unreadable ({e})")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{_shown(path, root)}: not a JSON object")
        return None
    return data


def _model(cls: type[M], root: Path, path: Path, warnings: list[str]) -> M | None:
    data = _json_file(root, path, warnings)
    if data is None:
        return None
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        errors = plural(e.error_count(), "error")
        warnings.append(f"{_shown(path, root)}: invalid ({errors}; {invalid(path, e, quote=False)})")
        return None


def _step_model(
    cls: type[R], root: Path, path: Path, warnings: list[str], unreadable: dict[str, str], step_id: str
) -> R | None:
    """A step's result file read as _model does; a file that is there and unreadable is noted in
    unreadable[step_id]."""
    before = len(warnings)
    got = _model(cls, root, path, warnings)
    if got is None and len(warnings) > before:
        unreadable[step_id] = _shown(path, root)
    return got


def pid_alive(pid: int | None, host: str | None) -> bool:
    """Whether the process that wrote a journal still runs (only knowable on the same host)."""
    if pid is None or host is None or host != os.uname().nodename:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_kind(run_dir: Path) -> RunKind:
    """What kind of run the folder holds: run_started's `kind`, or for a run journaled before
    kinds were, its inputs (recovery-test.json: a recovery-test; else a scale-test ladder)."""
    started = next((e for e in RunDir(run_dir).events() if e.get("event") == "run_started"), {})
    kind = started.get("kind")
    for known in get_args(RunKind):
        if kind == known:
            return cast(RunKind, known)
    return "recovery-test" if os.path.lexists(run_dir / REQUEST_FILE) else "scale-test"


def load_run(run_dir: Path) -> RunRecord:
    """The run in run_dir, finished or not; raises ConfigError when it is not a run directory."""
    rd = RunDir(run_dir)
    if not rd.journal_path.exists() and not (run_dir / "plan.json").exists():
        raise ConfigError(f"{run_dir} is not a run directory (no journal.jsonl, no plan.json)")
    warnings: list[str] = []
    events = list(rd.events())
    started = next((e for e in events if e.get("event") == "run_started"), {})
    last_start = max((i for i, e in enumerate(events) if e.get("event") in _START_EVENTS), default=-1)
    finish = next(
        (e for i, e in enumerate(events) if e.get("event") == "run_finished" and i > last_start), None
    )
    plan = _model(Plan, run_dir, run_dir / "plan.json", warnings)
    cluster = _model(Cluster, run_dir, run_dir / "inventory.json", warnings)
    result_path = run_dir / "result.json"
    before = len(warnings)
    result = _model(RunResult, run_dir, result_path, warnings) if finish is not None else None
    result_unreadable = len(warnings) > before

    # Step ids name folders of the run: one that is not a plain name is never used as a path.
    step_ids = [str(s) for s in started.get("steps", []) if is_name(str(s))]
    planned = _json_file(run_dir, run_dir / STEPS_FILE, warnings)
    ladder: list[Step] = []
    if planned is not None:
        try:
            ladder = [Step.model_validate(s) for s in planned.get("steps", [])]
            step_ids = [s.id for s in ladder]
        except ValidationError as e:
            warnings.append(f"{STEPS_FILE}: invalid ({invalid(run_dir / STEPS_FILE, e, quote=False)})")
    unreadable: dict[str, str] = {}
    if result is not None:
        steps = list(result.steps)
    else:
        steps = []
        for sid in step_ids:
            try:
                path = step_result_path(run_dir, sid)
            except ConfigError as e:
                warnings.append(e.message)
                continue
            res = _step_model(StepResult, run_dir, path, warnings, unreadable, sid)
            if res is not None:
                steps.append(res)
    # Re-derived from the summaries, so runs written before the like-with-like rule read right too.
    pairs = [(s.step, s.summary) for s in steps]
    V.apply_efficiency(pairs)
    V.apply_line_rate(pairs, cluster.vars.orch_fabric_gbps if cluster else None)
    if not step_ids:
        step_ids = [s.step.id for s in steps]
    serving: list[ServingStepResult] = list(result.serving) if result is not None else []
    planned_serving = _json_file(run_dir, run_dir / SERVING_STEPS_FILE, warnings) or {}
    serving_ids: list[str] = []
    for raw in planned_serving.get("steps", []):
        sid = str(raw.get("id", "")) if isinstance(raw, dict) else ""
        if not is_name(sid):
            warnings.append(f"{SERVING_STEPS_FILE}: a step id that is not a plain name")
            continue
        serving_ids.append(sid)
    if result is None:
        for sid in serving_ids:
            path = under(run_dir, "steps", sid, what="step folder") / SERVING_RESULT
            sres = _step_model(ServingStepResult, run_dir, path, warnings, unreadable, sid)
            if sres is not None:
                serving.append(sres)

    status: RunStatus
    pid = started.get("pid")
    if finish is not None:
        said = finish.get("status", "interrupted")
        # A run refused before its steps (exit 2/3: config, unreachable node, full disk) has no result.
        refused: RunStatus = "infra" if finish.get("exit_code") == 3 else "failed"
        status = result.status if result is not None else (said if said in get_args(RunStatus) else refused)
    elif pid_alive(pid if isinstance(pid, int) else None, started.get("host")):
        status = "running"
    else:
        status = "interrupted"
    if status == "accepted" and (unreadable or result_unreadable):
        # The verdict cannot be checked: a damaged result is never read as a pass.
        damaged = list(unreadable.values()) or [_shown(result_path, run_dir)]
        warnings.append(f"not accepted: {', '.join(damaged)} cannot be read")
        status = "failed"

    nodes = dict(result.nodes) if result is not None else {}
    if not nodes and cluster is not None:
        for n in cluster.nodes:
            mine = [s.verdict for s in steps if n.name in s.step.nodes]
            mine += [s.verdict for s in serving if n.name in s.step.nodes]
            if mine:
                nodes[n.name] = V.worst(mine)
    recovery: list[RecoveryRecord] = []
    rec_dir = run_dir / "recovery"
    if rec_dir.is_dir():
        for path in sorted(rec_dir.glob("*.json")):
            rec = _model(RecoveryRecord, run_dir, path, warnings)
            if rec is not None:
                recovery.append(rec)
        recovery.sort(key=lambda r: (r.step or "", r.fault, r.repeat, r.injected_at))

    def _time(ev: dict[str, Any] | None) -> datetime | None:
        try:
            return datetime.fromisoformat(ev["t"]) if ev and "t" in ev else None
        except (TypeError, ValueError):
            return None

    run_id = str(started.get("run_id") or run_dir.name)
    if not is_name(run_id, ID_MAX):
        raise ConfigError(f"{rd.journal_path}: run_id = {run_id[:200]!r} is not a valid run id")
    return RunRecord(
        run_id=run_id,
        run_dir=run_dir,
        kind=run_kind(run_dir),
        plan_name=str(started.get("plan") or (plan.name if plan else "?")),
        backend=str(started.get("backend") or "?"),
        status=status,
        exit_code=(result.exit_code if result else (finish or {}).get("exit_code")),
        error=str(finish["error"]) if finish and finish.get("error") else None,
        started_at=_time(started),
        finished_at=_time(finish),
        wall_s=(result.wall_s if result else (finish or {}).get("wall_s")),
        user=started.get("user"),
        host=started.get("host"),
        pid=pid if isinstance(pid, int) else None,
        command=started.get("command"),
        plan=plan,
        cluster=cluster,
        step_ids=step_ids,
        steps=steps,
        serving_ids=serving_ids,
        serving=serving,
        nodes=nodes,
        recovery=recovery,
        stack=_model(Stack, run_dir, run_dir / "stack.json", warnings),
        fingerprint=_model(FingerprintSet, run_dir, run_dir / "fingerprint.json", warnings),
        drift=_model(DriftReport, run_dir, run_dir / "drift.json", warnings),
        request=_model(RecoveryTestRequest, run_dir, run_dir / REQUEST_FILE, warnings),
        warnings=warnings,
        unreadable=unreadable,
        resumes=sum(1 for e in events if e.get("event") == "run_resumed"),
        isolation=_model(IsolationRun, run_dir, run_dir / "isolation.json", warnings),
    )


def load_run_to_resume(run_dir: Path) -> RunRecord:
    """The run in run_dir, for a resume; raises ConfigError when it is not a run directory, or
    while the run still runs (its orch is alive)."""
    record = load_run(run_dir)
    if record.status == "running":
        raise ConfigError(f"run {record.run_id} is still running (pid {record.pid})")
    return record


def finished_steps(run_dir: Path, step_ids: list[str]) -> dict[str, StepResult]:
    """The per-step results written as each step ended (verdict not skipped), by step id.

    Raises ConfigError naming the file and the value when a result.json is invalid or is not the
    result of the step whose folder holds it.
    """
    return _finished(run_dir, step_ids, StepResult, lambda sid: step_result_path(run_dir, sid))


def _finished(
    run_dir: Path, step_ids: list[str], model: type[R], path_of: Callable[[str], Path]
) -> dict[str, R]:
    """Each step's result file (path_of its id) read as model, when it exists and its verdict is not
    skipped; a file that is invalid or holds another step's result is a ConfigError naming it."""
    out: dict[str, R] = {}
    for sid in step_ids:
        path = path_of(sid)
        if not os.path.lexists(path):
            continue
        res = require_model(model, run_dir, path)
        if res.step.id != sid:
            raise ConfigError(f"{path}: step.id = {res.step.id!r} is not the folder's step {sid!r}")
        if res.verdict != "skipped":
            out[sid] = res
    return out


class _Ladder(StrictModel):
    steps: list[Step]


def ladder_steps(run_dir: Path) -> list[Step] | None:
    """The ladder the run planned (steps.json), or None for a run directory without one.

    Raises ConfigError naming the file and the value when it is invalid (a step id that is not a
    plain name, e.g. '../../x', is refused here, before any path is built from it).
    """
    path = run_dir / STEPS_FILE
    if not os.path.lexists(path):
        return None
    return require_model(_Ladder, run_dir, path).steps


class _Serving(StrictModel):
    steps: list[ServingStep]


def serving_steps(run_dir: Path) -> list[ServingStep] | None:
    """The serving steps the run planned (serving-steps.json), or None when it has none. Raises
    ConfigError naming the file and the value when it is invalid."""
    path = run_dir / SERVING_STEPS_FILE
    if not os.path.lexists(path):
        return None
    return require_model(_Serving, run_dir, path).steps


def finished_serving(run_dir: Path, step_ids: list[str]) -> dict[str, ServingStepResult]:
    """The serving steps' results written as each ended (verdict not skipped), by step id; raises
    ConfigError naming the file when one is invalid or not its folder's step."""
    return _finished(
        run_dir,
        step_ids,
        ServingStepResult,
        lambda sid: under(run_dir, "steps", sid, what="step folder") / SERVING_RESULT,
    )

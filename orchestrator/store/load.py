"""Read a run directory back into one typed value, whatever state the run was left in.

The run directory is the source of truth: result.json when the run finished, else the per-step
results (steps/<id>/result.json, written as each step ends) and the journal. A run whose journal
does not end with run_finished is `running` while its process lives, `interrupted` otherwise.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from pydantic import Field, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.metrics import verdict as V
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster
from orchestrator.models.plan import Plan, Step
from orchestrator.models.recovery import RecoveryRecord
from orchestrator.pipeline import RunResult, StepResult
from orchestrator.safefs import NotInside, read_inside
from orchestrator.store.rundir import RunDir, json_data

RunStatus = Literal["accepted", "failed", "infra", "interrupted", "running"]
STEP_RESULT = "result.json"
STEPS_FILE = "steps.json"
REQUEST_FILE = "recovery-test.json"  # written by orch recovery-test instead of plan.json
_START_EVENTS = ("run_started", "run_resumed")
M = TypeVar("M", bound=StrictModel)


class RunRecord(StrictModel):
    """Everything a report needs about one run, rebuilt from its directory."""

    run_id: str
    run_dir: Path
    plan_name: str
    backend: str
    status: RunStatus
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    wall_s: float | None = None
    user: str | None = None
    host: str | None = None
    pid: int | None = None
    command: str | None = None
    plan: Plan | None = None
    cluster: Cluster | None = None
    step_ids: list[str] = Field(default_factory=list, description="the ladder, in order")
    steps: list[StepResult] = Field(default_factory=list, description="finished steps, ladder order")
    nodes: dict[str, V.Verdict] = Field(default_factory=dict)
    recovery: list[RecoveryRecord] = Field(default_factory=list)
    stack: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None
    drift: dict[str, Any] | None = None
    request: dict[str, Any] | None = Field(
        default=None, description="a recovery-test run's resolved request (recovery-test.json)"
    )
    warnings: list[str] = Field(default_factory=list, description="files that could not be read")
    resumes: int = 0

    @property
    def pending(self) -> list[str]:
        """Ladder steps with no finished result."""
        done = {s.step.id for s in self.steps if s.verdict != "skipped"}
        return [s for s in self.step_ids if s not in done]

    def step(self, step_id: str) -> StepResult | None:
        return next((s for s in self.steps if s.step.id == step_id), None)


def step_result_path(run_dir: Path, step_id: str) -> Path:
    return run_dir / "steps" / step_id / STEP_RESULT


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name


def _json_file(root: Path, path: Path, warnings: list[str]) -> dict[str, Any] | None:
    """The JSON object in path, a regular file inside the run folder root; None when it is missing;
    None and a warning naming it when it is a link, leads out of root, or is not JSON."""
    if not os.path.lexists(path):
        return None
    try:
        data = json_data(read_inside(root, path).decode("utf-8"))
    except NotInside as e:
        warnings.append(f"{_rel(path, root)}: not read: {e.why}")
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        warnings.append(f"{_rel(path, root)}: unreadable ({e})")
        return None
    if not isinstance(data, dict):
        warnings.append(f"{path.name}: not a JSON object")
        return None
    return data


def _model(cls: type[M], root: Path, path: Path, warnings: list[str]) -> M | None:
    data = _json_file(root, path, warnings)
    if data is None:
        return None
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        warnings.append(f"{_rel(path, root)}: invalid ({e.error_count()} errors)")
        return None


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
    result = _model(RunResult, run_dir, run_dir / "result.json", warnings) if finish is not None else None

    step_ids = [str(s) for s in started.get("steps", [])]
    planned = _json_file(run_dir, run_dir / STEPS_FILE, warnings)
    ladder: list[Step] = []
    if planned is not None:
        try:
            ladder = [Step.model_validate(s) for s in planned.get("steps", [])]
            step_ids = [s.id for s in ladder]
        except ValidationError:
            warnings.append(f"{STEPS_FILE}: invalid")
    if result is not None:
        steps = list(result.steps)
    else:
        steps = []
        for sid in step_ids:
            res = _model(StepResult, run_dir, step_result_path(run_dir, sid), warnings)
            if res is not None:
                steps.append(res)
        V.apply_efficiency([s.summary for s in steps])
    if not step_ids:
        step_ids = [s.step.id for s in steps]

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

    nodes = dict(result.nodes) if result is not None else {}
    if not nodes and cluster is not None:
        for n in cluster.nodes:
            mine = [s.verdict for s in steps if n.name in s.step.nodes]
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

    return RunRecord(
        run_id=str(started.get("run_id") or run_dir.name),
        run_dir=run_dir,
        plan_name=str(started.get("plan") or (plan.name if plan else "?")),
        backend=str(started.get("backend") or "?"),
        status=status,
        exit_code=(result.exit_code if result else (finish or {}).get("exit_code")),
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
        nodes=nodes,
        recovery=recovery,
        stack=_json_file(run_dir, run_dir / "stack.json", warnings),
        fingerprint=_json_file(run_dir, run_dir / "fingerprint.json", warnings),
        drift=_json_file(run_dir, run_dir / "drift.json", warnings),
        request=_json_file(run_dir, run_dir / REQUEST_FILE, warnings),
        warnings=warnings,
        resumes=sum(1 for e in events if e.get("event") == "run_resumed"),
    )


def finished_steps(run_dir: Path, step_ids: list[str]) -> dict[str, StepResult]:
    """The per-step results written as each step ended (verdict not skipped), by step id."""
    out: dict[str, StepResult] = {}
    for sid in step_ids:
        res = _model(StepResult, run_dir, step_result_path(run_dir, sid), [])
        if res is not None and res.verdict != "skipped":
            out[sid] = res
    return out


def ladder_steps(run_dir: Path) -> list[Step] | None:
    """The ladder the run planned (steps.json), or None for a run directory without one."""
    data = _json_file(run_dir, run_dir / STEPS_FILE, [])
    if data is None:
        return None
    return [Step.model_validate(s) for s in data.get("steps", [])]

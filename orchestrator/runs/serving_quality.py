"""The output-quality gate of a serving step in scale-test (docs/quality.md, "In scale-test").

After a serving step's load levels, while its engines still serve, a plan with `quality:` sends
the gate's prompt set to the step's first engine as arm A (workloads/quality.run_arm: twice at
concurrency N, once at 1), its outputs kept in steps/<step>/quality/, and computes this run's own
A-against-A floor. When the workload's thresholds name a baseline (`thresholds.baseline`,
docs/serving.md "Baselines") whose run kept the gate's outputs for the same step, this run is B
and the baseline's outputs are A (workloads/quality.judge_run with b_root): the floor is the
baseline's own A-against-A passes, the verdict decision.quality_verdict's. A failed judgement
fails the step, each reason naming the gate's figures; a baseline without outputs is named, not
judged against.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from orchestrator import safefs
from orchestrator.errors import OrchError
from orchestrator.models.quality_gate import QualityGate
from orchestrator.models.serving import ServingWorkload
from orchestrator.models.serving_results import ServingQuality, ServingStepResult
from orchestrator.store.db import ResultsStore, default_store_path
from orchestrator.workloads.engine_specs import engine_spec
from orchestrator.workloads.loadgen import Target
from orchestrator.workloads.quality import (
    OUTPUTS_DIR,
    QualityInputError,
    floor_of,
    judge_run,
    prompts_sha256,
    run_arm,
)

_READ_ERRORS = (OSError, safefs.NotInside, QualityInputError)


def _baseline_step_dir(runs_root: Path, name: str, step_id: str) -> tuple[str, Path]:
    """The baseline's run id and its step folder, from the run's results store.

    Raises OrchError (no such baseline, no store) or sqlite3.Error.
    """
    with ResultsStore.open(default_store_path(runs_root), create=False) as db:
        b = db.baseline(name)
        if b is None:
            raise OrchError(f"no baseline named {name!r} in the results store")
        row = db.run(b.run_id)
    if row is None:
        raise OrchError(f"baseline {name!r}: its run {b.run_id} is not in the results store")
    return b.run_id, row.run_dir / "steps" / step_id


def run_step_quality(
    gate: QualityGate, res: ServingStepResult, w: ServingWorkload, step_dir: Path, run_root: Path
) -> ServingQuality:
    """Run the gate's A passes on the step's first engine, this run's floor, and the judgement
    against the workload's baseline when it names one (module docstring). Never raises: what
    could not be done is the result's error or not_judged."""
    e = res.engines[0]
    out = ServingQuality(outputs=(step_dir / OUTPUTS_DIR).relative_to(run_root).as_posix(), engine=e.node)
    try:
        run_arm(
            gate, "A", Target(e.node, e.url), w.model.served_name, step_dir,
            detail=engine_spec(w.engine).output_detail, timeout_s=w.load.request_timeout_s,
        )  # fmt: skip
        out.floor = floor_of(gate, step_dir)
        out.prompts_sha256 = prompts_sha256(step_dir)
    except (*_READ_ERRORS, OrchError) as err:
        out.error = f"the gate's passes did not run: {err}"
        return out
    th = w.thresholds.baseline
    if th is None:
        return out
    out.baseline = th.name
    try:
        out.baseline_run, base = _baseline_step_dir(run_root.parent, th.name, res.step.id)
    except OrchError as err:
        out.not_judged = f"baseline {th.name} not read: {err.message}"
        return out
    except sqlite3.Error as err:
        out.not_judged = f"baseline {th.name} not read: the results store could not be read: {err}"
        return out
    if not (base / OUTPUTS_DIR / "inputs.json").is_file():
        out.not_judged = (
            f"baseline {th.name} (run {out.baseline_run}) kept no quality outputs for step {res.step.id}"
        )
        return out
    try:
        out.judgement = judge_run(gate, base, b_root=step_dir)
    except _READ_ERRORS as err:
        out.not_judged = f"baseline {th.name} (run {out.baseline_run}): its outputs not read: {err}"
    return out


def quality_failures(res: ServingStepResult) -> list[str]:
    """What fails the step: a gate whose passes did not run, a judgement that failed (each reason
    with its figures). A baseline without outputs is not a failure (ServingQuality.not_judged)."""
    q = res.quality
    if q is None:
        return []
    at = f"step {res.step.id}: output quality"
    if q.error is not None:
        return [f"{at}: {q.error}"]
    j = q.judgement
    if j is None or j.passed:
        return []
    return [f"{at} against baseline {q.baseline} (run {q.baseline_run}): {r}" for r in j.reasons]

"""What every report format derives from a RunRecord: figures, scaling points, threshold cases."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.metrics import verdict as V
from orchestrator.pipeline import StepResult
from orchestrator.report.escape import href
from orchestrator.safefs import inside
from orchestrator.store.load import RunRecord


@dataclass(frozen=True)
class ScalingPoint:
    series: str
    x: int
    busbw_gbs: float
    efficiency: float | None
    step: str


def scaling_points(rec: RunRecord) -> tuple[str, list[ScalingPoint]]:
    """Largest-size busbw per step, against nodes (ranks when every step has one node)."""
    steps = [s for s in rec.steps if s.summary]
    by_nodes = len({s.step.nnodes for s in steps}) > 1
    pts: list[ScalingPoint] = []
    for s in steps:
        for coll, summ in s.summary.items():
            name = f"{coll} x{s.step.ranks_per_node}/node" if by_nodes else coll
            x = s.step.nnodes if by_nodes else s.step.world_size
            pts.append(ScalingPoint(name, x, summ.busbw_gbs, summ.efficiency, s.step.id))
    return ("nodes" if by_nodes else "ranks (1 node)"), pts


@dataclass(frozen=True)
class Case:
    """One JUnit test case: a step, or one threshold checked on a step."""

    classname: str
    name: str
    outcome: V.Verdict
    message: str = ""
    time_s: float | None = None


def threshold_cases(rec: RunRecord) -> list[Case]:
    """One case per step (ran, complete, correct) and one per threshold per step."""
    plan = rec.plan
    cases: list[Case] = []
    finished = {s.step.id: s for s in rec.steps}
    for sid in rec.step_ids:
        cls = f"orch.{rec.plan_name}.{sid}"
        res = finished.get(sid)
        if res is None or res.verdict == "skipped":
            cases.append(Case(cls, "step", "skipped", f"step not run (run {rec.status})"))
            if plan:
                cases += [Case(cls, n, "skipped", "step not run") for n in threshold_names(rec)]
            continue
        elapsed = (
            res.ended_mono - res.started_mono
            if res.ended_mono is not None
            and res.started_mono is not None
            and res.ended_mono > res.started_mono
            else None
        )
        th_reasons = [r for r in res.reasons if _is_threshold_reason(r)]
        other = [r for r in res.reasons if not _is_threshold_reason(r)]
        step_outcome: V.Verdict = "infra" if res.verdict == "infra" else ("fail" if _wrong(other) else "pass")
        cases.append(Case(cls, "step", step_outcome, "; ".join(other), elapsed))
        for name in threshold_names(rec):
            mine = [r for r in th_reasons if _reason_matches(name, r)]
            outcome: V.Verdict = "fail" if mine else ("skipped" if res.verdict == "infra" else "pass")
            cases.append(Case(cls, name, outcome, "; ".join(mine)))
    return cases


def threshold_names(rec: RunRecord) -> list[str]:
    plan = rec.plan
    if plan is None:
        return []
    names = [f"busbw {t.collective}@{t.size if t.size is not None else 'max'} >= {t.min_gbs:g} GB/s"
             for t in plan.thresholds.busbw]  # fmt: skip
    if plan.thresholds.baseline is not None:
        b = plan.thresholds.baseline
        names.append(f"baseline {b.name} x{b.min_fraction:g}")
    if plan.thresholds.min_scaling_efficiency is not None:
        names.append(f"scaling efficiency >= {plan.thresholds.min_scaling_efficiency:g}")
    return names


def _is_threshold_reason(r: str) -> bool:
    return "threshold" in r or "baseline" in r or "scaling efficiency" in r


def _wrong(reasons: list[str]) -> bool:
    return any(r.startswith("#wrong") for r in reasons)


def _reason_matches(name: str, reason: str) -> bool:
    if name.startswith("busbw "):
        coll = name.split()[1].split("@")[0]
        return "threshold" in reason and reason.startswith(coll)
    if name.startswith("baseline "):
        return "baseline" in reason
    return "scaling efficiency" in reason


def rel_link(target: Path, report_dir: Path | None) -> str:
    """A link from the report's folder to a file of the run (relative, so the pair can move),
    percent-encoded: a file name never becomes a scheme such as ``javascript:``."""
    if report_dir is None:
        return href(target.as_posix())
    return href(Path(os.path.relpath(target.resolve(), report_dir.resolve())).as_posix())


def step_logs(rec: RunRecord, step_id: str) -> list[Path]:
    """The step's raw logs that are regular files of the run folder (a link is never offered)."""
    folder = rec.run_dir / "steps" / step_id
    files = sorted(folder.glob("*.log")) + sorted(folder.glob("*.txt")) if folder.is_dir() else []
    attempts = rec.run_dir / "attempts"
    if attempts.is_dir():
        for a in sorted(attempts.glob(f"{step_id}.*")):
            files += sorted(a.glob("*.log"))
    return [f for f in files if inside(rec.run_dir, f) is None]


def step_notes(s: StepResult) -> list[str]:
    """What the report says of a step besides its verdict: reasons, warnings (drift, faults that
    cannot reach the transport), and a mark on steps that ran concurrently with others."""
    notes = [*s.reasons, *(f"warning: {w}" for w in s.warnings)]
    if s.concurrent:
        notes.append("ran with --concurrent-steps: steps shared the fabric, numbers may be distorted")
    return notes

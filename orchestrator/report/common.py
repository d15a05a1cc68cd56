"""What every report format derives from a RunRecord: figures, scaling points, threshold cases."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.metrics import percentiles
from orchestrator.metrics import verdict as V
from orchestrator.models.plan import format_size
from orchestrator.models.run import RunRecord, StepResult
from orchestrator.report.escape import href
from orchestrator.safefs import inside
from orchestrator.text import plural


@dataclass(frozen=True)
class ScalingPoint:
    series: str
    x: int
    busbw_gbs: float
    efficiency: float | None
    step: str
    scaling: V.Scaling | None = None
    reference: str | None = None


def scaling_points(rec: RunRecord) -> tuple[str, list[ScalingPoint]]:
    """Largest-size busbw per step, against nodes (ranks when every step has one node).

    Each point keeps its efficiency with the scaling it measures and the reference step: on a
    mixed ladder the one-node steps carry intra-node efficiency, the others inter-node.
    """
    steps = [s for s in rec.steps if s.summary]
    by_nodes = len({s.step.nnodes for s in steps}) > 1
    pts: list[ScalingPoint] = []
    for s in steps:
        for coll, summ in s.summary.items():
            name = f"{coll} x{s.step.ranks_per_node}/node" if by_nodes else coll
            x = s.step.nnodes if by_nodes else s.step.world_size
            pts.append(ScalingPoint(name, x, summ.busbw_gbs, summ.efficiency, s.step.id, summ.scaling,
                                    summ.reference))  # fmt: skip
    return ("nodes" if by_nodes else "ranks (1 node)"), pts


def efficiency_cell(s: V.CollSummary | None) -> str:
    """The efficiency as tables print it: '0.93', or '-' where no like-with-like reference exists."""
    return f"{s.efficiency:.2f}" if s is not None and s.efficiency is not None else "-"


def reference_cell(s: V.CollSummary | None) -> str:
    """What the efficiency is against: 'inter-node vs n2xg1', or '-'."""
    return s.reference_label() if s is not None else "-"


def latency_cell(s: V.CollSummary | None) -> str:
    """Per-iteration latency (µs) at the largest size with its n, or '-' (nccl-tests gives none)."""
    if s is None or s.latency_us is None:
        return "-"
    return percentiles.label(s.latency_us, fmt=".0f")


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
        if res is not None and res.step.diagnostic is not None:
            continue  # its cases are report/diagnostics.diag_cases
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
            message = "; ".join(mine)
            if name.startswith("scaling efficiency"):
                refs = sorted({c.reference_label() for c in res.summary.values() if c.reference})
                name += f" ({', '.join(refs) or 'no reference'})"
                if not refs and outcome == "pass":
                    outcome, message = "skipped", "no like-with-like reference for this step (e.g. 1 rank)"
            cases.append(Case(cls, name, outcome, message))
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


@dataclass(frozen=True)
class ThresholdRow:
    """One threshold of the plan on one finished step: what it requires against what was measured."""

    step: str
    threshold: str
    required: str
    measured: str
    outcome: V.Verdict


def threshold_rows(rec: RunRecord) -> list[ThresholdRow]:
    """Every threshold of the plan on every finished step, required against measured.

    busbw is measured here the way the verdict measures it (verdict.busbw_measured); the outcome
    of the baseline and scaling-efficiency thresholds is the step's own reasons, so the table
    never disagrees with the verdict.
    """
    plan = rec.plan
    if plan is None:
        return []
    out: list[ThresholdRow] = []
    th = plan.thresholds
    for s in rec.steps:
        if s.verdict == "skipped":
            continue
        sid = s.step.id
        for b in th.busbw:
            m = V.busbw_measured(b, s.rows, s.summary)
            name = f"busbw {b.collective}@{format_size(b.size) if b.size is not None else 'largest size'}"
            outcome: V.Verdict = "pass" if m.busbw_gbs is not None and m.busbw_gbs >= b.min_gbs else "fail"
            got = "no measurement"
            if m.busbw_gbs is not None:
                got = f"{m.busbw_gbs:.4g} GB/s" + (f" at {format_size(m.size_bytes)}" if m.size_bytes else "")
            out.append(ThresholdRow(sid, name, f">= {b.min_gbs:g} GB/s", got, outcome))
        if th.baseline is not None:
            below = [r for r in s.reasons if "baseline" in r]
            got = f"{plural(len(below), 'row')} below" if below else "every row at or above"
            need = f">= {th.baseline.min_fraction:g} x baseline"
            out.append(
                ThresholdRow(sid, f"baseline {th.baseline.name}", need, got, "fail" if below else "pass")
            )
        if th.min_scaling_efficiency is not None:
            effs = [(x.efficiency, c) for c, x in s.summary.items() if x.efficiency is not None]
            got = "{:.2f} ({})".format(*min(effs)) if effs else "no reference"
            failed = any("scaling efficiency" in r for r in s.reasons)
            out.append(
                ThresholdRow(sid, "scaling efficiency", f">= {th.min_scaling_efficiency:g}", got,
                             "fail" if failed else "pass")
            )  # fmt: skip
    return out


def step_wrong(s: StepResult) -> int:
    """#wrong of a step: wrong elements over every row and placement (0 when unchecked)."""
    return sum(x.wrong for x in s.summary.values())


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
    cannot reach the transport), its GPU telemetry (GB/s per W, throttling, new ECC errors), and a
    mark on steps that ran concurrently with others."""
    notes = [*s.reasons, *(f"warning: {w}" for w in s.warnings), *(s.telemetry.notes if s.telemetry else [])]
    if s.concurrent:
        notes.append("ran with --concurrent-steps: steps shared the fabric, numbers may be distorted")
    return notes

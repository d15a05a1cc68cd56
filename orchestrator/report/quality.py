"""The output-quality gate's report section (report/sections.py renders it in Markdown and HTML).

One Section: the verdict and its reasons (each with its figures), then a table of the comparisons,
B against A first and the A-against-A floor under it, then the accuracy of each arm with its
Wilson interval. Every cell is escaped by the section renderers.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.models.decision import QualityJudgement
from orchestrator.models.quality import Accuracy, OutputFigures
from orchestrator.models.serving_results import ServingQuality, ServingStepResult
from orchestrator.report.sections import Section

HEAD = [
    "comparison",
    "n",
    "exact match",
    "agreed before divergence (mean / p5)",
    "first divergence (p50, n)",
    "max / p99 |Δ logprob|",
    "missing",
]


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None else format(x, fmt)


def _row(f: OutputFigures) -> list[str]:
    agreed = f"{_num(f.agreed.mean)} / {_num(f.agreed_p5)} {f.unit}"
    first = f"{_num(f.first_divergence.p50)} (n={f.first_divergence.n})"
    lp = f"{_num(f.max_logprob_delta)} / {_num(f.p99_logprob_delta)} (n={f.logprob_pairs})"
    share = "-" if f.exact_match is None else f"{f.exact_match:.1%}"
    return [f.name, str(f.n), share, agreed, first, lp if f.logprob_pairs else "-", str(f.missing)]


def _accuracy(arm: str, a: Accuracy) -> str:
    if a.accuracy is None or a.low is None or a.high is None:
        return f"accuracy {arm}: n/a (n={a.n})"
    return (
        f"accuracy {arm}: {a.accuracy:.1%} ({a.correct}/{a.n}; "
        f"{a.confidence:.0%} Wilson interval {a.low:.1%}-{a.high:.1%})"
    )


def quality_section(j: QualityJudgement, *, title: str = "Output quality") -> Section:
    """The gate's verdict, reasons and figures as one Section."""
    lines = [f"**{'PASS' if j.passed else 'FAIL'}**: " + ("; ".join(j.reasons) or "every threshold met")]
    lines += j.notes
    if j.prompts_sha256:
        lines.append(f"prompt set sha256 {j.prompts_sha256}")
    after = [_accuracy(arm, a) for arm, a in (("A", j.accuracy_a), ("B", j.accuracy_b)) if a is not None]
    return Section(
        title=title,
        ident="quality",
        lines=lines,
        head=HEAD,
        rows=[_row(j.b_vs_a), *(_row(f) for f in j.floor)],
        after=after,
        named_class="fail" if not j.passed else "pass",
    )


# --- the gate in scale-test: each serving step's ServingQuality (runs/serving_quality.py) ------------


def _serving_title(step_id: str, q: ServingQuality) -> str:
    against = f" against baseline {q.baseline} (run {q.baseline_run or '?'})" if q.baseline else ""
    return f"Output quality of step {step_id}{against}"


def serving_quality_lines(step_id: str, q: ServingQuality) -> list[str]:
    """A serving step's gate in words, a line each: the verdict against the baseline (or why none),
    this run's own floor, the outputs' folder."""
    at = f"{step_id}: output quality"
    out: list[str] = []
    if q.error is not None:
        return [f"{at}: FAIL: {q.error}"]
    j = q.judgement
    if j is not None:
        b = j.b_vs_a
        share = _row(b)[2]
        floors = [f.exact_match for f in j.floor if f.exact_match is not None]
        floor = f"{min(floors):.1%}" if floors else "none"
        verdict = "PASS" if j.passed else "FAIL: " + "; ".join(j.reasons)
        out.append(
            f"{at} against baseline {q.baseline} (run {q.baseline_run}): exact match {share} (n={b.n}), "
            f"the baseline's A-against-A floor {floor}; {verdict}"
        )
    elif q.not_judged is not None:
        out.append(f"{at}: not judged: {q.not_judged}")
    own = ", ".join(f"{f.name} {_row(f)[2]} (n={f.n})" for f in q.floor)
    out.append(f"{at}: this run's floor: {own or 'none'}; outputs in {q.outputs}")
    return out


def serving_quality_sections(serving: Sequence[ServingStepResult]) -> list[Section]:
    """A Section per serving step with a gate: quality_section of its judgement against the
    baseline, else its own floor (and why it was not judged)."""
    out: list[Section] = []
    for s in serving:
        q = s.quality
        if q is None:
            continue
        title = _serving_title(s.step.id, q)
        if q.judgement is not None:
            sec = quality_section(q.judgement, title=title)
            own = ", ".join(f"{f.name} {_row(f)[2]} (n={f.n})" for f in q.floor)
            sec.after.append(f"this run's own floor: {own or 'none'}")
        else:
            lines = [x for x in (q.error, q.not_judged) if x is not None] or ["no baseline named: floor only"]
            rows = [_row(f) for f in q.floor]
            sec = Section(title=title, lines=lines, head=HEAD, rows=rows)
        sec.ident = f"quality-{s.step.id}"
        out.append(sec)
    return out

"""The output-quality gate's report section (report/sections.py renders it in Markdown and HTML).

One Section: the verdict and its reasons (each with its figures), then a table of the comparisons,
B against A first and the A-against-A floor under it, then the accuracy of each arm with its
Wilson interval. Every cell is escaped by the section renderers.
"""

from __future__ import annotations

from orchestrator.models.decision import QualityJudgement
from orchestrator.models.quality import Accuracy, OutputFigures
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

"""The output-quality figures (docs/quality.md): one arm's greedy outputs against another's, and an
arm's accuracy on a task file with its Wilson interval. metrics/decision.quality_verdict judges them.

Outputs are compared prompt by prompt, matched by id; a prompt without an ok answer on either side
is counted as missing, not compared. Divergence is counted in token ids where both sides returned
them (vLLM, SGLang), else in words of the text (`transformers serve` returns no token ids; for the
lab model one word is one token). |Δ logprob| is taken over the shared prefix, where both sides
give a logprob for the same token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from orchestrator.metrics.percentiles import percentile, summarize
from orchestrator.models.decision import QualityJudgement
from orchestrator.models.quality import Accuracy, Output, OutputFigures, Task, Unit

Z_95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def agreed_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    """How many leading units a and b share (the index of the first divergence)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _units(o: Output, unit: Unit) -> list[object]:
    return list(o.token_ids or []) if unit == "tokens" else list(o.text.split())


def compare_outputs(name: str, a: Iterable[Output], b: Iterable[Output]) -> OutputFigures:
    """B's outputs against A's, prompt by prompt (see the module docstring).

    A pair is an exact match when its texts are equal and, in tokens, its token ids too. A diverging
    pair's first divergence is where its units first differ, or the shorter side's end.
    """
    by_a = {o.id: o for o in a}
    by_b = {o.id: o for o in b}
    ids = sorted(set(by_a) | set(by_b))
    pairs = [
        (by_a[i], by_b[i])
        for i in ids
        if i in by_a and i in by_b and by_a[i].status == "ok" and by_b[i].status == "ok"
    ]
    missing = len(ids) - len(pairs)
    unit: Unit = (
        "tokens"
        if pairs and all(x.token_ids is not None and y.token_ids is not None for x, y in pairs)
        else "words"
    )
    agreed: list[float] = []
    firsts: list[float] = []
    deltas: list[float] = []
    exact = 0
    for x, y in pairs:
        ux, uy = _units(x, unit), _units(y, unit)
        k = agreed_prefix(ux, uy)
        agreed.append(k)
        if ux == uy and x.text == y.text:
            exact += 1
        else:
            firsts.append(k)
        if x.logprobs is not None and y.logprobs is not None:
            shared = min(k, len(x.logprobs), len(y.logprobs))
            deltas += [abs(y.logprobs[j] - x.logprobs[j]) for j in range(shared)]
    return OutputFigures(
        name=name,
        n=len(pairs),
        unit=unit,
        exact_match=exact / len(pairs) if pairs else None,
        agreed=summarize(agreed),
        agreed_p5=percentile(agreed, 0.05),
        first_divergence=summarize(firsts),
        logprob_pairs=len(deltas),
        max_logprob_delta=max(deltas) if deltas else None,
        p99_logprob_delta=percentile(deltas, 0.99),
        missing=missing,
    )


def wilson(correct: int, n: int, z: float = Z_95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial share correct / n (None when n is 0).

    Raises ValueError when correct is outside 0..n.
    """
    if not 0 <= correct <= n:
        raise ValueError(f"correct must lie in 0..n, got {correct} of {n}")
    if n == 0:
        return None
    p = correct / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def score(task: Task, answer: str) -> bool:
    """Whether an answer is right: exact (stripped, equal), contains (holds the expected text), or
    choice (the first of the task's choices, as a whole word, that the answer names is the
    expected one; case-insensitive)."""
    if task.scoring == "exact":
        return answer.strip() == task.expected.strip()
    if task.scoring == "contains":
        return task.expected in answer
    words = [w.strip(".,;:!?()[]\"'").casefold() for w in answer.split()]
    named = [c for c in task.choices if c.casefold() in words] if words else []
    first = min(named, key=lambda c: words.index(c.casefold()), default=None)
    return first == task.expected


def accuracy(tasks: Sequence[Task], outputs: Iterable[Output]) -> Accuracy:
    """An arm's accuracy on the tasks (an output that is missing or not ok counts as wrong), with
    its 95% Wilson interval."""
    by_id = {o.id: o for o in outputs}
    correct = sum(
        1 for t in tasks if (o := by_id.get(t.id)) is not None and o.status == "ok" and score(t, o.text)
    )
    n = len(tasks)
    interval = wilson(correct, n)
    return Accuracy(
        n=n,
        correct=correct,
        accuracy=correct / n if n else None,
        low=interval[0] if interval else None,
        high=interval[1] if interval else None,
    )


def quality_figures(j: QualityJudgement) -> str:
    """The gate's figures in a reason: B's exact-match share, its first divergences, and the
    A-against-A floor."""
    f = j.b_vs_a
    em = "n/a" if f.exact_match is None else f"{f.exact_match:.1%}"
    first = f.first_divergence
    div = (
        f"first divergence at {f.unit} {first.p50:g} (median of {first.n})"
        if first.n and first.p50 is not None
        else "no divergence"
    )
    agreed = f"agreed {f.unit} before it: mean {f.agreed.mean:.1f}" if f.agreed.mean is not None else ""
    floor = ", ".join(
        f"{x.name} {'n/a' if x.exact_match is None else f'{x.exact_match:.1%}'}" for x in j.floor
    )
    return "; ".join(
        x for x in (f"exact match {em} (n={f.n})", div, agreed, f"A-against-A floor: {floor or 'none'}") if x
    )

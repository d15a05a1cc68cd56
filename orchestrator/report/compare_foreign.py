"""`orch compare RUN FILE`: an orch run's serving levels against a result read from elsewhere
(docs/serving.md, "Compare against a result from elsewhere").

FILE is a vLLM, SGLang or guidellm output that `orch parse` reads (workloads/servingbench.py):
one ServingSummary per load level it states. Each orch level (step, `c8` or `r0.5`) is matched by
its load: `cN` to the file's result with a concurrency cap of N that sent at once (request rate
inf or not stated), `rX` to its result at X requests/s without a cap. The orch level is put in
the file's terms (`ServingSummary.from_level`) and the figures both state are compared: output
tokens/s and the TTFT, ITL, TPOT and E2E p99. A p99 the file does not state, one that rests on
fewer than 100 samples (guidellm states n; vLLM and SGLang state the successful requests, one
TTFT, TPOT and E2E each), or a stated 0, is n/a for that figure.

The band: the file is one result without repeats and states no noise estimate; the band is
max(ln(1 + floor), k x se) as in compare (metrics/decision.py), se from the orch side alone (its
repeats' robust spread, and at least each orch run's own p99 uncertainty and drift) and taken for
the file's side too. Verdicts are the interactive rule's (decision.serving_verdict): a p99 worse
beyond the band with more throughput is "worse for interactive".
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from orchestrator.metrics import decision, noise
from orchestrator.metrics.serving import LATENCY_FIGURES, latency, run_log_se
from orchestrator.models.base import StrictModel
from orchestrator.models.decision import FigureChange, InteractiveVerdict
from orchestrator.models.serving import P99_MIN_SAMPLES
from orchestrator.models.serving_results import LevelSummary, ServingSummary, StatedLatency

_LEVEL = re.compile(r"^(?:c(?P<c>\d+)|r(?P<r>\d+(?:\.\d+)?))$")


class ForeignRow(StrictModel):
    """One orch step and level against the file's result at the same load."""

    step: str
    level: str
    result: int = Field(description="the file's result, 1-based as orch parse numbers them")
    figures: list[FigureChange] = Field(description="output tokens/s, then TTFT, ITL, TPOT, E2E p99")
    verdict: InteractiveVerdict
    reason: str


class ForeignComparison(StrictModel):
    """Every matched orch level against the file; A and B as given on the command line."""

    a: str
    b: str
    file: str
    file_side: Literal["a", "b"]
    tool: str
    orch_runs: int = Field(description="runs of the orch side (1 + repeats)")
    rows: list[ForeignRow]
    unmatched: list[str] = Field(default_factory=list, description="orch levels the file has no result for")
    floor: float
    k: float

    @property
    def worse(self) -> bool:
        return any(decision.is_worse(r.verdict) for r in self.rows)


def load_of(s: ServingSummary) -> str:
    """What load a result states, e.g. `concurrency 8`, `rate 10/s`, `rate 10/s with at most 8 in flight`."""
    rate = s.request_rate
    if s.max_concurrency is not None and rate in (None, "inf"):
        return f"concurrency {s.max_concurrency}"
    if s.max_concurrency is not None:
        return f"rate {rate:g}/s with at most {s.max_concurrency} in flight"
    if rate == "inf":
        return "rate inf (all at once, no cap)"
    if rate is not None:
        return f"rate {rate:g}/s"
    return "no load stated"


def matches(level: str, s: ServingSummary) -> bool:
    """Whether an orch level (`c8`, `r0.5`) ran the load the result states."""
    m = _LEVEL.match(level)
    if m is None:
        return False
    if m.group("c"):
        return s.max_concurrency == int(m.group("c")) and s.request_rate in (None, "inf")
    rate = s.request_rate
    return (
        s.max_concurrency is None
        and isinstance(rate, float)
        and math.isclose(rate, float(m.group("r")), rel_tol=1e-9)
    )


def _foreign_n(s: ServingSummary, figure: str, lat: StatedLatency | None) -> int | None:
    """Samples behind the file's figure: stated (guidellm), else the successful requests for the
    per-request figures (TTFT, TPOT, E2E: one each); ITL's gaps are not stated."""
    if lat is not None and lat.n is not None:
        return lat.n
    return s.completed if figure in ("ttft", "tpot", "e2e") else None


def _p99_or_why(s: ServingSummary, figure: str, where: str) -> tuple[float | None, int | None, str | None]:
    lat: StatedLatency | None = getattr(s, figure)
    n = _foreign_n(s, figure, lat)
    v = lat.p("p99") if lat is not None else None
    if v is None:
        return None, n, f"{where} states no {figure.upper()} p99"
    if v <= 0:
        return None, n, f"{where} states {figure.upper()} p99 {v:g} ms: no ratio"
    short = n if n is not None else s.completed
    if short is not None and short < P99_MIN_SAMPLES:
        return None, n, f"{figure.upper()} p99 of {where} rests on n={short} < {P99_MIN_SAMPLES}: not defined"
    return v, n, None


def _figure(
    name: str,
    orch: list[float],
    theirs: float | None,
    se_orch: list[float],
    *,
    higher_is_better: bool,
    orch_is_a: bool,
    n_orch: int,
    n_theirs: int | None,
    why: str | None,
    floor: float,
    k: float,
) -> FigureChange:
    """The orch side's runs against the file's one figure, the spread from the orch side alone."""
    if why is None and (not noise.log_values(orch) or theirs is None or theirs <= 0):
        why = "missing on the orch side"
    file = [theirs] if theirs is not None else []
    a, b = (orch, file) if orch_is_a else (file, orch)
    n_a, n_b = (n_orch, n_theirs) if orch_is_a else (n_theirs, n_orch)
    return decision.figure_change(
        name, a, b, higher_is_better=higher_is_better, run_se=se_orch, spread_of=(orch_is_a, not orch_is_a),
        n_a=n_a, n_b=n_b, floor=floor, k=k, note=why,
    )  # fmt: skip


def compare_level_foreign(
    step: str,
    orch: Sequence[LevelSummary],
    theirs: ServingSummary,
    *,
    orch_is_a: bool,
    floor: float,
    k: float,
    result: int,
) -> ForeignRow:
    """One orch level (one run, or several repeats) against the file's result at the same load."""
    level, where = orch[0].level, f"the file (result #{result})"
    tput = _figure(
        "output tokens/s",
        [t for s in orch if (t := s.output_tokens_per_s)],
        theirs.output_throughput,
        [v for s in orch if (v := s.drift_log_se.get("tput")) is not None],
        higher_is_better=True, orch_is_a=orch_is_a, n_orch=len(orch), n_theirs=1,
        why=None if theirs.output_throughput is not None else f"{where} states no output tokens/s",
        floor=floor, k=k,
    )  # fmt: skip
    lat: list[FigureChange] = []
    for m in LATENCY_FIGURES:
        value, n, why = _p99_or_why(theirs, m, where)
        mine = [p.p99 for s in orch if (p := latency(s, m)).p99 is not None]
        if not mine and why is None:
            why = f"orch's {m.upper()} p99 not defined (n < {P99_MIN_SAMPLES})"
        lat.append(
            _figure(f"{m.upper()} p99", mine, value, run_log_se(orch, m), higher_is_better=False,
                    orch_is_a=orch_is_a, n_orch=sum(latency(s, m).n for s in orch), n_theirs=n, why=why,
                    floor=floor, k=k)
        )  # fmt: skip
    verdict, reason = decision.serving_verdict(tput, lat)
    return ForeignRow(
        step=step, level=level, result=result, figures=[tput, *lat], verdict=verdict, reason=reason
    )


def compare_foreign(
    orch_levels: Sequence[tuple[str, Sequence[LevelSummary]]],
    results: Sequence[ServingSummary],
    *,
    a: str,
    b: str,
    file_side: Literal["a", "b"],
    file: str,
    floor: float,
    k: float,
    orch_runs: int = 1,
    pick: int | None = None,
) -> ForeignComparison:
    """Each orch (step, level) against the one result of the file at its load.

    orch_levels: (step, the level's summaries over the orch runs) in run order. pick: compare
    with the file's result #pick (1-based) only. Raises ValueError, naming the orch levels and
    what the file states, when no level matches, when a level matches several results (give
    pick), or when pick is out of range.
    """
    if not results:
        raise ValueError(f"{file} states no serving result")
    numbered = list(enumerate(results, 1))
    if pick is not None:
        if not 1 <= pick <= len(results):
            raise ValueError(
                f"--result {pick}: {file} states {len(results)} result(s), numbered 1..{len(results)}"
            )
        numbered = [numbered[pick - 1]]
    rows: list[ForeignRow] = []
    unmatched: list[str] = []
    for step, summaries in orch_levels:
        level = summaries[0].level
        hits = [(i, s) for i, s in numbered if matches(level, s)]
        if not hits:
            unmatched.append(f"{step} {level}")
            continue
        if len(hits) > 1:
            which = ", ".join(f"#{i}" for i, _ in hits)
            raise ValueError(
                f"{file} states {len(hits)} results at the load of {step} {level} ({which}): "
                "say which with --result N (numbered as orch parse shows them)"
            )
        i, theirs = hits[0]
        rows.append(compare_level_foreign(step, summaries, theirs, orch_is_a=file_side == "b",
                                          floor=floor, k=k, result=i))  # fmt: skip
    if not rows:
        mine = ", ".join(f"{st} {ss[0].level}" for st, ss in orch_levels) or "none"
        stated = "; ".join(f"#{i} {load_of(s)}" for i, s in numbered)
        raise ValueError(
            f"no orch level matches a result of {file}: the run has {mine}; the file states {stated} "
            "(a level cN matches a result with concurrency N sent at once, rX one at X requests/s "
            "without a cap)"
        )
    return ForeignComparison(
        a=a, b=b, file=file, file_side=file_side, tool=results[0].tool, orch_runs=orch_runs,
        rows=rows, unmatched=unmatched, floor=floor, k=k,
    )  # fmt: skip

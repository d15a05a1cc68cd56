"""Serving thresholds relative to a stored baseline (docs/serving.md, "Baselines").

A plan's `thresholds.baseline: {name, max_p99_ratio, min_throughput_fraction}` names a run set
with `orch baseline set RUN --name NAME`. At the end of each serving step every level is judged
against the baseline run's same step id and level, from the results store's `serving_levels`
rows (the step's own figures, node ''):

- each p99 (TTFT, ITL, TPOT, E2E) at most max_p99_ratio x the baseline's;
- output tokens/s at least min_throughput_fraction x the baseline's.

Nothing passes unjudged: a level the baseline lacks, a step the baseline ran at another replica
count, a p99 not defined on either side (n < 100), a throughput missing on either side, each is
a miss naming step, level and figure, never a pass.
"""

from __future__ import annotations

from pydantic import Field

from orchestrator.models.base import StrictModel
from orchestrator.models.results import Percentiles
from orchestrator.models.serving import P99_MIN_SAMPLES, ServingBaseline
from orchestrator.models.serving_results import BaselineRatios, LevelSummary

P99_FIGURES = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"))


class StoredP99(StrictModel):
    """One p99 as the store keeps it: None below n = 100."""

    n: int = Field(ge=0)
    p99: float | None = None


class BaselineLevel(StrictModel):
    """The figures of one level of one step of the baseline run (serving_levels, node '')."""

    step: str
    level: str
    replicas: int | None = Field(description="the step's replica count (serving_steps); None if unknown")
    ok: int = Field(ge=0, description="successful requests: the n behind throughput")
    output_tokens_per_s: float | None
    p99: dict[str, StoredP99] = Field(description="ttft, itl, tpot, e2e")


class ServingBaselineFigures(StrictModel):
    """A named baseline's serving figures: the run and its levels by (step, level)."""

    name: str
    run_id: str
    levels: list[BaselineLevel]
    steps: dict[str, int] = Field(description="step id -> replicas, for every serving step of the run")

    def level(self, step: str, level: str) -> BaselineLevel | None:
        return next((lv for lv in self.levels if lv.step == step and lv.level == level), None)


def _ms(v: float) -> str:
    return f"{v:.4g} ms"


def baseline_failures(
    step_id: str, replicas: int, th: ServingBaseline, ref: ServingBaselineFigures, s: LevelSummary
) -> list[str]:
    """What a level misses against the baseline, each naming step, level, figure, both values and
    their n, e.g. `step lab-tiny-r1, level c8: TTFT p99 812 ms is 1.62x baseline mi300x-golden's
    501 ms (> 1.2x; n=100/100)` (n: this run's / the baseline's). A level that cannot be judged
    is a miss that says why."""
    at, name = f"step {step_id}, level {s.level}", f"baseline {ref.name}"
    if step_id not in ref.steps:
        return [f"{at}: {name} (run {ref.run_id}) has no step {step_id}: not judged against it"]
    if ref.steps[step_id] != replicas:
        return [
            f"{at}: {name} ran step {step_id} with {ref.steps[step_id]} replica(s), this run with "
            f"{replicas}: not judged against it"
        ]
    b = ref.level(step_id, s.level)
    if b is None:
        return [
            f"{at}: {name} (run {ref.run_id}) has no level {s.level} of step {step_id}: not judged against it"
        ]
    out: list[str] = []
    if th.max_p99_ratio is not None:
        limit = th.max_p99_ratio
        for key, label in P99_FIGURES:
            mine: Percentiles = getattr(s, f"{key}_ms")
            theirs = b.p99.get(key, StoredP99(n=0))
            ns = f"n={mine.n}/{theirs.n}"
            if mine.p99 is None or theirs.p99 is None:
                short = " and ".join(
                    side for side, p in (("this run", mine.p99), (name, theirs.p99)) if p is None
                )
                out.append(
                    f"{at}: {label} p99 not defined on {short} ({ns}; a p99 needs n >= {P99_MIN_SAMPLES}): "
                    f"the ratio to {name}'s is not shown within {limit:g}x"
                )
            elif theirs.p99 <= 0:
                out.append(f"{at}: {label} p99 of {name} is {_ms(theirs.p99)}: no ratio ({ns})")
            elif (ratio := mine.p99 / theirs.p99) > limit:
                out.append(
                    f"{at}: {label} p99 {_ms(mine.p99)} is {ratio:.3g}x {name}'s {_ms(theirs.p99)} "
                    f"(> {limit:g}x; {ns})"
                )
    if th.min_throughput_fraction is not None:
        frac = th.min_throughput_fraction
        mine_t, theirs_t = s.output_tokens_per_s, b.output_tokens_per_s
        ns = f"n={s.ok}/{b.ok} successful requests"
        if mine_t is None or theirs_t is None or theirs_t <= 0:
            side = "this run" if mine_t is None else name
            out.append(f"{at}: output tokens/s missing on {side} ({ns}): not shown >= {frac:g}x {name}'s")
        elif mine_t < frac * theirs_t:
            out.append(
                f"{at}: output tokens/s {mine_t:.4g} is {mine_t / theirs_t:.3g}x {name}'s {theirs_t:.4g} "
                f"(< {frac:g}x; {ns})"
            )
    return out


def baseline_ratios(
    step_id: str, replicas: int, th: ServingBaseline, ref: ServingBaselineFigures, s: LevelSummary
) -> BaselineRatios | None:
    """The level's ratios to the baseline's same step and level (for the reports); None where
    baseline_failures does not judge it (no such step or level, other replicas)."""
    b = ref.level(step_id, s.level)
    if b is None or ref.steps.get(step_id) != replicas:
        return None
    p99: dict[str, float | None] = {}
    for key, _ in P99_FIGURES:
        mine: Percentiles = getattr(s, f"{key}_ms")
        theirs = b.p99.get(key, StoredP99(n=0)).p99
        p99[key] = mine.p99 / theirs if mine.p99 is not None and theirs is not None and theirs > 0 else None
    mt, bt = s.output_tokens_per_s, b.output_tokens_per_s
    return BaselineRatios(
        name=ref.name,
        run_id=ref.run_id,
        p99=p99,
        throughput=mt / bt if mt is not None and bt is not None and bt > 0 else None,
        max_p99_ratio=th.max_p99_ratio,
        min_throughput_fraction=th.min_throughput_fraction,
    )

"""B's serving faults against A's in a migration's faults phase (docs/migration.md, "Faults").

The plan's faults during serving steps (a kill-worker under load) run once on A in freeze (the
plan run `faults-A`, while the nodes hold A) and once on B in the faults phase (`faults`). Each
plan fault of each serving step is set beside A's: its outage and its time to steady over its
repeats, judged by metrics/decision.recovery_figure_change (lower is better; medians, band in
seconds max(k x se, FAULT_FLOOR x A's median), as `orch decide` judges them). B is worse when
either figure is worse, or when more repeats of B than of A never got back to steady.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.metrics.decision import recovery_figure_change
from orchestrator.models.decision import Direction, FigureChange
from orchestrator.models.migrate import PlanRun, ServingFaultDecision, ServingFaultFigures

NO_OUTAGE = ("recovered", "no-interruption")
"""Statuses where a repeat without a measured outage had none (0 s): nothing failed."""


def _outages(figs: Sequence[ServingFaultFigures]) -> list[float]:
    return [f.outage_s if f.outage_s is not None else 0.0 for f in figs
            if f.outage_s is not None or f.status in NO_OUTAGE]  # fmt: skip


def _secs(c: FigureChange) -> str:
    def one(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1f} s"

    return f"B {one(c.b)} vs A {one(c.a)}" + (f" ({c.note})" if c.note else "")


def fault_decisions(a: PlanRun, b: PlanRun) -> list[ServingFaultDecision]:
    """Each (serving step, plan fault) B ran, B against A (n/a where A did not run it)."""
    keys = list(dict.fromkeys((f.step, f.fault) for f in b.serving_faults))
    out = []
    for step, fault in keys:
        fa = [f for f in a.serving_faults if (f.step, f.fault) == (step, fault)]
        fb = [f for f in b.serving_faults if (f.step, f.fault) == (step, fault)]
        outage = recovery_figure_change("outage (s)", _outages(fa), _outages(fb))
        steady = recovery_figure_change(
            "time to steady (s)",
            [f.to_steady_s for f in fa if f.to_steady_s is not None],
            [f.to_steady_s for f in fb if f.to_steady_s is not None],
        )
        lost = sum(f.status == "not-recovered" for f in fb)
        lost_a = sum(f.status == "not-recovered" for f in fa)
        verdict: Direction | None
        if lost > lost_a or "worse" in (outage.change, steady.change):
            verdict = "worse"
        elif outage.change == steady.change == "n/a":
            verdict = None
        elif "better" in (outage.change, steady.change):
            verdict = "better"
        else:
            verdict = "same"
        word = verdict or "n/a"
        words = f"{fault} on {step}: outage {_secs(outage)}; steady {_secs(steady)}"
        if lost:
            words += f"; B not steady again in {lost} of {len(fb)} repeats (A {lost_a} of {len(fa)})"
        out.append(ServingFaultDecision(step=step, fault=fault, outage=outage, to_steady=steady,
                                        verdict=word, reason=f"{words}: {word}"))  # fmt: skip
    return out

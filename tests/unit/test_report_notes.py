"""Drift, fault-transport warnings and the concurrent mark reach the report's step notes."""

from __future__ import annotations

from orchestrator.models.plan import Step
from orchestrator.models.run import StepResult
from orchestrator.report.common import step_notes


def result(**kw: object) -> StepResult:
    step = Step(id="n2xg1", index=1, nnodes=2, ranks_per_node=1, nodes=["node1", "node2"], world_size=2,
                collectives=["all_reduce"], sizes=[1024])  # fmt: skip
    return StepResult.model_validate({"step": step, "verdict": "pass", **kw})


def test_notes_carry_reasons_then_warnings() -> None:
    notes = step_notes(
        result(reasons=["#wrong = 3"], warnings=["node2: torch 2.13.0 -> 2.12.0 (needs porting)"])
    )
    assert notes == ["#wrong = 3", "warning: node2: torch 2.13.0 -> 2.12.0 (needs porting)"]


def test_concurrent_steps_are_marked() -> None:
    assert any("concurrent" in n for n in step_notes(result(concurrent=True)))
    assert step_notes(result()) == []

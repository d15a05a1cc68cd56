"""Serving steps with several load generator processes (load.procs, docs/serving.md 'Several
generator processes'): the plan field, what `orch plan show` says of it, the one factory that
picks the generator, and a serving step end to end against the stand-in engine
(tests/unit/sse_server.py run as a program, a test double) with load.procs: 2."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_serving_run import setup

from orchestrator.cli.plan import serving_summary
from orchestrator.models.serving import ServingLoad
from orchestrator.plan import load_plan

LOAD: dict[str, Any] = {"concurrency": [2], "input_tokens": {"kind": "fixed", "tokens": 8},
                        "output_tokens": {"kind": "fixed", "tokens": 4}, "requests": 10}  # fmt: skip


def test_procs_defaults_to_one_takes_auto_or_a_count_and_refuses_the_rest() -> None:
    assert ServingLoad.model_validate(LOAD).generator_procs() == 1
    assert ServingLoad.model_validate({**LOAD, "procs": 3}).generator_procs() == 3
    assert ServingLoad.model_validate({**LOAD, "procs": "auto"}).generator_procs() == (os.cpu_count() or 1)
    for bad in (0, -1, "many", 1.5, 2000):
        with pytest.raises(ValidationError):
            ServingLoad.model_validate({**LOAD, "procs": bad})


def with_procs(tmp_path: Path, procs: str, **kw: Any) -> Any:
    """test_serving_run's setup (plan, inventory, stand-in engine) with load.procs set."""
    req, pids = setup(tmp_path, **kw)
    plan = Path(req.plan)
    at = "      request_timeout_s: 30\n"
    text = plan.read_text().replace(at, f"{at}      procs: {procs}\n")
    assert f"procs: {procs}" in text
    plan.write_text(text)
    return req, pids


def test_plan_show_states_the_processes_and_says_nothing_for_one(tmp_path: Path) -> None:
    req, _ = with_procs(tmp_path, "auto")
    w = load_plan(req.plan).serving[0]
    line = next(x for x in serving_summary(w).splitlines() if "generator:" in x)
    assert f"{os.cpu_count() or 1} processes (auto" in line and "capacity probe" in line
    one = w.model_copy(update={"load": w.load.model_copy(update={"procs": 1})})
    assert "generator:" not in serving_summary(one)

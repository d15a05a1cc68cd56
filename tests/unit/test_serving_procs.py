"""Serving steps with several load generator processes (load.procs, docs/serving.md 'Several
generator processes'): the plan field, what `orch plan show` says of it, the one factory that
picks the generator, and a serving step end to end against the stand-in engine
(tests/unit/sse_server.py run as a program, a test double) with load.procs: 2."""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from pydantic import ValidationError
from sse_server import HOLD_TOKENS, Behaviour, sse_server
from test_serving_run import engine_pids, gone, setup

from orchestrator.cli.plan import serving_summary
from orchestrator.errors import EXIT_INFRA, EXIT_OK
from orchestrator.metrics.capacity import generator_limit
from orchestrator.metrics.serving import parse_records, summarize_level
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.models.serving import ServingLoad, ServingWorkload
from orchestrator.models.serving_results import RequestRecord
from orchestrator.plan import load_plan
from orchestrator.runs.capacity import capacity_template
from orchestrator.runs.scale_test import scale_test
from orchestrator.workloads.loadgen import LoadGenerator, LoadSpec, Target, generator_procs, level_specs
from orchestrator.workloads.loadgen_multi import MultiLoadGenerator
from orchestrator.workloads.sessions import SessionGenerator, generator_for

LOAD: dict[str, Any] = {"concurrency": [2], "input_tokens": {"kind": "fixed", "tokens": 8},
                        "output_tokens": {"kind": "fixed", "tokens": 4}, "requests": 10}  # fmt: skip


def test_procs_defaults_to_one_takes_auto_or_a_count_and_refuses_the_rest() -> None:
    assert generator_procs(ServingLoad.model_validate(LOAD)) == 1
    assert generator_procs(ServingLoad.model_validate({**LOAD, "procs": 3})) == 3
    assert generator_procs(ServingLoad.model_validate({**LOAD, "procs": "auto"})) == (os.cpu_count() or 1)
    for bad in (0, -1, "many", 1.5, 2000):
        with pytest.raises(ValidationError):
            ServingLoad.model_validate({**LOAD, "procs": bad})


def with_procs(tmp_path: Path, procs: str, **kw: Any) -> tuple[ScaleTestRequest, Path]:
    """test_serving_run's setup (plan, inventory, stand-in engine) with load.procs set."""
    req, pids = setup(tmp_path, **kw)
    plan = Path(str(req.plan))
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


def test_the_factory_runs_fixed_levels_rates_and_probes_in_procs_and_sessions_in_one(tmp_path: Path) -> None:
    req, _ = with_procs(tmp_path, "2")
    w = load_plan(req.plan).serving[0]
    targets = [Target("localhost", "http://127.0.0.1:9")]
    c1, c4 = level_specs(w, targets)
    assert c1.procs == c4.procs == 2 and isinstance(generator_for(c4, print), MultiLoadGenerator)
    assert isinstance(generator_for(c4, print, lambda i, o: None), LoadGenerator)  # on_output: one

    def with_load(**kw: Any) -> ServingWorkload:
        d = w.model_dump()
        d["load"].update(kw)
        return ServingWorkload.model_validate(d)

    search = {"min_rate": 1, "max_rate": 8, "precision": 1, "target_attainment": 0.9}
    probe = capacity_template(with_load(capacity=search), targets, datasets={})
    assert probe.procs == 2 and isinstance(generator_for(probe, print), MultiLoadGenerator)
    sess = with_load(sessions={"sessions": 20, "turns": 5})
    *_, session_level = level_specs(sess, targets)
    assert session_level.sessions is not None and session_level.procs == 1
    assert isinstance(generator_for(session_level, print), SessionGenerator)
    assert "the session level in one" in serving_summary(sess)


def test_a_serving_step_with_two_processes_records_every_request_once(tmp_path: Path) -> None:
    req, pids = with_procs(tmp_path, "2")
    plan = Path(str(req.plan))
    at = "      concurrency: [1, 4]\n"
    plan.write_text(plan.read_text().replace(at, f"{at}      rates: [50]\n"))
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    (step,) = result.serving
    w = load_plan(req.plan).serving[0]
    levels = {lv.level: lv for lv in step.levels}
    assert list(levels) == ["c1", "c4", "r50"]
    for level, procs in (("c1", {0}), ("c4", {0, 1}), ("r50", {0, 1})):  # c1: 1 cannot be split in 2
        path = result.run_dir / f"steps/fake-r1/records-{level}.jsonl"
        recs = parse_records(path.read_text().splitlines())
        # every request (2 warm-up, 100 counted) recorded once, by the process its id says
        assert sorted(r.id for r in recs) == list(range(102)), level
        assert sorted(r.id for r in recs if r.warmup) == [0, 1] and {r.status for r in recs} == {"ok"}
        assert {r.proc for r in recs} == procs and all(r.proc == r.id % len(procs) for r in recs)
        # the level's summary is what its records give
        s = levels[level].summary
        assert s is not None and s.n == 100
        assert s == summarize_level(recs, w.slos)
    # the late-sender check reads the merged open-loop records: on time here, late when sends lag
    recs = parse_records((result.run_dir / "steps/fake-r1/records-r50.jsonl").read_text().splitlines())
    counted = [r for r in recs if not r.warmup]
    assert all(r.scheduled is not None for r in counted)
    assert statistics.median(r.send - r.scheduled for r in counted if r.scheduled is not None) < 0.5
    assert generator_limit([r.model_copy(update={"send": r.send + 1.0}) for r in counted], 50.0)[1]
    assert all(gone(p) for p in engine_pids(pids)) and engine_pids(pids)


def test_the_step_time_limit_ends_a_level_running_in_two_processes(tmp_path: Path) -> None:
    # the stand-in waits 0.5 s before each first token: 100 requests at c4 outlast a 10 s step
    req, pids = with_procs(tmp_path, "2", engine_flags="--ttft 0.5")
    plan = Path(str(req.plan))
    text = plan.read_text().replace("concurrency: [1, 4]", "concurrency: [4]")
    plan.write_text(text.replace("step_timeout_s: 300", "step_timeout_s: 10"))
    result = scale_test(req)
    assert result.exit_code == EXIT_INFRA
    (step,) = result.serving
    assert step.verdict == "infra" and any("time limit (10 s" in r and "level c4" in r for r in step.reasons)
    recs = parse_records((result.run_dir / "steps/fake-r1/records-c4.jsonl").read_text().splitlines())
    assert len(recs) < 102 and len({r.id for r in recs}) == len(recs)  # ended early, each once
    assert all(gone(p) for p in engine_pids(pids)) and engine_pids(pids)


def test_ctrl_c_in_the_generator_processes_leaves_the_level_to_the_parent_s_stop() -> None:
    # Ctrl-C signals the terminal's whole process group: the generator processes ignore it, and
    # the parent's stop() ends the level, its requests in flight aborted, not a failed process
    b = Behaviour()
    with sse_server(b) as url:
        recs: list[RequestRecord] = []
        s = LoadSpec(targets=[Target("node1", url)], model="m", input_tokens=[8], output_tokens=[HOLD_TOKENS],
                     concurrency=2, requests=6)  # fmt: skip
        gen = MultiLoadGenerator(s, recs.append, procs=2)
        failed: list[BaseException] = []

        def run() -> None:
            try:
                gen.run()
            except BaseException as e:
                failed.append(e)

        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(b.bodies) < 2:  # one request held in each process
            time.sleep(0.02)
        children = [p for p in psutil.Process().children() if "spawn_main" in " ".join(p.cmdline())]
        assert len(children) == 2
        for p in children:
            os.kill(p.pid, signal.SIGINT)
        time.sleep(0.3)  # time for a process that did not ignore it to fail (none should)
        gen.stop()
        t.join(30)
        b.hold.set()
    assert not t.is_alive() and failed == []
    assert len(recs) == 2 and {r.proc for r in recs} == {0, 1} and all(r.status == "aborted" for r in recs)

"""Faults during a serving step, end to end on the local backend with the stand-in engine
(tests/unit/sse_server.py as `<prefix>/bin/transformers`, a test double, not a real engine):
a plan fault kills the engine (NODE:engine) during a load level, the restart policy starts it
again, the records show the outage, and the plan's refusals name what is wrong."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from test_serving_run import engine_pids, gone, lab_cluster, setup, slurm_engine

from orchestrator.errors import EXIT_INFRA, ConfigError
from orchestrator.runs.scale_test import scale_test

PLAN = """
name: serve-fault
collectives: []
serving:
  - name: fake
    engine: transformers
    model: {{path: /opt/orch/models/fake}}
    dtype: float32
    load:
      concurrency: [1, 2]
      input_tokens: {{kind: fixed, tokens: 8}}
      output_tokens: {{kind: fixed, tokens: 4}}
      requests: {requests}
      duration_s: {duration}
      warmup_requests: 2
      request_timeout_s: 30
    restart: {{max_restarts: {restarts}}}
    steady: {{window: 5, tolerance: 1.0}}
    health_timeout_s: 60
faults:
  - kind: {kind}
    step: {step}
    level: {level}
    target: {target}
    at_s: {at_s}
    duration: 1
step_timeout_s: 300
"""


def plan_setup(tmp_path: Path, *, restarts: int = 1, kind: str = "kill-worker", step: str = "fake-r1",
               level: str = "c2", target: str = "localhost:engine", at_s: float = 1.0,
               requests: int = 100000, duration: float = 6) -> tuple[object, Path]:  # fmt: skip
    req, pids = setup(tmp_path, engine_flags="--ttft 0.005 --itl 0.005")
    assert req.plan is not None
    Path(req.plan).write_text(PLAN.format(restarts=restarts, kind=kind, step=step, level=level, target=target,
                                          at_s=at_s, requests=requests, duration=duration))  # fmt: skip
    # one node of one: a fault hits all of the cluster, above the default max_share
    return req.model_copy(update={"force_faults": True}), pids


def test_kill_engine_at_a_level_restarts_it_and_records_the_outage(tmp_path: Path) -> None:
    req, pids = plan_setup(tmp_path)
    result = scale_test(req)  # type: ignore[arg-type]
    (step,) = result.serving
    assert step.verdict == "pass", step.reasons
    # the engine process was killed (by its PID), a new one started, and both are gone now
    first, second = engine_pids(pids)
    assert all(gone(p) for p in (first, second))
    (restart,) = step.restarts
    assert restart.node == "localhost" and restart.attempt == 1 and restart.healthy_at is not None
    assert "job" in restart.reason and restart.job_id is not None
    (fault,) = step.faults
    assert fault.kind == "kill-worker" and fault.target == "localhost:engine" and fault.level == "c2"
    assert fault.outcome == "done" and fault.record is not None
    rec = json.loads((result.run_dir / fault.record).read_text())
    assert rec["resolved"] == [str(first)]  # the finder found the engine by ORCH_ENGINE
    assert fault.restarts == step.restarts
    r = fault.recovery
    assert r is not None and r.level == "c2" and r.failed >= 1 and r.pre_fault_n == 5
    assert r.to_first_failure_s is not None and r.to_first_success_s is not None
    assert r.to_first_success_s > r.to_first_failure_s
    # the records: failed requests after the fault, successful ones after the restart
    folder = result.run_dir / "steps/fake-r1"
    recs = [json.loads(x) for x in (folder / "records-c2.jsonl").read_text().splitlines()]
    failed = [r for r in recs if r["status"] != "ok" and r["end"] >= fault.injected_at]
    assert failed, "no request failed after the kill"
    assert any(r["status"] == "ok" and r["send"] >= restart.healthy_at for r in recs)
    c1 = [json.loads(x) for x in (folder / "records-c1.jsonl").read_text().splitlines()]
    assert {r["status"] for r in c1} == {"ok"}  # the fault hit its level only
    from orchestrator.cli.run import serving_fault_lines

    line, restarted = serving_fault_lines(step)
    assert line.startswith("fake-r1 fault kill-worker localhost:engine at c2 (repeat 1): done; recovered: ")
    for text in ("to first failure ", "to first success ", "to steady ", "failed ", "TTFT p99 during "):
        assert text in line, text
    assert restarted.startswith("fake-r1: engine on localhost restarted as job ")
    assert "healthy after" in restarted
    saved = json.loads((result.run_dir / "steps/fake-r1/serving.json").read_text())
    assert len(saved["restarts"]) == 1 and saved["faults"][0]["outcome"] == "done"


def test_without_restarts_the_step_ends_infra_naming_the_engine(tmp_path: Path) -> None:
    req, pids = plan_setup(tmp_path, restarts=0)
    result = scale_test(req)  # type: ignore[arg-type]
    assert result.exit_code == EXIT_INFRA
    (step,) = result.serving
    assert step.verdict == "infra" and step.restarts == []
    assert any("engine on localhost ended during level c2" in r for r in step.reasons), step.reasons
    (pid,) = engine_pids(pids)
    assert gone(pid)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"level": "c8"}, "serving step fake-r1 has no level 'c8' (its levels: c1, c2)"),
        ({"kind": "restart-container"}, "its engines run as processes"),
        ({"step": "nope"}, "step 'nope' is not a step of the plan (fake-r1)"),
        ({"target": "localhost:0"}, "an engine has no ranks; name it as localhost:engine"),
    ],
)
def test_plan_faults_on_serving_steps_are_refused_when_the_plan_is_read(
    tmp_path: Path, changes: dict[str, str], message: str
) -> None:
    req, _ = plan_setup(tmp_path, **changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        scale_test(req)  # type: ignore[arg-type]
    assert not (tmp_path / "runs").exists()


def test_a_level_on_a_collective_step_is_refused(tmp_path: Path) -> None:
    req, _ = plan_setup(tmp_path, step="n1xg1")
    assert req.plan is not None  # type: ignore[attr-defined]
    plan = Path(req.plan)  # type: ignore[attr-defined]
    ladder = (
        "ladder: {nodes: [1], ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 1K, max: 4K, factor: 4}\nwarmup_iters: 1\niters: 2\n"
    )
    plan.write_text(plan.read_text().replace("collectives: []\n", ladder))
    with pytest.raises(ConfigError, match="level 'c2' is for serving steps; step 'n1xg1' is a collective"):
        scale_test(req)  # type: ignore[arg-type]
    plan.write_text(plan.read_text().replace("    level: c2\n", ""))
    with pytest.raises(ConfigError, match="NODE:engine names a serving engine; step 'n1xg1' is a collective"):
        scale_test(req)  # type: ignore[arg-type]


def test_pause_repeats_within_the_level_and_the_ones_it_ends_before_are_skipped(tmp_path: Path) -> None:
    req, pids = plan_setup(tmp_path, kind="pause-worker", level="c1", at_s=0.3, duration=4)
    assert req.plan is not None  # type: ignore[attr-defined]
    plan = Path(req.plan)  # type: ignore[attr-defined]
    plan.write_text(plan.read_text().replace("    duration: 1\n", "    duration: 0.3\n    repeat: 30\n"))
    result = scale_test(req)  # type: ignore[arg-type]
    (step,) = result.serving
    assert step.verdict == "pass", step.reasons
    assert [f.repeat for f in step.faults] == list(range(1, 31))
    done = [f for f in step.faults if f.record is not None]
    skipped = [f for f in step.faults if f.outcome == "skipped: level ended"]
    assert done and skipped and len(done) + len(skipped) == 30
    assert all(f.outcome == "reverted" and f.level == "c1" for f in done)
    for a, b in itertools.pairwise(done):  # one at a time: the next after the last's revert
        assert a.reverted_at is not None and b.injected_at > a.reverted_at
    assert all(f.recovery is not None for f in done)
    from orchestrator.cli.run import serving_fault_lines

    spread = [x for x in serving_fault_lines(step) if " repeats (" in x]
    if len(done) >= 2:  # repeats give a spread: min/median/max with n
        (line,) = spread
        assert f"over {len(done)} repeats" in line and "min/median/max: to first failure" in line
    # paused and continued, never killed: one engine process, no restart, gone at the end
    (pid,) = engine_pids(pids)
    assert gone(pid) and step.restarts == []


def test_on_slurm_the_engine_job_carries_the_selector_and_a_restart_appends_to_its_log(
    tmp_path: Path,
) -> None:
    from orchestrator.scheduler.slurm import SlurmScheduler

    _, spec, _ = slurm_engine(tmp_path, 0, "node1", {"ORCH_ENGINE": "run-1.lab-tiny-r1"})
    sched = SlurmScheduler()
    script = sched.render(spec)
    assert "export ORCH_ENGINE=run-1.lab-tiny-r1\n" in script and "export ORCH_ENGINE_NODE=node1\n" in script
    assert "--open-mode=append" not in sched.sbatch_argv(spec)
    # a restart resubmits the same job, its output appended to the same log
    again = spec.model_copy(update={"append_output": True})
    assert sched.render(again) == script and "--open-mode=append" in sched.sbatch_argv(again)


def test_the_lab_recovery_example_plan_passes_its_checks_on_a_lab_inventory(tmp_path: Path) -> None:
    from orchestrator.models.fault import PlanFault
    from orchestrator.plan import expand_serving_steps, expand_steps, resolve_plan
    from orchestrator.runs.step_faults import check_plan_faults, fault_level

    cluster = lab_cluster(tmp_path)
    plan = resolve_plan(str(Path(__file__).parents[2] / "docs/examples/serving-recovery-lab.yaml"), None)
    (step,) = expand_serving_steps(plan, cluster)
    assert check_plan_faults(plan, cluster, expand_steps(plan, cluster), False, [step]) == []
    (pf,) = plan.faults
    assert step.id == "lab-tiny-r1" and step.nodes == ["node1"] and fault_level(pf, step) == "c4"
    assert plan.serving[0].restart.max_restarts == 3
    # a link fault on the engine's node hits the client-to-engine path: accepted as for collectives
    delay = PlanFault(kind="delay", step=step.id, level="c4", target="node1:fab0", params={"delay_ms": 20})
    assert check_plan_faults(plan.model_copy(update={"faults": [delay]}), cluster, [], False, [step]) == []
    # on node2, which runs no engine of the step, the same fault is refused
    moved = plan.model_copy(update={"faults": [pf.model_copy(update={"target": "node2:engine"})]})
    with pytest.raises(ConfigError, match="runs no engine on node2"):
        check_plan_faults(moved, cluster, [], False, [step])


def test_a_fault_that_finds_no_engine_is_recorded_failed_and_the_step_goes_on(tmp_path: Path) -> None:
    req, pids = plan_setup(tmp_path, duration=3)
    assert req.plan is not None  # type: ignore[attr-defined]
    plan = Path(req.plan)  # type: ignore[attr-defined]
    plan.write_text(plan.read_text().replace(
        "    duration: 1\n", "    duration: 1\n    params: {match_env: ORCH_ENGINE=another-run.fake-r1}\n"
    ))  # fmt: skip
    result = scale_test(req)  # type: ignore[arg-type]
    (step,) = result.serving
    assert step.verdict == "pass", step.reasons
    (fault,) = step.faults
    assert fault.outcome.startswith("failed: localhost: no serving engine found")
    assert fault.recovery is None and fault.record is None and step.restarts == []
    (pid,) = engine_pids(pids)  # never killed, stopped at the end
    assert gone(pid)

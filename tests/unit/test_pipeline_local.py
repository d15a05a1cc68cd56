"""scale-test end to end on the local backend: real collbench ranks (gloo on loopback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.models.events import RunEvent
from orchestrator.models.plan import PlanOverrides
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.runs.scale_test import scale_test

PLAN = """
name: tiny
ladder: {nodes: [1], ranks_per_node: [1, 2]}
collectives: [all_reduce, sendrecv]
sizes: {min: 1K, max: 16K, factor: 4}
warmup_iters: 1
iters: 2
step_timeout_s: 120
thresholds:
  busbw:
    - {collective: all_reduce, min_gbs: %s}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "local.ini"
    inv.write_text("localhost ansible_connection=local gpu_vendor=none gpus_per_node=2\n")
    return inv


def run(tmp_path: Path, inventory: Path, min_gbs: str) -> tuple[int, Path]:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN % min_gbs)
    req = ScaleTestRequest(inventory=inventory, plan=str(plan), out_dir=tmp_path / "runs")
    result = scale_test(req)
    return result.exit_code, result.run_dir


def test_unreachable_threshold_fails_and_names_steps(tmp_path: Path, inventory: Path) -> None:
    code, run_dir = run(tmp_path, inventory, "1000")  # 1 TB/s: no CPU can do it
    assert code == EXIT_THRESHOLDS
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "failed"
    verdicts = {s["step"]["id"]: (s["verdict"], s["reasons"]) for s in result["steps"]}
    assert set(verdicts) == {"n1xg1", "n1xg2"}
    for verdict, reasons in verdicts.values():
        assert verdict == "fail"
        assert any("all_reduce" in r and "1000" in r for r in reasons)
    events = [json.loads(line)["event"] for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    assert events[0] == "run_started" and events[-1] == "run_finished"
    assert events.count("step_done") == 2


def test_reachable_threshold_accepts(tmp_path: Path, inventory: Path) -> None:
    code, run_dir = run(tmp_path, inventory, "0.000001")
    result = json.loads((run_dir / "result.json").read_text())
    # with one rank all_reduce moves no bytes between ranks: busbw 0 < threshold is a real failure
    one_rank = next(s for s in result["steps"] if s["step"]["id"] == "n1xg1")
    two_ranks = next(s for s in result["steps"] if s["step"]["id"] == "n1xg2")
    assert one_rank["verdict"] == "fail"
    assert two_ranks["verdict"] == "pass"
    assert two_ranks["summary"]["all_reduce"]["busbw_gbs"] > 0
    assert code == EXIT_THRESHOLDS


def test_plan_larger_than_cluster_refused_before_running(tmp_path: Path, inventory: Path) -> None:
    req = ScaleTestRequest(
        inventory=inventory,
        plan="smoke",
        overrides=PlanOverrides(gpus_per_node="4"),
        out_dir=tmp_path / "runs",
    )
    with pytest.raises(ConfigError, match="n1xg4"):
        scale_test(req)
    assert not (tmp_path / "runs").exists()


def test_accepted_run_exit_zero(tmp_path: Path, inventory: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.split("thresholds:")[0].replace("[1, 2]", "[2]"))
    result = scale_test(ScaleTestRequest(inventory=inventory, plan=str(plan), out_dir=tmp_path / "runs"))
    assert result.exit_code == EXIT_OK
    assert result.nodes == {"localhost": "pass"}
    step = result.steps[0]
    assert {(r.collective, r.size_bytes) for r in step.rows} == {
        (c, s) for c in ("all_reduce", "sendrecv") for s in (1024, 4096, 16384)
    }
    assert all(r.out_of_place.wrong == 0 for r in step.rows)


class _Broken:
    def event(self, ev: RunEvent) -> None:
        raise RuntimeError(f"display gone ({ev.kind})")


class _Recorder:
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def event(self, ev: RunEvent) -> None:
        self.kinds.append(ev.kind)


def test_a_listener_that_raises_does_not_stop_the_run(
    tmp_path: Path, inventory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.split("thresholds:")[0].replace("[1, 2]", "[1]"))
    after = _Recorder()
    req = ScaleTestRequest(inventory=inventory, plan=str(plan), out_dir=tmp_path / "runs")
    with caplog.at_level("ERROR", logger="orchestrator.runs.lifecycle"):
        result = scale_test(req, listeners=[_Broken(), after])
    assert result.exit_code == EXIT_OK
    # the listener after the broken one got every event, to the end
    assert after.kinds[0] == "run_started" and after.kinds[-1] == "run_finished"
    failed = [r for r in caplog.records if "listener _Broken failed" in r.getMessage()]
    assert len(failed) == len(after.kinds)
    assert all(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in failed)


def test_no_poll_interval_is_sat_out_after_the_last_step(
    tmp_path: Path, inventory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run finishes as soon as its last step is judged (docs/benchmarks.md: where the wall goes)."""
    import time

    from orchestrator.runs import executor

    seen: list[str] = []
    interval = 0.0123  # a value only the runner's poll loop sleeps
    real_sleep = time.sleep

    def sleep(s: float) -> None:
        if s == interval:
            seen.append("poll_sleep")
        real_sleep(s)

    monkeypatch.setattr(executor, "POLL_INTERVAL_S", interval)
    monkeypatch.setattr(time, "sleep", sleep)
    rec = _Recorder()
    rec.kinds = seen
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.split("thresholds:")[0].replace("[1, 2]", "[1]"))
    result = scale_test(ScaleTestRequest(inventory=inventory, plan=str(plan), out_dir=tmp_path / "runs"),
                        listeners=[rec])  # fmt: skip
    assert result.exit_code == EXIT_OK
    assert "poll_sleep" in seen  # the step was polled while it ran
    last_done = max(i for i, k in enumerate(seen) if k == "step_done")
    assert seen[last_done + 1 :] == ["run_finished"], seen[last_done:]

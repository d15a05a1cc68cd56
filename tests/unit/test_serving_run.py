"""scale-test runs a serving plan end to end on the local backend, with a stand-in engine.

The "engine" is tests/unit/sse_server.py run as a program (a test double, not a real engine's
output), installed as `<prefix>/bin/transformers` of a fake stack prefix: orch builds the
`transformers serve` command line from the plan and starts it through the local scheduler, as it
would start the real one. The tests check the run's files, figures, verdicts and exit codes, and
that the engine process is gone (by its PID) after success, after a failing threshold, after an
engine that never became healthy, and after SIGTERM of orch.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from orchestrator.errors import EXIT_INFRA, EXIT_INTERRUPTED, EXIT_OK, EXIT_THRESHOLDS, ConfigError
from orchestrator.inventory import load_inventory
from orchestrator.models.cluster import Cluster
from orchestrator.models.requests import ScaleTestRequest
from orchestrator.models.serving_results import EngineRun
from orchestrator.plan import expand_serving_steps, load_plan
from orchestrator.remote.nodefiles import RunDataLayout, run_data_layout
from orchestrator.runs.scale_test import scale_test
from orchestrator.runs.serving import engine_job
from orchestrator.scheduler.base import JobSpec
from orchestrator.store.load import load_run

SSE = Path(__file__).with_name("sse_server.py")
REPO = Path(__file__).resolve().parents[2]

PLAN = """
name: serve-test
collectives: []
serving:
  - name: fake
    engine: transformers
    model: {{path: /opt/orch/models/fake}}
    dtype: float32
    engine_args: ["--continuous-batching"]
    replicas: {replicas}
    load:
      concurrency: [1, 4]
      input_tokens: {{kind: fixed, tokens: 8}}
      output_tokens: {{kind: fixed, tokens: 4}}
      requests: {requests}
      warmup_requests: 2
      request_timeout_s: 30
    slos: {{ttft_p99_ms: 60000}}
    thresholds: {{max_ttft_p99_ms: {ttft_limit}}}
    price_per_node_hour: 2.0
    health_timeout_s: {health}
step_timeout_s: 300
"""


def setup(tmp_path: Path, *, engine_flags: str = "", ttft_limit: str = "60000", health: int = 60,
          requests: int = 100, hosts: tuple[str, ...] = ("localhost",),
          replicas: str = "[1]") -> tuple[ScaleTestRequest, Path]:  # fmt: skip
    """A local inventory, the plan, and a stack prefix whose bin/transformers is the stand-in."""
    inv = tmp_path / "local.ini"
    inv.write_text("".join(f"{h} ansible_connection=local gpu_vendor=none gpus_per_node=1\n" for h in hosts))
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.format(ttft_limit=ttft_limit, health=health, requests=requests, replicas=replicas))
    bindir = tmp_path / "prefix" / "bin"
    bindir.mkdir(parents=True)
    python = bindir / "python"  # orch's own Python (a link would lose its venv), for the ladder
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    pids = tmp_path / "engine.pids"
    engine = bindir / "transformers"
    engine.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SSE}" --pid-file "{pids}" {engine_flags} "$@"\n')
    engine.chmod(0o755)
    req = ScaleTestRequest(
        inventory=inv, plan=str(plan), out_dir=tmp_path / "runs", python=str(bindir / "python")
    )
    return req, pids


def engine_pids(pids: Path) -> list[int]:
    return [int(x) for x in pids.read_text().split()] if pids.exists() else []


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_serving_plan_runs_end_to_end(tmp_path: Path) -> None:
    req, pids = setup(tmp_path)
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    (step,) = result.serving
    assert step.step.id == "fake-r1" and step.verdict == "pass"
    run = result.run_dir
    # the engine's command came from the plan, and its log is kept in the step folder
    (eng,) = step.engines
    assert eng.argv[1:4] == ["serve", "/opt/orch/models/fake", "--device"]
    assert "--continuous-batching" in eng.argv and eng.argv[eng.argv.index("--host") + 1] == "127.0.0.1"
    assert eng.health == "healthy" and eng.load_to_health_s is not None
    assert eng.load_to_first_answer_s is not None and eng.load_to_first_answer_s >= eng.load_to_health_s
    log = (run / "steps/fake-r1/engine-localhost.log").read_text()
    assert "stand-in engine for /opt/orch/models/fake" in log
    # records per level, warm-up included and marked; the figures with their n
    for level in ("c1", "c4"):
        lines = (run / f"steps/fake-r1/records-{level}.jsonl").read_text().splitlines()
        recs = [json.loads(x) for x in lines]
        assert len(recs) == 102 and sum(r["warmup"] for r in recs) == 2
        assert {r["status"] for r in recs} == {"ok"} and {r["level"] for r in recs} == {level}
    levels = {lv.level: lv for lv in step.levels}
    assert list(levels) == ["c1", "c4"]
    s = levels["c4"].summary
    assert s is not None and s.n == 100 and s.ttft_ms.n == 100 and s.ttft_ms.p99 is not None
    assert s.itl_ms.n == 300 and s.output_tokens == 400 and s.slo_attainment == 1.0
    cost = levels["c4"].cost
    assert cost is not None and cost.price_per_node_hour == 2.0 and cost.nodes == 1
    assert cost.source == "plan price_per_node_hour 2" and cost.per_million_output_tokens is not None
    # the node-hour price alone is a cost model: what it includes is said, staff and downtime missing
    by_part = levels["c4"].cost_at
    assert by_part is not None and by_part.missing == ["staff", "downtime"]
    assert by_part.per_million_output_tokens == pytest.approx(2.0 / 3600 / s.output_tokens_per_s * 1e6)
    # each level's GPU power through the run's sampler: watts with their samples, or why not
    power = levels["c4"].power
    assert power is not None and [n.node for n in power.nodes] == ["localhost"]
    (node_power,) = power.nodes
    assert (node_power.mean_w is None) == (node_power.why_not is not None)
    # the engine is gone, and the run reads back with its serving step
    (pid,) = engine_pids(pids)
    assert gone(pid)
    rec = load_run(run)
    assert rec.status == "accepted" and [s.step.id for s in rec.serving] == ["fake-r1"]
    assert rec.nodes == {"localhost": "pass"}


def test_unmeetable_ttft_p99_threshold_exits_1_naming_step_level_and_figure(tmp_path: Path) -> None:
    # the stand-in waits 2 ms before each first token: a TTFT p99 of 0.5 ms cannot be met
    req, pids = setup(tmp_path, engine_flags="--ttft 0.002", ttft_limit="0.5")
    result = scale_test(req)
    assert result.exit_code == EXIT_THRESHOLDS and result.status == "failed"
    (step,) = result.serving
    assert step.verdict == "fail"
    for level in ("c1", "c4"):
        assert any(r.startswith(f"step fake-r1, level {level}: TTFT p99 ") and "> 0.5 ms (n=100)" in r
                   for r in step.reasons), step.reasons  # fmt: skip
    assert all(gone(p) for p in engine_pids(pids)) and engine_pids(pids)


def test_p99_threshold_on_too_few_ok_requests_is_missed_not_passed(tmp_path: Path) -> None:
    from orchestrator.metrics.verdict import serving_threshold_failures
    from orchestrator.models.results import Percentiles
    from orchestrator.models.serving import ServingWorkload
    from orchestrator.models.serving_results import LevelSummary

    w = ServingWorkload.model_validate({
        "name": "w", "engine": "transformers", "model": {"path": "/m"},
        "load": {"concurrency": [1], "input_tokens": {"kind": "fixed", "tokens": 1},
                 "output_tokens": {"kind": "fixed", "tokens": 1}, "requests": 100},
        "thresholds": {"max_ttft_p99_ms": 100},
    })  # fmt: skip
    few = Percentiles(n=40, p50=1.0, p95=2.0, p99=None)
    s = LevelSummary(level="c1", n=100, ok=40, errors=60, aborted=0, duration_s=1.0, ttft_ms=few,
                     itl_ms=few, tpot_ms=few, e2e_ms=few)  # fmt: skip
    (why,) = serving_threshold_failures("w-r1", w, s)
    assert why.startswith("step w-r1, level c1: TTFT p99 not defined (n=40 < 100)")


def test_engine_that_never_becomes_healthy_fails_the_step_within_its_bound(tmp_path: Path) -> None:
    req, pids = setup(tmp_path, engine_flags="--never-healthy", health=2)
    result = scale_test(req)
    assert result.exit_code == EXIT_INFRA
    (step,) = result.serving
    assert step.verdict == "infra"
    bound = "did not answer /health within 2 s (health_timeout_s)"
    assert any(bound in r for r in step.reasons), step.reasons
    assert step.engines[0].health == "timeout" and step.levels == []
    assert not list((result.run_dir / "steps/fake-r1").glob("records-*"))
    assert all(gone(p) for p in engine_pids(pids)) and engine_pids(pids)


def test_engine_that_exits_ends_the_step_naming_its_log(tmp_path: Path) -> None:
    # an unknown subcommand: the stand-in exits at once with argparse's message
    req, _ = setup(tmp_path, engine_flags="bogus")
    result = scale_test(req)
    assert result.exit_code == EXIT_INFRA
    (step,) = result.serving
    assert step.engines[0].health == "exited"
    assert any("ended before it answered /health" in r and "invalid choice" in r for r in step.reasons)


def test_sigterm_of_orch_stops_the_engine(tmp_path: Path) -> None:
    # slow enough that the run is still driving load when SIGTERM comes
    req, pids = setup(tmp_path, engine_flags="--ttft 0.02 --itl 0.01", requests=2000)
    code = (
        "import sys\n"
        "from orchestrator.models.requests import ScaleTestRequest\n"
        "from orchestrator.runs.scale_test import scale_test\n"
        "from orchestrator.errors import OrchError\n"
        f"req = ScaleTestRequest.model_validate_json({req.model_dump_json()!r})\n"
        "try:\n    sys.exit(scale_test(req).exit_code)\n"
        "except OrchError as e:\n    sys.exit(e.exit_code)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tmp_path)
    try:
        records = tmp_path / "runs"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            files = list(records.glob("*/steps/fake-r1/records-c1.jsonl"))
            if files and len(files[0].read_text().splitlines()) > 5:
                break
            assert proc.poll() is None, "orch ended before it drove load"
            time.sleep(0.2)
        else:
            pytest.fail("no records were written")
        (pid,) = engine_pids(pids)
        assert not gone(pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == EXIT_INTERRUPTED
    finally:
        if proc.poll() is None:
            proc.kill()
    assert gone(pid)
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/journal.jsonl")]
    assert json.loads((run / "result.json").read_text())["status"] == "interrupted"
    events = [json.loads(x).get("event") for x in (run / "journal.jsonl").read_text().splitlines()]
    assert "engines_stopped" in events


def test_gpu_engine_on_cpu_nodes_is_refused_before_a_run_exists(tmp_path: Path) -> None:
    req, _ = setup(tmp_path)
    plan = Path(req.plan or "")
    plan.write_text(plan.read_text().replace("engine: transformers", "engine: vllm"))
    with pytest.raises(ConfigError, match="engine vllm needs GPUs, and localhost has gpu_vendor none"):
        scale_test(req)
    assert not (tmp_path / "runs").exists()


def test_the_terminal_shows_percentiles_with_n_tokens_goodput_cost_and_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli.run import render_result

    req, _ = setup(tmp_path)
    render_result(scale_test(req))
    shown = capsys.readouterr().out
    for text in ("TTFT ms", "ITL ms", "TPOT ms", "(n=100)", "out tok/s", "goodput", "cost/1M out", "100.0%"):
        assert text in shown, text
    assert "fake-r1 c4: cost " in shown and "= 2/node-hour x 1 node(s)" in shown
    assert "price from plan price_per_node_hour 2" in shown
    assert "fake-r1 c4: cost at c4's measured rate: " in shown
    assert "partial (missing: staff, downtime)" in shown
    assert "fake-r1 c4:   energy: - (in the node-hour price)" in shown
    assert "fake-r1 c4: power: localhost" in shown  # its watts and samples, or why none
    assert "model load time to health" in shown and "verdict: accepted (exit 0)" in shown
    from orchestrator.cli import main

    with pytest.raises(SystemExit) as info:
        main(["runs", "show", str(next((tmp_path / "runs").glob("*/journal.jsonl")).parent)])
    assert info.value.code == 0
    shown = capsys.readouterr().out
    assert "serving steps of" in shown and "(n=100)" in shown and "busbw" not in shown


def test_the_results_store_keeps_each_level_with_its_n(tmp_path: Path) -> None:
    from orchestrator.store.db import ResultsStore, default_store_path

    req, _ = setup(tmp_path)
    result = scale_test(req)
    with ResultsStore.open(default_store_path(tmp_path / "runs")) as store:
        step = store.conn.execute(
            "SELECT engine, verdict, load_to_health_s FROM serving_steps WHERE run_id = ?", (result.run_id,)
        ).fetchall()
        levels = store.conn.execute(
            "SELECT level, node, n, ttft_n, ttft_p99_ms, itl_n, slo_attainment, "
            "cost_per_million_output_tokens FROM serving_levels WHERE run_id = ? ORDER BY level",
            (result.run_id,),
        ).fetchall()
        run = store.conn.execute(
            "SELECT steps_planned, steps_done FROM runs WHERE run_id = ?", (result.run_id,)
        ).fetchone()
    assert [tuple(r)[:2] for r in step] == [("transformers", "pass")] and step[0][2] is not None
    assert [(r[0], r[1], r[2], r[3], r[5], r[6]) for r in levels] == [
        ("c1", "", 100, 100, 300, 1.0),
        ("c4", "", 100, 100, 300, 1.0),
    ]
    assert all(r[4] is not None and r[7] is not None for r in levels)
    assert tuple(run) == (1, 1)


def test_replicas_each_get_an_engine_and_their_own_figures(tmp_path: Path) -> None:
    # two hosts of this machine: r1 on the first, r2 on both (each engine on its own port)
    req, pids = setup(tmp_path, hosts=("alpha", "beta"), replicas='"1,N"')
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [r.reasons for r in result.serving]
    r1, r2 = result.serving
    assert (r1.step.id, r2.step.id) == ("fake-r1", "fake-r2")
    assert [e.node for e in r2.engines] == ["alpha", "beta"] and len({e.url for e in r2.engines}) == 2
    for lv in r2.levels:
        assert lv.summary is not None and set(lv.per_node) == {"alpha", "beta"}
        assert sum(s.n for s in lv.per_node.values()) == lv.summary.n == 100
        assert lv.cost is not None and lv.cost.nodes == 2
    assert r1.levels[0].per_node == {}
    assert len(engine_pids(pids)) == 3 and all(gone(p) for p in engine_pids(pids))
    assert (result.run_dir / "steps/fake-r2/engine-beta.log").exists()


def lab_cluster(tmp_path: Path) -> Cluster:
    """A 3-node lab inventory (node1..3, fabric 198.18.0.11..13, no GPU)."""
    inv = tmp_path / "lab.ini"
    inv.write_text("[all]\n" + "".join(
        f"node{i} ansible_host=10.0.0.{i} fabric_address=198.18.0.1{i} gpu_vendor=none\n" for i in (1, 2, 3)
    ))  # fmt: skip
    return load_inventory(inv)


def slurm_engine(
    tmp_path: Path, step: int, node: str, env: dict[str, str]
) -> tuple[EngineRun, JobSpec, RunDataLayout]:
    """serving-smoke's step number `step` on lab_cluster, its engine on `node` as a Slurm job of run-1."""
    cluster = lab_cluster(tmp_path)
    plan = load_plan("serving-smoke")
    r = expand_serving_steps(plan, cluster)[step]
    root = tmp_path / "runs" / "run-1"
    folder = root / "steps" / r.id
    folder.mkdir(parents=True)
    layout = run_data_layout(cluster, root)
    engine, spec = engine_job(
        plan, cluster, r, plan.serving[0], node, port=23456, here=False, bindir="/opt/orch/cpu/bin",
        env=env, folder=folder, root=root, layout=layout,
    )  # fmt: skip
    return engine, spec, layout


def test_on_slurm_an_engine_is_a_one_task_job_on_its_node_with_its_log_in_the_step_folder(
    tmp_path: Path,
) -> None:
    import shlex

    from orchestrator.scheduler.slurm import SlurmScheduler

    engine, spec, layout = slurm_engine(tmp_path, 1, "node2", {"HF_HUB_OFFLINE": "1"})
    assert engine.url == "http://198.18.0.12:23456" and engine.log == "steps/lab-tiny-r3/engine-node2.log"
    assert spec.argv == [
        "/opt/orch/cpu/bin/transformers", "serve", "/opt/orch/models/lab-tiny", "--device", "cpu",
        "--dtype", "float32", "--host", "198.18.0.12", "--port", "23456", "--continuous-batching",
        "--cb-num-blocks", "256", "--cb-block-size", "32",
    ]  # fmt: skip
    sched = SlurmScheduler()
    script = sched.render(spec)
    assert "#SBATCH --nodelist=node2\n" in script and "#SBATCH --nodes=1\n" in script
    assert "--output=" not in script.split("exec srun", 1)[1]  # no rank logs: srun writes to the job's output
    assert shlex.join(spec.argv) in script and "export HF_HUB_OFFLINE=1" in script
    # Hugging Face's caches stay in the step's folder on the node, never in the node's home
    assert spec.env["HF_HOME"] == f"{layout.node_root}/steps/lab-tiny-r3/hf-home-node2"
    assert f"--output={layout.node_root}/steps/lab-tiny-r3/engine-node2.log" in sched.sbatch_argv(spec)


def test_cron_install_expands_serving_steps_as_scale_test_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    req, _ = setup(tmp_path)
    plan = Path(req.plan or "")
    plan.write_text(plan.read_text().replace("engine: transformers", "engine: vllm"))
    with pytest.raises(SystemExit) as info:
        main(["cron", "install", "--at", "02:00", "-i", str(req.inventory), "--plan", str(plan),
              "--out", str(tmp_path / "runs")])  # fmt: skip
    assert info.value.code == 2
    assert "engine vllm needs GPUs" in capsys.readouterr().err


def test_resume_runs_the_serving_steps_without_a_result_and_keeps_the_others(tmp_path: Path) -> None:
    from orchestrator.runs.scale_test import resume_run

    req, pids = setup(tmp_path, hosts=("alpha", "beta"), replicas='"1,N"')
    run = scale_test(req).run_dir
    # as if orch had been killed during fake-r2: no result, no run_finished, its process gone
    kept = json.loads((run / "steps/fake-r1/serving.json").read_text())
    (run / "result.json").unlink()
    (run / "steps/fake-r2/serving.json").unlink()
    lines = [json.loads(x) for x in (run / "journal.jsonl").read_text().splitlines()]
    lines = [e for e in lines if e.get("event") != "run_finished"]
    for e in lines:
        if e.get("event") == "run_started":
            e["pid"] = 2**22 + 1  # above Linux's pid_max default: no such process
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert load_run(run).status == "interrupted"
    before = len(engine_pids(pids))
    result = resume_run(run, python=req.python)
    assert result.exit_code == EXIT_OK
    assert [s.step.id for s in result.serving] == ["fake-r1", "fake-r2"]
    assert result.serving[0].model_dump(mode="json") == kept  # kept as it was, not run again
    assert len(engine_pids(pids)) == before + 2  # fake-r2's two engines, started again
    assert all(gone(p) for p in engine_pids(pids))
    assert (run / "attempts/fake-r2.1").is_dir()  # the killed attempt's files, kept aside


def test_a_plan_with_a_ladder_and_serving_runs_both_in_one_run(tmp_path: Path) -> None:
    req, pids = setup(tmp_path)
    plan = Path(req.plan or "")
    ladder = (
        "ladder: {nodes: [1], ranks_per_node: [1]}\ncollectives: [all_reduce]\n"
        "sizes: {min: 1K, max: 4K, factor: 4}\nwarmup_iters: 1\niters: 2\n"
    )
    plan.write_text(plan.read_text().replace("collectives: []\n", ladder))
    result = scale_test(req)
    assert result.exit_code == EXIT_OK, [s.reasons for s in [*result.steps, *result.serving]]
    assert [s.step.id for s in result.steps] == ["n1xg1"]
    assert [s.step.id for s in result.serving] == ["fake-r1"]
    started = json.loads((result.run_dir / "journal.jsonl").read_text().splitlines()[0])
    assert started["steps"] == ["n1xg1", "fake-r1"]
    assert all(gone(p) for p in engine_pids(pids)) and engine_pids(pids)


def test_an_exception_while_serving_still_stops_the_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import orchestrator.runs.serving as serving

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in the load's set-up")

    monkeypatch.setattr(serving, "level_specs", broken)
    req, pids = setup(tmp_path)
    with pytest.raises(RuntimeError, match="a bug"):
        scale_test(req)
    (pid,) = engine_pids(pids)
    assert gone(pid)
    (run,) = [p.parent for p in (tmp_path / "runs").glob("*/journal.jsonl")]
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "infra" and result["exit_code"] == EXIT_INFRA


def test_a_rate_level_replays_the_plans_arrival_trace_and_a_fifo_is_refused(tmp_path: Path) -> None:
    import os

    req, _ = setup(tmp_path, requests=20)
    trace = tmp_path / "trace.jsonl"
    # 3 bursts of 4 arrivals (10 ms apart) every 300 ms: at its own rate it lasts 0.63 s
    trace.write_text("".join(f'{{"timestamp": {b * 300 + i * 10}}}\n' for b in range(3) for i in range(4)))
    plan = Path(str(req.plan))
    text = plan.read_text()
    for old, new in (
        ("      concurrency: [1, 4]\n", "      concurrency: []\n      rates: [40]\n"),
        ("      warmup_requests: 2\n", f"      warmup_requests: 2\n      trace: {{path: {trace}, unit: ms}}\n"),  # noqa: E501
        ("thresholds: {max_ttft_p99_ms: 60000}", "thresholds: {}"),
        ("slos: {ttft_p99_ms: 60000}", "slos: {}"),
    ):
        text = text.replace(old, new)
    plan.write_text(text)
    result = scale_test(req)
    (step,) = result.serving
    assert step.verdict == "pass", step.reasons
    lines = (result.run_dir / "steps/fake-r1/records-r40.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    # the schedule is the trace's pattern at 40/s (its own rate is 11/0.63 s = 17.5/s): each gap
    # between the counted requests' scheduled sends is one of the file's (10 ms in a burst, 270 ms
    # between bursts, or the mean gap where the trace starts again) x 17.5/40; the send times
    # themselves follow it as the machine's load allows
    counted = sorted((r for r in recs if not r["warmup"]), key=lambda r: r["id"])
    gaps = [b["scheduled"] - a["scheduled"] for a, b in itertools.pairwise(counted)]
    scale = 11 / 0.63 / 40
    allowed = [g * scale for g in (0.01, 0.27, 0.63 / 11)]
    assert len(recs) == 22 and all(min(abs(g - a) for a in allowed) < 1e-6 for g in gaps), gaps
    assert any(abs(g - allowed[0]) < 1e-6 for g in gaps) and any(abs(g - allowed[1]) < 1e-6 for g in gaps)
    os.unlink(trace)
    os.mkfifo(trace)
    req2 = req.model_copy(update={"out_dir": tmp_path / "runs2"})
    (step,) = scale_test(req2).serving
    assert step.verdict == "infra"
    assert any("arrival trace not read" in r and "not a regular file" in r for r in step.reasons)

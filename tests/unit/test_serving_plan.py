"""Serving workloads in plans: the model, its refusals (field and value named), expansion into
serving steps, `orch plan show`, and scale-test's refusal until serving steps can run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import cluster

from orchestrator.errors import ConfigError
from orchestrator.metrics.percentiles import min_samples
from orchestrator.models.plan import PlanOverrides
from orchestrator.models.serving import P99_MIN_SAMPLES
from orchestrator.plan import (
    apply_overrides,
    expand_ladder,
    expand_serving_steps,
    expand_steps,
    load_plan,
    plan_to_yaml,
)
from orchestrator.workloads.loadgen import Target, level_specs


def workload(**over: Any) -> dict[str, Any]:
    w: dict[str, Any] = {
        "name": "chat",
        "engine": "vllm",
        "model": {"path": "/models/llama-8b", "revision": "v1.0"},
        "load": {
            "concurrency": [1, 4],
            "input_tokens": {"kind": "fixed", "tokens": 32},
            "output_tokens": {"kind": "uniform", "min": 8, "max": 16},
            "requests": 100,
        },
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(w.get(key), dict):
            w[key] = {**w[key], **value}
        else:
            w[key] = value
    return w


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def serving_plan(tmp_path: Path, **over: Any) -> Path:
    return write(tmp_path, {"name": "sv", "collectives": [], "serving": [workload(**over)]})


def refusal(tmp_path: Path, **over: Any) -> str:
    with pytest.raises(ConfigError) as e:
        load_plan(serving_plan(tmp_path, **over))
    return str(e.value)


def test_p99_rule_is_the_percentiles_rule() -> None:
    assert min_samples(0.99) == P99_MIN_SAMPLES


def test_serving_only_plan_loads_without_sizes_and_round_trips(tmp_path: Path) -> None:
    plan = load_plan(serving_plan(tmp_path))
    assert plan.collectives == [] and plan.serving[0].model.served_name == "/models/llama-8b"
    again = tmp_path / "again.yaml"
    again.write_text(plan_to_yaml(plan))
    assert load_plan(again) == plan


def test_serving_beside_collectives(tmp_path: Path) -> None:
    doc = {
        "name": "both",
        "sizes": {"min": "1K", "max": "1M"},
        "ladder": {"nodes": "1,2"},
        "serving": [workload()],
    }
    plan = load_plan(write(tmp_path, doc))
    c = cluster(3)
    assert [s.id for s in expand_ladder(plan, c)] == ["n1xg1", "n2xg1"]
    assert [s.id for s in expand_serving_steps(plan, c)] == ["chat-r1"]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"name": "x", "collectives": []}, "runs nothing"),
        ({"name": "x", "serving": [workload()]}, "sizes: required"),
    ],
)
def test_plan_must_run_something_and_collectives_need_sizes(
    tmp_path: Path, doc: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        load_plan(write(tmp_path, doc))


@pytest.mark.parametrize(
    ("over", "field", "value"),
    [
        ({"model": {"path": "/models/../etc"}}, "path", "/models/../etc"),
        ({"model": {"path": "models/llama"}}, "path", "models/llama"),
        ({"model": {"path": "/models/llama/"}}, "path", "/models/llama/"),
        ({"model": {"path": "/models/$(id)"}}, "path", "/models/$(id)"),
        ({"model": {"path": "/models//x"}}, "path", "/models//x"),
        ({"model": {"revision": "main;rm"}}, "revision", "main;rm"),
        ({"engine_args": ["--max-num-seqs 8"]}, "engine_args", "--max-num-seqs 8"),
        ({"engine_args": ["--x=`id`"]}, "engine_args", "--x=`id`"),
        ({"engine_args": ["--port=9000"]}, "engine_args", "--port=9000"),
        ({"engine_args": ["--tensor-parallel-size"]}, "engine_args", "--tensor-parallel-size"),
        ({"engine": "llamacpp"}, "engine", "llamacpp"),
        ({"dtype": "int3"}, "dtype", "int3"),
        ({"name": "chat bot"}, "name", "chat bot"),
        ({"replicas": "1..Q"}, "replicas", "1..Q"),
        ({"load": {"concurrency": [0]}}, "concurrency", "0"),
        ({"load": {"concurrency": [2, 2]}}, "concurrency", "[2, 2]"),
        ({"load": {"rates": [-1.0]}}, "rates", "-1"),
        (
            {"load": {"input_tokens": {"kind": "dataset", "path": "lens.jsonl", "field": "n"}}},
            "path",
            "lens.jsonl",
        ),
        ({"load": {"output_tokens": {"kind": "uniform", "min": 9, "max": 3}}}, "output_tokens", "9"),
        ({"load": {"output_tokens": {"kind": "normal", "tokens": 3}}}, "output_tokens", "normal"),
    ],
)
def test_refusals_name_field_and_value(tmp_path: Path, over: dict[str, Any], field: str, value: str) -> None:
    msg = refusal(tmp_path, **over)
    assert field in msg and value in msg, msg


@pytest.mark.parametrize(
    "url",
    [
        "ftp://host:21/v1",
        "http://host/v1",
        "http://user:pw@host:8000",
        "http://host:8000/v1?x=1",
        "http://host:8000/v1#f",
        "http://host:0",
        "http://host:70000",
        "http://999.1.1.1:80",
        "http://ho st:80",
        "http://host:80/a;b",
        "http://[zz::1]:80",
        "file:///etc/passwd",
    ],
)
def test_external_url_refusals(tmp_path: Path, url: str) -> None:
    msg = refusal(tmp_path, engine="external", url=url)
    assert "url" in msg and url in msg, msg


@pytest.mark.parametrize("url", ["http://node1:8000", "https://api.example.org:443/v1", "http://[::1]:8000/"])
def test_external_urls_accepted_and_one_step_on_no_node(tmp_path: Path, url: str) -> None:
    plan = load_plan(serving_plan(tmp_path, engine="external", url=url, model={"path": None, "name": "m"}))
    (step,) = expand_serving_steps(plan, cluster(2))
    assert step.nodes == [] and step.engine == "external"


def test_external_needs_url_and_refuses_what_orch_would_start(tmp_path: Path) -> None:
    assert "needs url" in refusal(tmp_path, engine="external")
    assert "replicas" in refusal(tmp_path, engine="external", url="http://h:1", replicas=[2])
    assert "external only" in refusal(tmp_path, url="http://h:1")
    assert "needs model.path" in refusal(tmp_path, engine="sglang", model={"path": None, "name": "m"})
    assert "only to the model's path" in refusal(tmp_path, engine="transformers", model={"name": "m"})
    named = load_plan(serving_plan(tmp_path, model={"name": "llama"}))
    assert named.serving[0].model.served_name == "llama"


def test_load_needs_levels_and_an_end(tmp_path: Path) -> None:
    assert "concurrency levels, request rates" in refusal(tmp_path, load={"concurrency": []})
    assert "requests (per level), duration_s" in refusal(tmp_path, load={"requests": None})


@pytest.mark.parametrize(
    ("over", "named"),
    [
        ({"thresholds": {"max_ttft_p99_ms": 500}}, "max_ttft_p99_ms"),
        ({"slos": {"tpot_p99_ms": 50}}, "slos.tpot_p99_ms"),
        ({"thresholds": {"baseline": {"name": "b", "max_p99_ratio": 1.2}}}, "baseline.max_p99_ratio"),
    ],
)
def test_p99_on_fewer_than_100_requests_is_refused(tmp_path: Path, over: dict[str, Any], named: str) -> None:
    msg = refusal(tmp_path, load={"requests": 99}, **over)
    assert named in msg and "99" in msg and "100" in msg, msg
    msg = refusal(tmp_path, load={"requests": None, "duration_s": 60}, **over)
    assert "only duration_s" in msg
    load_plan(serving_plan(tmp_path, load={"requests": 100}, **over))


def test_attainment_threshold_needs_slos(tmp_path: Path) -> None:
    assert "needs slos" in refusal(tmp_path, thresholds={"min_slo_attainment": 0.9})


def test_old_min_goodput_is_read_as_min_slo_attainment_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="orchestrator.models.serving"):
        plan = load_plan(serving_plan(tmp_path, slos={"ttft_p99_ms": 500}, thresholds={"min_goodput": 0.9}))
    assert plan.serving[0].thresholds.min_slo_attainment == 0.9
    assert "min_goodput is read as thresholds.min_slo_attainment" in caplog.text
    both = {"min_goodput": 0.9, "min_slo_attainment": 0.8}
    assert "min_goodput is its old name" in refusal(tmp_path, slos={"ttft_p99_ms": 500}, thresholds=both)


def test_replicas_expand_on_disjoint_nodes(tmp_path: Path) -> None:
    plan = load_plan(serving_plan(tmp_path, replicas="1..N", pipeline_parallel=2, tensor_parallel=2))
    steps = expand_serving_steps(plan, cluster(5, gpus=2))
    assert [s.id for s in steps] == ["chat-r1", "chat-r2"]  # N = 5 // 2 replicas fit
    assert steps[1].nodes == ["node1", "node2", "node3", "node4"]
    assert steps[0].levels == ["c1", "c4"]


def test_steps_the_cluster_cannot_hold_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="chat-r3 needs 3 nodes"):
        expand_serving_steps(load_plan(serving_plan(tmp_path, replicas=[3])), cluster(2))
    with pytest.raises(ConfigError, match="tensor_parallel 4 GPUs per node but gpus_per_node: node1 has 2"):
        expand_serving_steps(load_plan(serving_plan(tmp_path, tensor_parallel=4)), cluster(2, gpus=2))


def test_duplicate_workload_names_refused(tmp_path: Path) -> None:
    doc = {"name": "sv", "collectives": [], "serving": [workload(), workload()]}
    with pytest.raises(ConfigError, match="given twice: chat"):
        load_plan(write(tmp_path, doc))


def test_collectives_override_on_a_serving_only_plan_is_a_config_error(tmp_path: Path) -> None:
    plan = load_plan(serving_plan(tmp_path))
    with pytest.raises(ConfigError, match="sizes: required"):
        apply_overrides(plan, PlanOverrides(collectives="all_reduce"))
    assert apply_overrides(plan, PlanOverrides(collectives="all_reduce", sizes="1K:1M")).collectives == [
        "all_reduce"
    ]


def test_scale_test_expansion_takes_serving_plans_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    assert expand_steps(load_plan("serving-smoke"), cluster(3)) == []  # no ladder; serving runs
    with pytest.raises(ConfigError) as e:  # vLLM on nodes of gpu_vendor none (a CPU stack)
        expand_steps(load_plan("serving-acceptance"), cluster(3))
    assert "serving step llm-r1: engine vllm needs GPUs" in str(e.value) and e.value.exit_code == 2
    with pytest.raises(ConfigError, match="pipeline_parallel 2: orch starts one engine per replica"):
        pp2 = serving_plan(tmp_path, engine="transformers", pipeline_parallel=2)
        expand_steps(load_plan(pp2), cluster(2))


@pytest.mark.parametrize("name", ["serving-smoke", "serving-acceptance"])
def test_built_in_serving_plans_count_enough_for_p99(name: str) -> None:
    plan = load_plan(name)
    specs = [s for w in plan.serving for s in level_specs(w, [Target("a", "http://127.0.0.1:8000")])]
    # each level's planned count (a session level's: sessions x turns)
    assert specs and all((s.requests or 0) >= P99_MIN_SAMPLES for s in specs)
    assert expand_serving_steps(plan, cluster(3, gpus=8))


def test_serving_smoke_runs_on_one_then_every_node() -> None:
    steps = expand_serving_steps(load_plan("serving-smoke"), cluster(3))
    assert [(s.id, len(s.nodes)) for s in steps] == [("lab-tiny-r1", 1), ("lab-tiny-r3", 3)]
    assert steps[0].levels == ["c1", "c2", "c4", "c8"]


def test_cli_plan_show_lists_serving_steps_and_scale_test_refuses_vllm_on_cpu_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import main

    inv = tmp_path / "lab.ini"
    inv.write_text(
        "[all]\n" + "".join(f"node{i} ansible_host=198.18.0.1{i} gpu_vendor=none\n" for i in (1, 2, 3))
    )
    with pytest.raises(SystemExit) as info:
        main(["plan", "show", "--plan", "serving-smoke", "-i", str(inv)])
    assert info.value.code == 0
    shown = capsys.readouterr().out
    assert "lab-tiny-r1" in shown and "lab-tiny-r3" in shown and "c1 c2 c4 c8" in shown
    with pytest.raises(SystemExit) as info:
        main(["scale-test", "--plan", "serving-acceptance", "-i", str(inv), "--out", str(tmp_path / "runs")])
    assert info.value.code == 2
    assert "engine vllm needs GPUs" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()

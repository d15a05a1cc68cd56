"""The built-in serving plans (orchestrator/plans): serving-acceptance covers the workloads a
pilot must cover (concurrency 1..256, bursts, a long-context level near the context length,
agentic sessions); serving-smoke stays short."""

from __future__ import annotations

from pathlib import Path

from orchestrator.models.cluster import Cluster, Node
from orchestrator.plan import expand_serving_steps, load_levels, load_plan
from orchestrator.workloads.loadgen import Target, level_specs

TARGET = [Target("a", "http://127.0.0.1:8000")]


def cluster(n: int, gpus: int = 8) -> Cluster:
    nodes = [Node(name=f"node{i}", address=f"198.18.0.{10 + i}", gpus_per_node=gpus) for i in range(1, n + 1)]
    return Cluster(source=Path("lab.ini"), nodes=nodes, groups={"all": [x.name for x in nodes]})


def test_serving_acceptance_covers_the_pilots_workloads() -> None:
    plan = load_plan("serving-acceptance")
    by_name = {w.name: w for w in plan.serving}
    specs = {name: level_specs(w, TARGET) for name, w in by_name.items()}
    levels = [s for ss in specs.values() for s in ss]
    # a single request, up to 256 in flight, each level with enough requests to fill it several times
    closed = sorted(s.concurrency for s in levels if s.concurrency is not None and s.sessions is None)
    assert closed[0] == 1 and closed[-1] >= 256
    assert all((s.requests or 0) >= 2 * s.concurrency for s in levels if s.concurrency and s.sessions is None)
    # bursts: gamma arrivals below shape 1 at open-loop rates
    assert any(s.rate is not None and s.burstiness < 1 for s in levels)
    # long context: input + output near the context length, within it, and the engine told the same
    long = [w for w in plan.serving if w.model.max_model_len is not None]
    assert long
    for w in long:
        limit = w.model.max_model_len
        assert limit is not None
        for s in level_specs(w, TARGET):
            worst = max(s.input_tokens) + max(s.output_tokens)
            assert 0.9 * limit <= worst <= limit, (w.name, worst, limit)
        args = w.engine_args
        assert args[args.index("--max-model-len") + 1] == str(limit)
    # agentic sessions: several turns behind a shared system prompt, on chat messages
    agentic = [s for s in levels if s.sessions is not None]
    assert agentic and all(s.sessions is not None and s.sessions.turns >= 4 for s in agentic)
    assert all(s.sessions and s.sessions.system_prompt_tokens > 0 and s.api == "chat" for s in agentic)
    # the SLO thresholds are judged on the interactive ladder; every step expands on a GPU cluster
    assert by_name["llm"].thresholds.min_slo_attainment == 0.95
    steps = expand_serving_steps(plan, cluster(2))
    assert {s.workload for s in steps} == set(by_name)
    assert next(s for s in steps if s.workload == "agent").levels == ["s32x8"]


def test_serving_smoke_stays_short() -> None:
    plan = load_plan("serving-smoke")
    (w,) = plan.serving
    assert load_levels(w) == ["c1", "c2", "c4", "c8"] and w.load.sessions is None
    assert w.load.requests == 100 and w.load.rates == [] and w.load.capacity is None
    assert plan.step_timeout_s <= 1800

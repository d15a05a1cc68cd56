"""Plan loading, CLI overrides and ladder expansion."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from fakes import cluster

from orchestrator.errors import ConfigError
from orchestrator.models.plan import PlanOverrides, parse_size, resolve_counts
from orchestrator.plan import (
    apply_overrides,
    builtin_plans,
    expand_steps,
    load_plan,
    parse_collectives,
    parse_counts,
    parse_sizes,
    plan_to_yaml,
    resolve_plan,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("8", 8),
        ("1K", 1024),
        ("128M", 128 << 20),
        ("1G", 1 << 30),
        ("4k", 4096),
        ("2MiB", 2 << 20),
        ("16B", 16),
    ],
)
def test_parse_size(text: str, want: int) -> None:
    assert parse_size(text) == want


def test_parse_sizes_range_and_single() -> None:
    r = parse_sizes("8:128M:x2")
    assert r.values()[0] == 8 and r.values()[-1] == 128 << 20 and len(r.values()) == 25
    assert parse_sizes("1K:1M:x4").values() == [1024, 4096, 16384, 65536, 262144, 1 << 20]
    assert parse_sizes("1M").values() == [1 << 20]
    assert parse_sizes("1K:4K").factor == 2


@pytest.mark.parametrize(
    "bad", ["", "abc", "8:", "8:1M:x1", "1M:8", "8:1M:y2", "-1", "1X", "1.5M", "8:1M:x2:3"]
)
def test_parse_sizes_refuses_bad_values_naming_the_flag(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_sizes(bad)
    assert "--sizes" in str(e.value) and repr(bad) in str(e.value)


def test_counts() -> None:
    assert parse_counts("1,2,4", flag="--nodes") == [1, 2, 4]
    assert parse_counts("1..N", flag="--nodes", n=3) == [1, 2, 3]
    assert parse_counts("1..N:x2", flag="--nodes", n=6) == [1, 2, 4, 6]
    assert parse_counts("4,1,2,2", flag="--nodes") == [1, 2, 4]
    assert resolve_counts("1..G:x2", g=8) == [1, 2, 4, 8]
    assert resolve_counts("G", g=4) == [4]


@pytest.mark.parametrize("bad", ["", "0", "1,,2", "a", "3..1", "1..N:x1", "1-4", "1..M"])
def test_counts_refuse_bad_values(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_counts(bad, flag="--nodes", n=4)
    assert "--nodes" in str(e.value)


def test_counts_with_n_unknown() -> None:
    with pytest.raises(ConfigError, match="uses N"):
        parse_counts("1..N", flag="--nodes")


def test_collectives() -> None:
    assert parse_collectives("sendrecv,all_reduce") == ["all_reduce", "sendrecv"]
    with pytest.raises(ConfigError, match="allreduce"):
        parse_collectives("allreduce")


def test_builtin_plans_load() -> None:
    assert set(builtin_plans()) >= {"smoke", "acceptance", "nightly"}
    for name in builtin_plans():
        plan = load_plan(name)
        assert plan.name == name and plan.sizes.values()
    smoke = load_plan()
    assert smoke.name == "smoke" and len(smoke.collectives) == 6
    assert load_plan("nightly").thresholds.min_scaling_efficiency == 0.8


def test_unknown_plan_and_bad_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no built-in plan named 'nope'"):
        load_plan("nope")
    f = tmp_path / "p.yaml"
    f.write_text("name: x\nsizes: {min: 8, max: 1K}\ncollectives: [all_reduce, gather]\n")
    with pytest.raises(ConfigError, match=r"p\.yaml.*collectives"):
        load_plan(f)
    f.write_text("name: x\nsizes: {min: 8, max: 1K}\nbogus: 1\n")
    with pytest.raises(ConfigError, match="bogus"):
        load_plan(str(f))
    with pytest.raises(ConfigError, match="cannot read"):
        load_plan(tmp_path / "missing.yaml")


def test_user_plan_with_thresholds(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text(
        "sizes: {min: 1K, max: 64M, factor: 4}\n"
        "ladder: {nodes: '1,2', ranks_per_node: [1, 2]}\n"
        "thresholds:\n"
        "  busbw: [{collective: all_reduce, min_gbs: 10}, {collective: alltoall, min_gbs: 2, size: 1M}]\n"
        "  baseline: {name: accepted-2024, min_fraction: 0.9}\n"
        "  min_scaling_efficiency: 0.8\n"
    )
    plan = load_plan(f)
    assert plan.name == "mine"
    assert plan.thresholds.busbw[1].size == 1 << 20
    assert plan.thresholds.baseline is not None and plan.thresholds.baseline.min_fraction == 0.9
    assert load_plan(_write(tmp_path / "again.yaml", plan_to_yaml(plan))) == plan


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_overrides() -> None:
    ov = PlanOverrides(
        nodes="1,2", gpus_per_node="1..2", collectives="all_reduce", sizes="8:64", iters=3, warmup_iters=0,
        backend="local", partition="gpu", timeout_s=30, check=False,
    )  # fmt: skip
    plan = resolve_plan("smoke", ov)
    assert plan.ladder.nodes == "1,2" and plan.collectives == ["all_reduce"]
    assert plan.sizes.values() == [8, 16, 32, 64]
    assert (plan.iters, plan.warmup_iters, plan.backend, plan.partition) == (3, 0, "local", "gpu")
    assert plan.step_timeout_s == 30 and plan.check is False
    assert load_plan("smoke").iters != 3  # the built-in itself is untouched


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("nodes", "1..x", "--nodes"), ("gpus_per_node", "0", "--gpus-per-node"), ("sizes", "1Q", "--sizes"),
     ("collectives", "bcast", "--collectives")],
)  # fmt: skip
def test_bad_overrides_name_the_flag(field: str, value: str, flag: str) -> None:
    with pytest.raises(ConfigError) as e:
        apply_overrides(load_plan("smoke"), PlanOverrides(**{field: value}))
    assert flag in str(e.value) and value in str(e.value)


def test_expand_steps() -> None:
    plan = resolve_plan("smoke", PlanOverrides(gpus_per_node="1,2"))
    steps = expand_steps(plan, cluster(3, gpus=2))
    assert [s.id for s in steps] == ["n1xg1", "n1xg2", "n2xg1", "n2xg2", "n3xg1", "n3xg2"]
    s = steps[3]
    assert (s.nnodes, s.ranks_per_node, s.world_size, s.index) == (2, 2, 4, 3)
    assert s.nodes == ["node1", "node2"]
    assert s.sizes == plan.sizes.values() and s.collectives == plan.collectives


def test_expand_steps_uses_g_and_groups() -> None:
    c = cluster(4, gpus=8)
    c.groups["gpu"] = ["node3", "node4"]
    steps = expand_steps(load_plan("acceptance"), c, group="gpu")
    assert [s.id for s in steps][:4] == ["n1xg1", "n1xg2", "n1xg4", "n1xg8"]
    assert steps[-1].id == "n2xg8" and steps[-1].nodes == ["node3", "node4"]


def test_refuses_too_many_nodes_naming_the_step() -> None:
    plan = resolve_plan("smoke", PlanOverrides(nodes="1,2,4"))
    with pytest.raises(ConfigError, match=r"step n4xg1 needs 4 nodes but the inventory has 3"):
        expand_steps(plan, cluster(3))


def test_refuses_too_many_ranks_naming_the_step() -> None:
    plan = resolve_plan("smoke", PlanOverrides(nodes="2", gpus_per_node="1,4"))
    with pytest.raises(ConfigError, match=r"step n2xg4 needs 4 ranks per node.*node1 has 2"):
        expand_steps(plan, cluster(2, gpus=2))


def _plan_app() -> typer.Typer:
    """An app with only `orch plan` registered."""
    from orchestrator.cli import plan as plan_cli

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    plan_cli.register(app)
    return app


def test_cli_plan_show(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    app = _plan_app()
    inv = tmp_path / "lab.ini"
    inv.write_text("[all]\nnode1 ansible_host=198.18.0.11\nnode2 ansible_host=198.18.0.12\n")
    r = CliRunner().invoke(app, ["plan", "show", "-i", str(inv), "--gpus-per-node", "1", "--sizes", "8:64"])
    assert r.exit_code == 0, r.output
    assert "n2xg1" in r.output and "node1,node2" in r.output and "from 8 to 64 B" in r.output
    r = CliRunner().invoke(app, ["plan", "show", "-i", str(inv), "--nodes", "1,3"])
    assert isinstance(r.exception, ConfigError) and "n3xg1" in str(r.exception)
    r = CliRunner().invoke(app, ["plan", "show", "--yaml", "--iters", "7"])
    assert r.exit_code == 0 and "iters: 7" in r.output


def test_cli_plan_show_prints_the_quality_gate(tmp_path: Path) -> None:
    import json

    import yaml
    from typer.testing import CliRunner

    app = _plan_app()
    doc = json.loads(load_plan("serving-smoke").model_dump_json(exclude_defaults=True))
    doc["quality"] = {"min_exact_match_of_floor": 0.95, "max_tokens": 12, "concurrency": 8}
    plan = tmp_path / "q.yaml"
    plan.write_text(yaml.safe_dump(doc))
    inv = tmp_path / "lab.ini"
    inv.write_text("[all]\nnode1 ansible_host=198.18.0.11\nnode2 ansible_host=198.18.0.12\n")
    r = CliRunner().invoke(app, ["plan", "show", "-i", str(inv), "--plan", str(plan)])
    assert r.exit_code == 0, r.output
    assert "quality: prompts built-in (lab-words)" in r.output and "max_tokens 12" in r.output
    assert "concurrency 1 against 8" in r.output and "0.95 x the A-against-A floor" in r.output
    r = CliRunner().invoke(app, ["plan", "show", "--plan", str(plan), "--yaml"])
    assert r.exit_code == 0 and "min_exact_match_of_floor: 0.95" in r.output

"""A cluster that is not all the same: isolation keeps nodes of each gpu_vendor and GPU model apart
(never paired, never judged against, never cleared by a node of another kind)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from test_isolate_run import LOG, StandIn

import orchestrator.runs.executor as executor
import orchestrator.runs.isolate as iso
from orchestrator.cli.isolate import render_isolation
from orchestrator.errors import InventoryError
from orchestrator.inventory import load_inventory
from orchestrator.isolation.search import isolate_partitioned
from orchestrator.models.fingerprint import Gpu
from orchestrator.models.isolation import Group, Outcome, partitions_line
from orchestrator.models.plan import Step
from orchestrator.models.requests import IsolateRequest
from orchestrator.models.results import CollSummary
from orchestrator.models.run import StepResult

# node -> (vendor, model as written in the inventory, or None)
MIXED: dict[str, tuple[str, str | None]] = {
    "h1": ("nvidia", "H100"),
    "h2": ("nvidia", "h100 "),  # the same model: case and spaces do not count
    "h3": ("nvidia", "H100"),
    "a1": ("nvidia", "A100"),
    "a2": ("nvidia", "A100"),
    "m1": ("amd", "MI300X"),
    "m2": ("amd", "MI300X"),
    "m3": ("amd", "MI300X"),
    "u1": ("amd", None),
    "c1": ("none", None),
}


def _inventory(tmp_path: Path, nodes: dict[str, tuple[str, str | None]] = MIXED) -> Path:
    hosts: dict[str, dict[str, object]] = {}
    for i, (name, (vendor, model)) in enumerate(nodes.items()):
        h: dict[str, object] = {
            "ansible_host": f"198.18.0.{10 + i}",
            "gpu_vendor": vendor,
            "gpus_per_node": 2,
        }
        if model is not None:
            h["gpu_model"] = model
        hosts[name] = h
    inv = tmp_path / "inv.yml"
    shared = {"orch_shared_dirs": str(tmp_path)}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": shared}}))
    return inv


def test_the_inventory_reads_gpu_model_and_refuses_one_that_is_not_a_name(tmp_path: Path) -> None:
    cluster = load_inventory(_inventory(tmp_path))
    assert cluster.node("h1").gpu_model == "H100" and cluster.node("u1").gpu_model is None
    bad = _inventory(tmp_path, {"x1": ("nvidia", "H100; reboot")})
    with pytest.raises(InventoryError, match="gpu_model"):
        load_inventory(bad)


def test_nodes_are_partitioned_by_vendor_and_model(tmp_path: Path) -> None:
    cluster = load_inventory(_inventory(tmp_path))
    parts = iso.partition_nodes(cluster, ["h1", "h2", "a1", "a2", "m1", "m2", "m3", "u1", "c1"], ["h3"])
    got = {p.label: (p.nodes, p.known_good) for p in parts}
    assert got == {
        "nvidia H100": (["h1", "h2"], ["h3"]),
        "nvidia A100": (["a1", "a2"], []),
        "amd MI300X": (["m1", "m2", "m3"], []),
        "amd (model unknown)": (["u1"], []),
        "cpu": (["c1"], []),
    }
    unknown = next(p for p in parts if p.model is None and p.vendor == "amd")
    assert unknown.note is not None and "gpu_model" in unknown.note and "alone" in unknown.note
    # a fingerprint's model fills in where the inventory sets none
    parts = iso.partition_nodes(cluster, ["m1", "u1"], [], {"u1": "MI300X"})
    assert [(p.label, p.nodes) for p in parts] == [("amd MI300X", ["m1", "u1"])]
    line = partitions_line(iso.partition_nodes(cluster, ["h1", "a1", "a2"], []))
    assert line.startswith("2 kinds of node, isolated apart: ")
    assert "nvidia H100 (h1; one node of this kind" in line and "nvidia A100 (a1, a2)" in line


def test_partitions_are_searched_in_the_same_rounds_and_never_mixed() -> None:
    kind = {"h1": "H", "h2": "H", "h3": "H", "h4": "H", "a1": "A", "a2": "A", "a3": "A", "a4": "A"}
    seen: list[list[Group]] = []

    def run_round(groups: Sequence[Group]) -> list[Outcome]:
        seen.append(list(groups))
        # a3's NIC is bad; any group of two kinds would "pass" here, so mixing would hide it
        return [
            Outcome(passed=not (len(g) > 1 and "a3" in g and len({kind[n] for n in g}) == 1)) for g in groups
        ]

    res = isolate_partitioned(
        [(["h1", "h2", "h3", "h4"], []), (["a1", "a2", "a3", "a4"], [])], run_round=run_round
    )
    assert [(c.kind, c.nodes) for c in res.culprits] == [("node", ["a3"])]
    assert all(len({kind[n] for n in g}) == 1 for r in seen for g in r)
    assert len(seen) == len(res.rounds) and len(seen[0]) == 8  # round 1: every single of both kinds
    assert [t.round for r in res.rounds for t in r.trials] == [r.index for r in res.rounds for _ in r.trials]
    for r in res.rounds:  # a round's groups are disjoint across the kinds too
        members = [n for t in r.trials for n in t.group]
        assert len(members) == len(set(members))


def test_a_known_good_node_of_another_kind_is_never_a_partner() -> None:
    groups: list[Group] = []

    def run_round(gs: Sequence[Group]) -> list[Outcome]:
        groups.extend(gs)
        return [Outcome(passed=True) for _ in gs]

    res = isolate_partitioned([(["a1"], []), (["h1"], ["h2"])], run_round=run_round)
    assert all(set(g) <= {"a1"} or set(g) <= {"h1", "h2"} for g in groups)
    assert ("h1", "h2") in groups and "a1" not in res.good  # a1 passed alone; nothing of its kind to pair
    with pytest.raises(ValueError, match="across parts"):
        isolate_partitioned([(["a1"], []), (["a1", "h1"], [])], run_round=run_round)


def _result(nodes: list[str], busbw: float) -> StepResult:
    step = Step(id="t", index=0, nnodes=len(nodes), ranks_per_node=2, nodes=nodes, world_size=2 * len(nodes),
                collectives=["all_reduce"], sizes=[1024])  # fmt: skip
    s = CollSummary(collective="all_reduce", size_bytes=1024, busbw_gbs=busbw, algbw_gbs=busbw)
    return StepResult(step=step, summary={"all_reduce": s}, verdict="pass")


def test_each_kind_is_judged_against_its_own_singles() -> None:
    req = IsolateRequest(inventory=Path("x"))  # singles within 20 % of the median, groups at 50 %
    kind = {"h1": "H100", "h2": "H100", "h3": "H100", "a1": "A100", "a2": "A100", "a3": "A100"}
    singles = [_result(["h1"], 100.0), _result(["h2"], 98.0), _result(["h3"], 99.0),
               _result(["a1"], 40.0), _result(["a2"], 39.0), _result(["a3"], 41.0)]  # fmt: skip
    refs: dict[str, list[float]] = {}
    assert [o.passed for o in iso.judge_by_kind(singles, req, refs, kind, {})] == [True] * 6
    unlike = iso.judge(singles, req)  # every single against the median of both kinds together
    assert [o.passed for o in unlike] == [True, True, True, False, False, False]
    assert {k: sorted(v) for k, v in refs.items()} == {
        "H100": [98.0, 99.0, 100.0],
        "A100": [39.0, 40.0, 41.0],
    }
    pairs = [_result(["h1", "h2"], 45.0), _result(["a1", "a2"], 30.0)]
    got = iso.judge_by_kind(pairs, req, refs, kind, {})
    assert [o.passed for o in got] == [False, True]  # 45 % of the H100 median; 75 % of the A100's


def test_orch_isolate_on_a_mixed_cluster_tests_and_reports_each_kind_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = {k: v for k, v in MIXED.items() if k in {"h1", "h2", "h3", "m1", "m2", "m3"}}
    fake = StandIn({"m2"})
    monkeypatch.setattr(iso, "make_scheduler", lambda *_a, **_k: fake)
    monkeypatch.setattr(executor, "POLL_INTERVAL_S", 0.0)
    inv = _inventory(tmp_path, nodes)
    req = IsolateRequest(inventory=inv, size=16 * 2**20, out_dir=tmp_path / "runs", python="python3")
    result = iso.run_isolation(req)
    assert LOG.exists()
    assert [(c.kind, c.nodes) for c in result.isolation.culprits] == [("node", ["m2"])]
    assert [p.label for p in result.partitions] == ["nvidia H100", "amd MI300X"]
    kinds = {n: nodes[n][0] for n in nodes}
    assert fake.order and all(len({kinds[n] for n in o}) == 1 for o in fake.order)  # no job mixes kinds
    assert (
        "2 kinds of node, isolated apart: nvidia H100 (h1, h2, h3); amd MI300X (m1, m2, m3)"
        in (result.run_dir / "report.md").read_text()
    )
    render_isolation(result)
    assert "2 kinds of node, isolated apart" in capsys.readouterr().out


def test_scale_test_isolate_takes_gpu_models_from_the_scale_tests_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from test_isolate_run import _res, failed_smoke_run, stand_in

    from orchestrator.models.fingerprint import Fingerprint, FingerprintSet

    fake = stand_in(monkeypatch, {"n3"})
    inv = _inventory(tmp_path, {f"n{i}": ("amd", None) for i in range(1, 5)})  # no gpu_model set
    result = failed_smoke_run(tmp_path, [_res(["n1", "n2", "n3", "n4"], 0.01, "fail")])
    parent = result.run_dir
    gpus = {"n1": "AMD Instinct MI300X", "n2": "AMD Instinct  MI300X", "n3": "AMD Instinct MI250X",
            "n4": "AMD Instinct MI250X"}  # fmt: skip
    fps = FingerprintSet(stack="rocm", nodes={
        n: Fingerprint(node=n, gpus=[Gpu(index=0, name=m), Gpu(index=1, name=m)]) for n, m in gpus.items()
    })  # fmt: skip
    (parent / "fingerprint.json").write_text(fps.model_dump_json())
    monkeypatch.setattr(iso, "stack_python", lambda _name: ("python3", {}))
    found = iso.isolate_after_scale_test(result, inv)
    assert found is not None
    assert [(p.label, p.nodes) for p in found.partitions] == [
        ("amd AMD Instinct MI300X", ["n1", "n2"]),
        ("amd AMD Instinct MI250X", ["n3", "n4"]),
    ]
    # two MI250X nodes and no partner of their kind: the failing pair cannot be told apart (an
    # MI300X partner would have "cleared" n4 against a node of another kind)
    (culprit,) = found.isolation.culprits
    assert (culprit.kind, culprit.nodes) == ("link", ["n3", "n4"]) and "either node" in culprit.why
    assert found.isolation.good == ["n1", "n2"]
    mi300 = {"n1", "n2"}
    assert fake.order and all(set(o) <= mi300 or not set(o) & mi300 for o in fake.order)


def test_a_nodes_gpu_model_from_its_fingerprint() -> None:
    same = [Gpu(index=0, name="NVIDIA  H100 80GB HBM3"), Gpu(index=1, name="NVIDIA H100 80GB HBM3")]
    assert iso.gpu_model_of(same) == "NVIDIA H100 80GB HBM3"
    assert iso.gpu_model_of([Gpu(index=0, name="A"), Gpu(index=1, name=None)]) == "?+A"

"""orch cert readmit: drain, test again, re-admit as one loop, with a delay and a failure budget."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from fakes import ScriptedRunner

from orchestrator.runs.readmit import ReadmitPolicy, readmit_pass
from orchestrator.scheduler.slurm import SlurmScheduler

NOW = datetime(2026, 12, 5, 7, 0, 0)
LONG_AGO = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")
JUST_NOW = (NOW - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")


def _inventory(tmp_path: Path) -> Path:
    inv = tmp_path / "inv.yml"
    hosts = {f"node{i}": {"ansible_host": f"198.18.0.{10 + i}", "gpu_vendor": "none"} for i in range(1, 7)}
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inv


class Slurm(ScriptedRunner):
    """sinfo and `scontrol show node -o` as Slurm 22.05 prints them, from `nodes`: name -> (state,
    reason, when)."""

    def __init__(self, nodes: dict[str, tuple[str, str, str]]) -> None:
        super().__init__()
        self.nodes = nodes

    def answer(self, argv: list[str]) -> tuple[int, str, str]:
        if argv[0] == "sinfo":
            return 0, "".join(f"{n}|{s[0].lower()}\n" for n, s in self.nodes.items()), ""
        if argv[:3] == ["scontrol", "show", "node"]:
            state, reason, when = self.nodes[argv[-1]]
            tail = f" Reason={reason} [root@{when}]" if reason else ""
            return 0, f"NodeName={argv[-1]} Arch=x86_64 CoresPerSocket=1 State={state}{tail}\n", ""
        return 0, "", ""


def _resume(results: dict[str, bool], seen: list[str]) -> Any:
    def resume(node: str, inventory: Path, out_dir: Path) -> Any:
        seen.append(node)
        bad = SimpleNamespace(kind="node", nodes=[node], why="busbw 0.1 < 0.8")
        culprits = [] if results[node] else [bad]
        retest = SimpleNamespace(run_id=f"isolate-{node}", run_dir=out_dir / f"isolate-{node}",
                                 isolation=SimpleNamespace(culprits=culprits))  # fmt: skip
        return SimpleNamespace(resumed=results[node], retest=retest)

    return resume


def _pass(tmp_path: Path, nodes: dict[str, tuple[str, str, str]], results: dict[str, bool], budget: int = 3,
          delay_s: float = 600) -> tuple[Any, list[str]]:  # fmt: skip
    everyone = {f"node{i}": ("IDLE", "", "") for i in range(1, 7)} | nodes
    seen: list[str] = []
    policy = ReadmitPolicy(delay_s=delay_s, max_unavailable=budget)
    sched = SlurmScheduler(runner=Slurm(everyone))
    got = readmit_pass(_inventory(tmp_path), tmp_path / "runs", policy, sched=sched, now=NOW,
                       resume=_resume(results, seen))  # fmt: skip
    return got, seen


def test_a_node_that_passes_again_is_returned_and_a_faulty_one_stays_drained_with_its_evidence(
    tmp_path: Path,
) -> None:
    drained = {
        "node2": ("IDLE+DRAIN", "orch isolate-1: busbw 0.1 < 80% of the median single", LONG_AGO),
        "node5": ("IDLE+DRAIN", "orch health-2: xid 79 on GPU 3", LONG_AGO),
    }
    got, seen = _pass(tmp_path, drained, {"node2": True, "node5": False})
    assert seen == ["node2", "node5"]
    by = {e.node: e for e in got.entries}
    assert by["node2"].action == "returned" and by["node2"].retest == "isolate-node2"
    assert by["node5"].action == "kept drained" and "busbw 0.1 < 0.8" in by["node5"].detail
    assert by["node5"].retest_dir == tmp_path / "runs" / "isolate-node5"
    assert by["node5"].drained_at == NOW - timedelta(hours=2)
    assert got.kept == ["node5"]


def test_a_node_drained_moments_ago_waits_and_one_drained_by_an_admin_is_left_alone(tmp_path: Path) -> None:
    drained = {
        "node1": ("IDLE+DRAIN", "orch isolate-1: bad", JUST_NOW),
        "node3": ("DRAINED", "fan replaced, ticket 4411", LONG_AGO),
    }
    got, seen = _pass(tmp_path, drained, {})
    assert seen == []
    by = {e.node: e for e in got.entries}
    assert by["node1"].action == "waiting" and "re-tested from 07:09:00" in by["node1"].detail
    assert by["node3"].action == "left alone"
    # with no delay, the node orch drained is re-tested; the admin's still is not
    got, seen = _pass(tmp_path, drained, {"node1": True}, delay_s=0)
    assert seen == ["node1"]


def test_the_failure_budget_stops_the_pass_before_it_empties_the_partition(tmp_path: Path) -> None:
    drained = {f"node{i}": ("IDLE+DRAIN", f"orch isolate-{i}: bad", LONG_AGO) for i in (1, 2, 3)}
    got, seen = _pass(tmp_path, drained, dict.fromkeys(drained, True), budget=2)
    assert seen == []  # 3 of 6 unavailable, more than the budget of 2: no re-test
    assert {e.action for e in got.entries} == {"budget reached"}
    assert "3 of 6 nodes unavailable, more than max_unavailable 2" in got.entries[0].detail
    got, seen = _pass(tmp_path, drained, dict.fromkeys(drained, True), budget=3)
    assert seen == ["node1", "node2", "node3"]


def test_a_retest_that_cannot_run_keeps_the_node_drained_and_the_pass_goes_on(tmp_path: Path) -> None:
    drained = {n: ("IDLE+DRAIN", "orch isolate-1: bad", LONG_AGO) for n in ("node1", "node2")}

    def resume(node: str, inventory: Path, out_dir: Path) -> Any:
        if node == "node1":
            raise RuntimeError("salloc: Required node not available")
        return _resume({"node2": True}, [])(node, inventory, out_dir)

    everyone = {f"node{i}": ("IDLE", "", "") for i in range(1, 7)} | drained
    got = readmit_pass(_inventory(tmp_path), tmp_path / "runs", ReadmitPolicy(max_unavailable=5),
                       sched=SlurmScheduler(runner=Slurm(everyone)), now=NOW, resume=resume)  # fmt: skip
    assert [(e.node, e.action) for e in got.entries] == [("node1", "kept drained"), ("node2", "returned")]
    assert "Required node not available" in got.entries[0].detail


@pytest.mark.parametrize(
    ("line", "when"),
    [
        ("NodeName=n1 State=IDLE+DRAIN Reason=orch x: y [root@2026-12-01T07:00:00]", datetime(2026, 12, 1, 7)),  # noqa: E501
        ("NodeName=n1 State=IDLE", None),
    ],
)
def test_node_status_reads_when_the_reason_was_set(line: str, when: datetime | None) -> None:
    class One(ScriptedRunner):
        def answer(self, argv: list[str]) -> tuple[int, str, str]:
            return 0, line + "\n", ""

    state, reason, since = SlurmScheduler(runner=One()).node_status("n1")
    assert since == when and state.startswith("IDLE")
    assert reason == ("orch x: y" if when else "")

"""The fault-kind registry: every kind comes from one family module of faults.kinds, every kind is
reachable through it (listing, build, engine), and an unknown name is refused with the known list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.faults.catalog import CATALOG, fault_info, kind_names, unreachable_warning
from orchestrator.faults.engine import FaultEngine
from orchestrator.models.cluster import Cluster, Node
from orchestrator.models.fault import FAULT_KINDS, IFACE_KINDS, TARGET_FORMS, FaultSpec, FaultTarget
from orchestrator.remote.base import CmdResult

CONTAINER = "ab" * 32
TARGETS = {"node": "node2", "iface": "node2:fab0", "worker": "node2:0", "container": "node2:0"}


class Finder:
    """A node shell that finds one process (pid 4242, in a container) and accepts every script."""

    def __init__(self) -> None:
        self.scripts: list[str] = []

    def run_script(self, script: str, *, timeout: float) -> CmdResult:
        self.scripts.append(script)
        out = json.dumps([{"pid": 4242, "container": CONTAINER}]) if "/proc" in script else ""
        return CmdResult(argv=["sh"], rc=0, stdout=out, stderr="", elapsed_s=0.001)

    def ssh_iface(self) -> str:
        return "eth9"


def _cluster() -> Cluster:
    nodes = [
        Node(
            name=f"node{i}",
            address=f"10.0.0.{i}",
            mgmt_iface="mgmt0",
            rdma_ifaces=["fab0"],
            container_runtime="podman",
        )
        for i in (1, 2, 3)
    ]
    return Cluster(source=Path("x.ini"), nodes=nodes)


def test_every_kind_is_registered_once_in_listing_order() -> None:
    # The listing order of `orch fault list` is the order of models.fault's names, as before.
    assert kind_names() == FAULT_KINDS
    assert all(CATALOG[k].kind == k for k in CATALOG)
    modules = {CATALOG[k].build.__module__ for k in CATALOG}
    assert all(m.startswith("orchestrator.faults.kinds.") for m in modules)
    assert len(modules) == 6  # process, container, link, netfilter, tc, nodeloss


def test_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        fault_info("mtu-nope")
    assert "unknown fault kind 'mtu-nope'" in e.value.message
    for k in FAULT_KINDS:
        assert k in e.value.message


def test_engine_refuses_an_unknown_kind_before_touching_a_node() -> None:
    shell = Finder()
    engine = FaultEngine(_cluster(), {"node2": shell})
    spec = FaultSpec.model_construct(kind="bogus", target=FaultTarget(node="node2"), force=False)
    with pytest.raises(ConfigError, match="known: kill-worker, pause-worker"):
        engine.prepare(spec)
    assert shell.scripts == []


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_kind_builds_through_the_registry(kind: str) -> None:
    shell = Finder()
    engine = FaultEngine(_cluster(), {"node2": shell}, controller=shell)
    target = TARGETS[TARGET_FORMS[kind]]  # type: ignore[index]
    spec = FaultSpec(kind=kind, target=FaultTarget.parse(target, kind), duration_s=1)  # type: ignore[arg-type]
    active = engine.prepare(spec)
    info = CATALOG[kind]  # type: ignore[index]
    assert active.record.kind == kind
    assert active.record.transports == list(info.transports)
    assert active.action.inject
    # Held kinds revert and are guarded by the node-side timer; instant ones (kill, restart) are not.
    assert active.action.timer == info.timer
    assert bool(active.action.revert) == info.timer
    # Kinds that find processes asked the node; the others built their line from the spec alone.
    assert (len(shell.scripts) == 1) == info.finds_processes
    if kind in IFACE_KINDS:
        assert "fab0" in active.action.inject


def test_kind_properties_come_from_the_registry() -> None:
    assert [k for k in FAULT_KINDS if not CATALOG[k].serving] == ["restart-container"]
    assert unreachable_warning("roce-drop", "rdma-hw") is not None
    assert unreachable_warning("link-down", "rdma-hw") is None
    assert CATALOG["kill-worker"].target == "NODE[:RANK|:engine]"

"""The fault selector NODE:engine: a serving engine's processes are found by ORCH_ENGINE in their
environment (faults/resolve.py), not by a rank; the target parses and prints as NODE:engine."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from orchestrator.errors import FaultError
from orchestrator.faults.resolve import find_processes
from orchestrator.models.fault import FaultSpec, FaultTarget
from orchestrator.remote.local import LocalShell

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _spawn(extra: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("ORCH_ENGINE", "ORCH_ENGINE_NODE", "LOCAL_RANK")}
    return subprocess.Popen(SLEEP, env={**env, **extra})


@pytest.fixture
def procs() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    tag = f"run-{os.getpid()}-{time.monotonic_ns()}.fake-r1"
    ps = {
        "engine": _spawn({"ORCH_ENGINE": tag, "ORCH_ENGINE_NODE": "alpha"}),
        "other-node": _spawn({"ORCH_ENGINE": tag, "ORCH_ENGINE_NODE": "beta"}),
        "other-run": _spawn({"ORCH_ENGINE": tag + "x", "ORCH_ENGINE_NODE": "alpha"}),
        "rank": _spawn({"LOCAL_RANK": "0", "RANK": "0"}),
        "plain": _spawn({}),
    }
    ps["engine"].args = tag  # type: ignore[misc]  # the tag, for the test
    try:
        yield ps
    finally:
        for p in ps.values():
            p.kill()
            p.wait()


def test_the_finder_finds_the_engine_by_its_tag_and_node_and_nothing_else(
    procs: dict[str, subprocess.Popen[bytes]],
) -> None:
    tag = str(procs["engine"].args)
    found = find_processes(LocalShell(), "alpha", rank=None, match_env=f"ORCH_ENGINE={tag}", engine=True)
    assert [pid for pid, _ in found] == [procs["engine"].pid]
    # on beta, the other engine of the same step; with no tag given, every engine of that node
    found = find_processes(LocalShell(), "beta", rank=None, match_env=f"ORCH_ENGINE={tag}", engine=True)
    assert [pid for pid, _ in found] == [procs["other-node"].pid]
    anyof = {pid for pid, _ in find_processes(LocalShell(), "alpha", rank=None, engine=True)}
    assert {procs["engine"].pid, procs["other-run"].pid} <= anyof
    assert not {procs["rank"].pid, procs["plain"].pid, procs["other-node"].pid} & anyof
    # a rank is not an engine, and an engine is not a rank
    ranks = {pid for pid, _ in find_processes(LocalShell(), "alpha", rank=0)}
    assert procs["rank"].pid in ranks and procs["engine"].pid not in ranks


def test_no_engine_is_a_fault_error_naming_the_selector() -> None:
    with pytest.raises(FaultError, match=r"no serving engine found.*ORCH_ENGINE=nothing-here"):
        find_processes(LocalShell(), "alpha", rank=None, match_env="ORCH_ENGINE=nothing-here", engine=True)


def test_node_engine_target_parses_for_kill_and_pause_only() -> None:
    t = FaultTarget.parse("node1:engine", "kill-worker")
    assert t.process == "engine" and t.rank is None and str(t) == "node1:engine"
    assert FaultTarget.parse("node1:engine", "pause-worker").process == "engine"
    # restart-container reads the word as a container name (the plan check refuses it on serving)
    assert FaultTarget.parse("node1:engine", "restart-container").container == "engine"
    with pytest.raises(ValueError, match="takes NODE, NODE:RANK or NODE:engine"):
        FaultTarget.parse("node1:engines", "kill-worker")
    with pytest.raises(ValidationError, match="does not take NODE:engine"):
        FaultSpec(kind="node-loss", target=FaultTarget(node="node1", process="engine"))

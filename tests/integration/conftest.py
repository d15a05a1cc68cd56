"""The running virtual lab as a session fixture for integration tests.

Reads the lab recorded in the state dir (ORCH_LAB_STATE_DIR, default /var/lib/orch-lab). If none is
running and healthy, brings a 3-node lab up and takes it down at the end of the session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.lab import down, slurm_env, status, up
from orchestrator.lab.config import DEFAULT_STATE_DIR, LabConfig, NodeSpec, make_config
from orchestrator.lab.state import LabState, load_state

REPO = Path(__file__).resolve().parents[2]


# Modules that move a node off the session's cpu-gloo stack run after every other module, in this
# order (test_migrate_serving_lab needs node1 on cpu-serve, as test_serving_lab leaves it).
LAST = ("test_serving_lab.py", "test_migrate_serving_lab.py")


# The lab's set-up steps and their wall times (bring-up, provisioning, a module's own lab), printed
# after the 30 slowest tests: fixtures' set-up is where CI's minutes go besides the tests.
SETUP_TIMES: list[tuple[str, float]] = []


def record_setup(what: str, started: float) -> None:
    """Note that ``what`` took from ``started`` (time.monotonic()) until now."""
    SETUP_TIMES.append((what, time.monotonic() - started))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SETUP_TIMES:
        terminalreporter.section("lab set-up times")
        for what, secs in SETUP_TIMES:
            terminalreporter.write_line(f"{secs:7.1f} s  {what}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.nodeid:
            item.add_marker(pytest.mark.lab)
    def rank(item: pytest.Item) -> int:
        module = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        return LAST.index(module) + 1 if module in LAST else 0

    items.sort(key=rank)  # stable: the order is kept otherwise


@dataclass(frozen=True)
class Lab:
    """Facts of the running lab that tests use."""

    config: LabConfig
    nodes: list[NodeSpec]
    env: dict[str, str]

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    @property
    def inventory(self) -> Path:
        return self.config.inventory_out

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)

    def state(self) -> LabState:
        state = load_state(self.config.state_file)
        assert state is not None, "lab state vanished"
        return state

    def ssh_argv(self, node: NodeSpec, *cmd: str, known_hosts: Path | None = None) -> list[str]:
        return [
            "ssh",
            "-i",
            str(self.config.client_key),
            "-o",
            f"UserKnownHostsFile={known_hosts or self.config.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            f"root@{node.mgmt_address}",
            *cmd,
        ]

    def ssh(self, node: NodeSpec, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(self.ssh_argv(node, *cmd), check=check)

    def slurm(self, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return run(list(argv), env=self.env, check=check, timeout=timeout)


def run(
    argv: list[str], *, env: dict[str, str] | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run argv and capture text; with check, fail the test showing stdout and stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"{argv} exited {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def lab_config(state_dir: Path) -> LabConfig:
    """The config of a default 3-node lab in ``state_dir`` (used when none is running), as
    `orch lab up --nodes 3` from the checkout makes it: the nodes do not see the checkout."""
    return make_config(
        nodes=3,
        state_dir=state_dir,
        inventory_out=REPO / "inventories" / "lab.ini",
        accounting=True,
        hostname=os.uname().nodename.split(".")[0],
        cpus=max(os.cpu_count() or 1, 2),
    )


@pytest.fixture(autouse=True)
def _lab_nodes_usable(lab: Lab) -> None:
    """Each test starts with no lab node down or completing in Slurm. A test that cut a node's
    management link leaves it DOWN* ("not responding") for a minute or more after the link is
    back, and the next test's ladder met it (seen in CI: "node3 is down*"). After 10 s such a
    node is resumed (scontrol update state=resume), as an admin would; 90 s bound the wait."""
    start = time.monotonic()
    resumed: set[str] = set()
    while time.monotonic() - start < 90:
        proc = lab.slurm("sinfo", "--noheader", "--Node", "--format=%N %T", check=False)
        rows = [ln.split() for ln in proc.stdout.splitlines() if len(ln.split()) == 2]
        # Drained nodes and running jobs are some test's own business; these are not.
        bad = [(n, s) for n, s in rows if s.endswith("*") or s.startswith(("down", "completing"))]
        if proc.returncode == 0 and rows and not bad:
            return
        if time.monotonic() - start > 10:
            for node, state in bad:
                if state.startswith("down") and node not in resumed:
                    lab.slurm("scontrol", "update", f"nodename={node}", "state=resume", check=False)
                    resumed.add(node)
        time.sleep(1)


def already_provisioned(started_here: bool) -> bool:
    """Whether the running lab's nodes were provisioned with cpu-gloo before this session: `make
    test` exports ORCH_LAB_PROVISIONED=1 when its background provisioning of the lab exited 0. A
    lab this session brought up itself is not that lab, and is always provisioned."""
    return not started_here and os.environ.get("ORCH_LAB_PROVISIONED") == "1"


@pytest.fixture(scope="session")
def lab() -> Iterator[Lab]:
    """The running lab's facts; brings one up (and down at the end) when none runs."""
    if os.geteuid() != 0:
        pytest.skip("the virtual lab needs root (network namespaces, daemons)")
    state_dir = Path(os.environ.get("ORCH_LAB_STATE_DIR", str(DEFAULT_STATE_DIR)))
    started_here = False
    t0 = time.monotonic()
    if not status(lab_config(state_dir)).healthy:
        up(lab_config(state_dir))
        started_here = True
        record_setup("3-node lab up (session fixture)", t0)
    state = load_state(state_dir / "state.json")
    assert state is not None
    cfg = state.config
    # The lab's inventory names its stack (orch_stack=cpu-gloo) and scale-test checks every node
    # against it: a fresh lab is provisioned once (about 2 minutes; 30-120 s when already done).
    # `make test` provisions the lab it brought up in the background during lint and the unit
    # tests, and says so with ORCH_LAB_PROVISIONED=1 when that exited 0: not done twice then.
    if not already_provisioned(started_here):
        t0 = time.monotonic()
        prov = subprocess.run(
            [sys.executable, "-m", "orchestrator", "provision", "-i", str(cfg.inventory_out),
             "--stack", "cpu-gloo"],
            capture_output=True, text=True, timeout=900, check=False, cwd=REPO,
        )  # fmt: skip
        if prov.returncode != 0:
            pytest.fail(f"provisioning the lab failed:\n{prov.stdout}\n{prov.stderr}")
        record_setup("cpu-gloo provisioning of the session's lab", t0)
    yield Lab(config=cfg, nodes=cfg.node_specs, env=slurm_env(cfg))
    if started_here:
        down(cfg)


def lab_inventory_of(lab: Lab, nodes: tuple[str, ...], path: Path) -> Path:
    """The lab's inventory with only `nodes` (their lines and groups as the lab's, its [all:vars])."""
    lines = lab.inventory.read_text().splitlines()
    vars_at = lines.index("[all:vars]")
    keep = [ln for ln in lines[:vars_at] if ln.startswith("[") or ln.split(" ", 1)[0] in nodes]
    path.write_text("\n".join(keep + lines[vars_at:]) + "\n")
    return path


@pytest.fixture(scope="session")
def cpu_serve_nodes(lab: Lab) -> tuple[str, ...]:
    """node1 and node2 on cpu-serve, provisioned once for the serving modules (test_serving_lab on
    node1, test_migrate_serving_lab on both): one playbook for the two nodes. conftest runs those
    modules last (LAST): no test after them needs node1 or node2 on cpu-gloo."""
    nodes = ("node1", "node2")
    t0 = time.monotonic()
    prov = subprocess.run(
        [sys.executable, "-m", "orchestrator", "provision", "-i", str(lab.inventory), "--stack", "cpu-serve",
         "--limit", ",".join(nodes)],
        capture_output=True, text=True, timeout=1200, check=False, cwd=REPO,
    )  # fmt: skip
    if prov.returncode != 0:
        pytest.fail(f"provisioning cpu-serve on {', '.join(nodes)} failed:\n"
                    f"{prov.stdout[-3000:]}\n{prov.stderr[-3000:]}")  # fmt: skip
    record_setup(f"cpu-serve provisioning of {' and '.join(nodes)} (the serving modules)", t0)
    return nodes

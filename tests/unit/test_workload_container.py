"""Workloads in the stack's image: the rendered runtime argv, the names, the binds, and how
recovery-test decides to run the probe in containers (and refuses, naming what is missing)."""

from __future__ import annotations

import shlex
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.errors import ConfigError
from orchestrator.faults.kinds.container import restart_container
from orchestrator.models.cluster import Cluster, ClusterVars, ContainerRuntime, Node
from orchestrator.models.container import StackContainer, container_name, stack_container
from orchestrator.models.fault import FaultSpec, FaultTarget
from orchestrator.models.stack import Stack
from orchestrator.runs import recovery_request as rr
from orchestrator.runs.probe_jobs import ProbeJob
from orchestrator.stacks import load_stack

RUN_ID = "20261201T060000Z-recovery-restart-container-ab12"


def _cluster(*runtimes: ContainerRuntime, stack: str | None = "cpu-gloo") -> Cluster:
    nodes = [Node(name=f"node{k + 1}", address=f"198.18.0.{11 + k}", container_runtime=r)
             for k, r in enumerate(runtimes)]  # fmt: skip
    return Cluster(source=Path("lab.ini"), nodes=nodes, vars=ClusterVars(orch_stack=stack))


def test_the_cpu_stack_names_an_image_built_on_each_node() -> None:
    stack = load_stack("cpu-gloo")
    assert stack.container is not None and stack.container.build == "import"
    assert stack.workload_image == "localhost/orch-stack/cpu-gloo:provisioned"
    c = stack_container(stack, _cluster("podman", "docker"))
    assert c.python == "/opt/orch/venv/bin/python" and c.storage == "/opt/orch/containers"
    assert c.runtimes == {"node1": "podman", "node2": "docker"}


def test_a_gpu_stack_runs_its_registry_image_by_digest() -> None:
    doc = load_stack("rocm-6.2").model_dump(mode="json")
    digest = "sha256:" + "ab" * 32
    doc.update(container_runtime="docker", image={"repository": "docker.io/rocm/pytorch", "digest": digest})
    c = stack_container(Stack.model_validate(doc), _cluster("docker"))
    assert c.image == f"docker.io/rocm/pytorch@{digest}" and c.storage is None


@pytest.mark.parametrize(
    ("update", "msg"),
    [
        ({"image": {"repository": "docker.io/x/y", "digest": "sha256:" + "0" * 64}}, "not both"),
        ({"container": {"build": "import", "repository": "docker.io/x/y"}}, "local image name"),
        ({"container": {"build": "import", "repository": "localhost/x", "storage": "/a/../e"}}, "absolute"),
        ({"container": {"build": "import", "repository": "localhost/x", "exclude": ["../etc"]}}, "relative"),
        ({"container": {"build": "docker-build", "repository": "localhost/x"}}, "import"),
    ],
)
def test_bad_container_sections_are_refused(update: dict[str, Any], msg: str) -> None:
    doc = load_stack("cpu-gloo").model_dump(mode="json")
    doc.update(container_runtime="podman", **update)
    with pytest.raises(ValueError, match=msg):
        Stack.model_validate(doc)


def test_the_podman_run_argv_names_binds_and_quotes() -> None:
    c = StackContainer(image="localhost/orch-stack/cpu-gloo:provisioned", storage="/opt/orch/containers",
                       python="/opt/orch/venv/bin/python", runtimes={"node2": "podman"})  # fmt: skip
    out = Path("/srv/runs/it's here/probe")
    env = {"ORCH_NODE": "node2", "GLOO_SOCKET_IFNAME": "fab0", "X": "a b;$(id)"}
    argv = c.run_argv("node2", name="orch-r1-node2", argv=["python", "-m", "m", "--out", str(out)], env=env,
                      binds=[out], log=out / "agent-node2.log")  # fmt: skip
    assert argv[:7] == ["podman", "--runtime", "runc", "--root", "/opt/orch/containers/root",
                        "--runroot", "/opt/orch/containers/run"]  # fmt: skip
    assert argv[7:11] == ["run", "-d", "--name", "orch-r1-node2"]
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("-v") + 1] == f"{out}:{out}" and argv.count("-v") == 1
    assert f"path={out}/agent-node2.log" in argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "-e"] == [f"{k}={v}" for k, v in env.items()]
    i = argv.index("localhost/orch-stack/cpu-gloo:provisioned")
    assert argv[i + 1 :] == ["python", "-m", "m", "--out", str(out)]
    # crossing the node's shell, every word comes back whole
    assert shlex.split(shlex.join(argv)) == argv
    assert c.rm_argv("node2", "orch-r1-node2")[-4:] == ["rm", "-f", "-t", "5", "orch-r1-node2"][-4:]


def test_docker_gets_neither_runc_nor_the_podman_store() -> None:
    c = StackContainer(image="localhost/x:provisioned", storage="/opt/s", python="python3",
                       runtimes={"n1": "docker"})  # fmt: skip
    argv = c.run_argv("n1", name="orch-r-n1", argv=["python3"], env={}, binds=[], log=Path("/l"))
    assert argv[:3] == ["docker", "run", "-d"] and "runc" not in argv and "--root" not in argv
    assert "--log-opt" not in argv and "--ulimit" not in argv
    with pytest.raises(ConfigError, match="nosuch"):
        c.run_argv("nosuch", name="x", argv=[], env={}, binds=[])


def test_container_names_are_run_and_node_and_checked() -> None:
    assert container_name(RUN_ID, "node2") == f"orch-{RUN_ID}-node2"
    for bad in ("a b", "x;rm", "../x"):
        with pytest.raises(ConfigError, match="container name"):
            container_name(bad, "node2")


def test_the_restart_fault_uses_the_same_store_flags() -> None:
    spec = FaultSpec(kind="restart-container", target=FaultTarget(node="node2", container="orch-r-node2"),
                     params={"podman_root": "/opt/orch/containers/root",  # type: ignore[arg-type]
                             "podman_runroot": "/opt/orch/containers/run"})  # fmt: skip
    c = StackContainer(image="localhost/x:provisioned", storage="/opt/orch/containers", python="python3",
                       runtimes={"node2": "podman"})  # fmt: skip
    action = restart_container(spec, "podman", "orch-r-node2")
    assert action.inject.startswith(shlex.join([*c.runtime("node2"), "restart"]))


# -- recovery-test chooses container mode ----------------------------------------------------------


def test_restart_container_runs_the_probe_in_the_stack_image_over_ssh() -> None:
    req = rr.RecoveryTestRequest(kind="restart-container", target="node2:1", launcher="auto")
    got = rr.resolve_launcher(rr.resolve_container(req, _cluster("podman", "podman")), _cluster("podman"))
    assert got.container is not None and got.container.image.endswith(":provisioned")
    assert got.launcher == "ssh"
    kill = rr.RecoveryTestRequest(kind="kill-worker", target="node2:1")
    assert rr.resolve_container(kill, _cluster("podman")).container is None
    forced = rr.resolve_container(kill.model_copy(update={"in_container": True}), _cluster("podman"))
    assert forced.container is not None
    off = req.model_copy(update={"in_container": False})
    assert rr.resolve_container(off, _cluster("none")).container is None


@pytest.mark.parametrize(
    ("cluster", "msg"),
    [
        (_cluster("podman", "none"), "node2: container_runtime is none"),
        (_cluster("podman", stack=None), "names no stack"),
        (_cluster("podman", stack="cuda-12.4"), None),
    ],
)
def test_container_mode_is_refused_naming_what_is_missing(cluster: Cluster, msg: str | None) -> None:
    req = rr.RecoveryTestRequest(kind="restart-container", target="node2:1")
    stack = load_stack(cluster.vars.orch_stack) if cluster.vars.orch_stack else None
    if msg is None:  # a stack without an image is refused by name (whichever the repo ships)
        if stack is not None and stack.workload_image is not None:
            assert rr.resolve_container(req, cluster).container is not None
            return
        msg = "names no container image"
    with pytest.raises(ConfigError, match=msg):
        rr.resolve_container(req, cluster)


def test_the_cli_refuses_restart_container_on_a_node_without_runtime(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.cli import fault as cli_fault
    from orchestrator.cli import main

    monkeypatch.setattr(cli_fault, "load_inventory", lambda _p: _cluster("podman", "none", "podman"))
    monkeypatch.setattr(cli_fault, "node_shells", lambda _c: nullcontext({}))
    with pytest.raises(SystemExit) as e:
        main(["recovery-test", "--fault", "restart-container", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "node2: container_runtime is none" in err.replace("\n", " ")
    assert list(tmp_path.iterdir()) == []  # refused before any run folder


class _Shell:
    def __init__(self) -> None:
        self.scripts: list[str] = []

    def run_script(self, script: str, timeout: float) -> Any:
        self.scripts.append(script)
        return SimpleNamespace(ok=True, stdout="", brief=lambda: "")


def test_the_probe_job_starts_one_container_per_node_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = _cluster("podman", "podman")
    # The run folder is declared shared: the probe's files are not collected over SSH here.
    shared = cluster.vars.model_copy(update={"orch_shared_dirs": [tmp_path]})
    cluster = cluster.model_copy(update={"vars": shared})
    req = rr.resolve_container(rr.RecoveryTestRequest(kind="restart-container", target="node2:1"), cluster)
    shells = {n.name: _Shell() for n in cluster.nodes}
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run x" / "probe"
    job = ProbeJob(cluster, shells, req, Path("run x/probe"), RUN_ID)  # type: ignore[arg-type]
    job.start()
    line = shells["node2"].scripts[0]
    rm, run = line.split(" >/dev/null 2>&1; ")
    name = f"orch-{RUN_ID}-node2"
    assert shlex.split(rm)[-2:] == ["5", name] and "rm" in shlex.split(rm)
    argv = shlex.split(run)
    assert argv[argv.index("--name") + 1] == name and argv[argv.index("-v") + 1] == f"{out}:{out}"
    assert "ORCH_PROBE_RUN=" + RUN_ID in argv and not any(a.startswith("PYTHONPATH=") for a in argv)
    image = argv.index("localhost/orch-stack/cpu-gloo:provisioned")
    assert argv[image + 1] == "/opt/orch/venv/bin/python" and "--node-rank=1" in argv
    assert argv[argv.index("--out") + 1] == str(out)  # absolute, as the bind
    assert str(Path(__file__).resolve().parents[2]) not in run  # nothing of the checkout reaches it
    job.stop(grace_s=0)
    assert shlex.split(shells["node2"].scripts[-1].split(" >")[0])[-2:] == ["5", name]


def test_a_plan_cannot_restart_a_rank_container_that_scale_test_does_not_make() -> None:
    from orchestrator.models.plan import Plan, Step
    from orchestrator.runs.step_faults import check_plan_faults

    step = Step(id="n2xg1", index=0, nnodes=2, ranks_per_node=1, nodes=["node1", "node2"], world_size=2,
                collectives=["all_reduce"], sizes=[1024])  # type: ignore[list-item]  # fmt: skip
    cluster = _cluster("podman", "podman")

    def plan(target: str) -> Plan:
        faults = [{"kind": "restart-container", "target": target}]
        return Plan.model_validate({"name": "p", "sizes": {"min": 8, "max": 1024}, "faults": faults})

    with pytest.raises(ConfigError, match="do not run in containers") as e:
        check_plan_faults(plan("node2:1"), cluster, [step], force=False)
    assert "orch recovery-test --fault restart-container" in (e.value.hint or "")
    assert check_plan_faults(plan("node2:orch-serving"), cluster, [step], force=False) == []

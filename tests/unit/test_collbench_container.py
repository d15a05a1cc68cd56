"""collbench in the stack's image (scale-test --container): the argv each rank runs, what it is
given by name only, the choice auto/on/off, the cleanup line, and the line where ranks say where
they ran."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.models.cluster import Cluster, ClusterVars, ContainerRuntime, GpuVendor, Node
from orchestrator.models.container import StackContainer, stack_container
from orchestrator.models.plan import Plan, PlanOverrides, Step
from orchestrator.plan import expand_steps, resolve_plan
from orchestrator.runs.executor import CONTAINER_ENV, container_cleanup_line, job_spec
from orchestrator.runs.stack_stage import workload_container
from orchestrator.stacks import load_stack
from orchestrator.workloads.collbench import container_engine, container_line

RUN = "20261202T060000Z-smoke-ab12"
WORKDIR = Path("/var/tmp/orch/runs") / RUN / "steps" / "n2xg1"


def _cluster(
    *runtimes: ContainerRuntime, vendor: GpuVendor = "none", stack: str | None = "cpu-gloo"
) -> Cluster:
    nodes = [
        Node(name=f"node{k + 1}", address=f"198.18.0.{11 + k}", container_runtime=r, gpu_vendor=vendor,
             gpus_per_node=2, rdma_ifaces=["fab0"])
        for k, r in enumerate(runtimes)
    ]  # fmt: skip
    return Cluster(source=Path("lab.ini"), nodes=nodes, vars=ClusterVars(orch_stack=stack))


def _plan() -> Plan:
    return resolve_plan("smoke", PlanOverrides(backend="slurm"))


def _two_node_step(cluster: Cluster, plan: Plan) -> Step:
    return next(s for s in expand_steps(plan, cluster) if s.nnodes == 2)


def test_each_rank_runs_collbench_in_the_image_given_its_variables_by_name_only() -> None:
    cluster = _cluster("podman", "podman")
    plan = _plan()
    step = _two_node_step(cluster, plan)
    c = stack_container(load_stack("cpu-gloo"), cluster)
    env = {"OMP_NUM_THREADS": "1", "GLOO_DEVICE_TRANSPORT": "TCP"}
    spec = job_spec(step, plan, cluster, "slurm", WORKDIR, c.python, 29500, env, c, RUN)
    argv = spec.argv
    # podman with orch's own store, in the foreground, removed when the rank ends
    assert argv[:7] == ["podman", "--runtime", "runc", "--root", "/opt/orch/containers/root",
                        "--runroot", "/opt/orch/containers/run"]  # fmt: skip
    assert argv[7:9] == ["run", "--rm"] and "-d" not in argv
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--label") + 1] == f"orch.run={RUN}"
    assert argv[argv.index("-v") + 1] == f"{WORKDIR}:{WORKDIR}" and argv[argv.index("-w") + 1] == str(WORKDIR)
    # the image, then the image's Python runs collbench
    i = argv.index("localhost/orch-stack/cpu-gloo:provisioned")
    assert argv[i + 1 : i + 4] == ["/opt/orch/venv/bin/python", "-m", "orchestrator.workloads.collbench"]
    names = [argv[k + 1] for k in range(i) if argv[k] == "-e"]
    assert set(names) == {*CONTAINER_ENV, *env}
    assert all("=" not in n for n in names), "a value never goes on the command line"
    # the job's own environment still carries the values the task passes on
    assert spec.env == env
    # no GPU devices on a CPU stack
    assert "--device" not in argv[:i] and "--ipc" not in argv[:i]


@pytest.mark.parametrize(
    ("vendor", "runtime", "expected"),
    [
        ("amd", "podman", ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]),
        ("nvidia", "podman", ["--device", "nvidia.com/gpu=all"]),
        ("nvidia", "docker", ["--gpus", "all"]),
    ],
)
def test_gpu_ranks_get_their_vendors_devices(
    vendor: GpuVendor, runtime: ContainerRuntime, expected: list[str]
) -> None:
    c = StackContainer(image="docker.io/rocm/pytorch@sha256:" + "ab" * 32, python="python3",
                       runtimes={"node1": runtime, "node2": runtime})  # fmt: skip
    argv = c.task_argv(["node1", "node2"], argv=["python3"], env_names=[], workdir=WORKDIR, run_id=RUN,
                       gpu_vendor=vendor, rdma=True)  # fmt: skip
    text = shlex.join(argv)
    assert shlex.join(expected) in text
    assert "--ipc host" in text
    assert "--device /dev/infiniband --ulimit memlock=-1:-1" in text
    if runtime == "docker":
        assert argv[0] == "docker" and "--runtime" not in argv


def test_a_step_over_nodes_with_different_runtimes_is_refused_naming_them() -> None:
    c = StackContainer(image="localhost/x:provisioned", python="python3",
                       runtimes={"node1": "podman", "node2": "docker"})  # fmt: skip
    with pytest.raises(ConfigError, match=r"node1, node2.*differ \(docker, podman\)"):
        c.task_argv(["node1", "node2"], argv=["x"], env_names=[], workdir=WORKDIR, run_id=RUN)


@pytest.mark.parametrize("bad", ["A=B", "X;rm", "", "1ABC", "A B"])
def test_a_variable_that_is_not_a_name_is_refused(bad: str) -> None:
    c = StackContainer(image="localhost/x:provisioned", python="python3", runtimes={"node1": "podman"})
    with pytest.raises(ConfigError, match="not an environment variable name"):
        c.task_argv(["node1"], argv=["x"], env_names=[bad], workdir=WORKDIR, run_id=RUN)


def test_auto_on_off() -> None:
    cluster = _cluster("podman", "podman", "none")
    plan = _plan()
    steps = [s for s in expand_steps(plan, cluster) if "node3" not in s.nodes]
    assert workload_container("off", "cpu-gloo", cluster, steps) is None
    # the CPU stack's image is built from its tree for restart-container: auto runs from /opt
    assert workload_container("auto", "cpu-gloo", cluster, steps) is None
    assert workload_container("auto", None, cluster, steps) is None
    on = workload_container("on", "cpu-gloo", cluster, steps)
    assert on is not None and on.image == "localhost/orch-stack/cpu-gloo:provisioned"
    assert sorted(on.runtimes) == ["node1", "node2"]  # node3 (no runtime) runs no step: not asked
    with pytest.raises(ConfigError, match="node3: container_runtime is none"):
        workload_container("on", "cpu-gloo", cluster, expand_steps(plan, cluster))
    with pytest.raises(ConfigError, match="needs a stack"):
        workload_container("on", None, cluster, steps)


def test_cleanup_line_removes_the_runs_containers_only() -> None:
    c = StackContainer(image="localhost/x:provisioned", python="python3", storage="/opt/orch/containers",
                       runtimes={"node1": "podman"})  # fmt: skip
    line = container_cleanup_line(c, "node1", RUN)
    rt = "podman --runtime runc --root /opt/orch/containers/root --runroot /opt/orch/containers/run"
    assert line == f"{rt} ps -aq --filter label=orch.run={RUN} | xargs -r {rt} rm -f -t 5 >/dev/null"


def test_ranks_say_which_engine_they_ran_in(tmp_path: Path) -> None:
    assert container_engine(tmp_path) == "none"
    (tmp_path / ".dockerenv").touch()
    assert container_engine(tmp_path) == "docker"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".containerenv").touch()
    assert container_engine(tmp_path) == "podman"
    assert container_line(["podman"] * 4) == "# Container: podman (4 of 4 ranks)"
    assert container_line(["podman", "none"]) == "# Container: podman (1 of 2 ranks)"
    assert container_line(["none", "none"]) == "# Container: none"

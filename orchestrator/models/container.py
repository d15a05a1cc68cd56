"""Workloads in the stack's image: the argv of ``RUNTIME run`` and ``RUNTIME rm -f`` for one run's
container on one node, with the node's own runtime (the inventory's ``container_runtime``).

The image is the stack's (``Stack.workload_image``: a registry image by digest, or the one built on
each node at provisioning from the stack's tree, playbooks/roles/stack_image). Each container is
named after the run and the node, shares the node's network (``--network host``: the fabric NIC
and the rendezvous address are the node's), sees the run's node folder at the same path, and is
removed with ``rm -f`` whatever ends the run. Nothing of the controller's checkout is mounted.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import Field

from orchestrator.errors import ConfigError
from orchestrator.models.base import StrictModel
from orchestrator.models.cluster import Cluster, ContainerRuntime, GpuVendor
from orchestrator.models.names import ID_MAX, check_name
from orchestrator.models.stack import ContainerRuntimeChoice, Stack

# The virtual lab's podman runs containers only with runc (crun fails on hybrid cgroups) and
# explicit rlimits (podman's defaults, and even --ulimit host, fail with EPERM): LAB-NOTES.md.
PODMAN_FLAGS = ("--runtime", "runc")
PODMAN_RUN_FLAGS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


# Where a run's workloads run: off = from the stack's tree; on = in its image; auto = runs/stack_stage.py.
ContainerChoice = Literal["auto", "on", "off"]

# The label on every workload container of a run: ``orch.run=<run id>``.
RUN_LABEL = "orch.run"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_env_name(name: str) -> str:
    """name, when it is a variable name; raises ConfigError otherwise (it goes on a command line)."""
    if not _ENV_NAME.match(name):
        raise ConfigError(f"{name!r} is not an environment variable name")
    return name


def runtime_argv(runtime: ContainerRuntime, storage: str | None = None) -> list[str]:
    """The runtime and the flags every subcommand takes (podman: runc, and orch's own store)."""
    if runtime == "none":
        raise ConfigError("no container runtime", hint="set container_runtime=podman|docker in the inventory")
    if runtime != "podman":
        return [runtime]
    store = ["--root", f"{storage}/root", "--runroot", f"{storage}/run"] if storage else []
    return [runtime, *PODMAN_FLAGS, *store]


def container_name(run_id: str, node: str) -> str:
    """``orch-<run id>-<node>``: one container per run and node; raises ConfigError on a bad name."""
    try:
        return check_name(f"orch-{run_id}-{node}", what="container name", max_len=ID_MAX + 70)
    except ValueError as e:
        raise ConfigError(str(e)) from e


class StackContainer(StrictModel):
    """The stack's image as a run uses it: resolved from the stack and the inventory."""

    image: str = Field(description="REPO@DIGEST or REPO:TAG", pattern=r"^[a-z0-9][a-z0-9._/:@-]*$")
    storage: str | None = Field(default=None, pattern=r"^/[A-Za-z0-9_./+-]*$", description="podman store")
    python: str = Field(description="the interpreter inside the image", pattern=r"^[A-Za-z0-9_./+-]+$")
    runtimes: dict[str, ContainerRuntimeChoice] = Field(description="node -> its container runtime")

    def runtime(self, node: str) -> list[str]:
        """The node's runtime argv (raises ConfigError for a node the run does not know)."""
        try:
            return runtime_argv(self.runtimes[node], self.storage)
        except KeyError as e:
            raise ConfigError(f"{node}: not in the run's container nodes") from e

    def run_argv(
        self,
        node: str,
        *,
        name: str,
        argv: list[str],
        env: dict[str, str],
        binds: list[Path],
        log: Path | None = None,
    ) -> list[str]:
        """``RUNTIME run -d`` of argv in the image on node: host network, each bind at its own path
        (read-write), env as ``-e K=V``, the container's output in ``log`` (podman)."""
        rt = self.runtime(node)
        logs: list[str] = []
        if log is not None and self.runtimes[node] == "podman":
            logs = ["--log-driver", "k8s-file", "--log-opt", f"path={log}"]
        return [
            *rt,
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            *(PODMAN_RUN_FLAGS if self.runtimes[node] == "podman" else ()),
            *logs,
            "-w",
            "/",
            *(a for b in binds for a in ("-v", f"{b}:{b}")),
            *(a for k, v in env.items() for a in ("-e", f"{k}={v}")),
            self.image,
            *argv,
        ]

    def task_argv(
        self,
        nodes: list[str],
        *,
        argv: list[str],
        env_names: list[str],
        workdir: Path,
        run_id: str,
        gpu_vendor: GpuVendor = "none",
        rdma: bool = False,
    ) -> list[str]:
        """``RUNTIME run --rm`` of one rank's argv in the image, in the foreground: what each task
        of a step runs (srun starts one per rank, on every node of the step).

        The container shares the node's network (the fabric NIC, the rendezvous address) and sees
        the step's folder at its own path. Variables pass by name only (``-e NAME``: the value is
        the task's, set by srun or the job script, and never written on the command line). It is
        labelled with the run, so that ``runs.executor.container_cleanup_line`` removes any left
        behind. GPUs: AMD's documented devices (/dev/kfd, /dev/dri, group video); NVIDIA's through
        CDI (podman) or ``--gpus all`` (docker). Raises ConfigError when the step's nodes differ
        in runtime (one argv serves every rank).
        """
        kinds = {self.runtimes.get(n) for n in nodes}
        if len(kinds) != 1 or None in kinds:
            raise ConfigError(
                f"nodes {', '.join(nodes)}: one step's ranks run one command, but the nodes' "
                f"container runtimes differ ({', '.join(sorted(str(k) for k in kinds))})",
                hint="give the step's nodes the same container_runtime, or --container off",
            )
        runtime = kinds.pop()
        assert runtime is not None
        devices: list[str] = []
        if gpu_vendor == "amd":
            devices = ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video"]
            devices += ["--ipc", "host"]
        elif gpu_vendor == "nvidia":
            gpus = ["--device", "nvidia.com/gpu=all"] if runtime == "podman" else ["--gpus", "all"]
            devices = [*gpus, "--ipc", "host"]
        if rdma:
            devices += ["--device", "/dev/infiniband", "--ulimit", "memlock=-1:-1"]
        return [
            *self.runtime(nodes[0]),
            "run",
            "--rm",
            "--network",
            "host",
            "--label",
            f"{RUN_LABEL}={run_id}",
            *(PODMAN_RUN_FLAGS if runtime == "podman" else ()),
            *devices,
            "-w",
            str(workdir),
            "-v",
            f"{workdir}:{workdir}",
            *(a for k in sorted(set(env_names)) for a in ("-e", check_env_name(k))),
            self.image,
            *argv,
        ]

    def rm_argv(self, node: str, name: str) -> list[str]:
        """``RUNTIME rm -f`` of the run's container (a missing one is not an error for the caller)."""
        return [*self.runtime(node), "rm", "-f", "-t", "5", name]


def stack_container(stack: Stack, cluster: Cluster) -> StackContainer:
    """The stack's image for every node of cluster; raises ConfigError naming the stack when it
    has no image, or the first node whose inventory names no container runtime."""
    image = stack.workload_image
    if image is None:
        raise ConfigError(
            f"stack {stack.name} names no container image",
            hint="add a 'container' (build: import) or an 'image' section to the stack (docs/stacks.md)",
        )
    runtimes: dict[str, ContainerRuntimeChoice] = {}
    for node in cluster.nodes:
        if node.container_runtime == "none":
            raise ConfigError(
                f"{node.name}: container_runtime is none, so it cannot run stack {stack.name}'s image",
                hint=f"set container_runtime=podman (or docker) for {node.name} in {cluster.source}"
                " and provision again",
            )
        runtimes[node.name] = node.container_runtime
    # A registry image without a python section runs the python3 on its own PATH.
    python = str(PurePosixPath(stack.python.prefix) / "bin" / "python") if stack.python else "python3"
    return StackContainer(
        image=image,
        storage=stack.container.storage if stack.container is not None else None,
        python=python,
        runtimes=runtimes,
    )

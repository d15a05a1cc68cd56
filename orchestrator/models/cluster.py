"""The cluster as orch sees it: nodes and groups from the user's Ansible inventory.

These models hold values that were already checked by `orchestrator.inventory`, which names the
file, host and variable when something is wrong. The field validators here repeat the checks that
matter for safety (names that reach a command line, interface names), so that a Node built by hand
in code or in a test cannot carry a value the loader would have refused.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from orchestrator.errors import InventoryError
from orchestrator.models.base import StrictModel
from orchestrator.models.cost import CostModel

GpuVendor = Literal["amd", "nvidia", "none"]
ContainerRuntime = Literal["podman", "docker", "none"]
Connection = Literal["ssh", "local"]

GPU_VENDORS: tuple[str, ...] = ("amd", "nvidia", "none")
CONTAINER_RUNTIMES: tuple[str, ...] = ("podman", "docker", "none")

# Linux IFNAMSIZ is 16 bytes including the terminating NUL.
IFNAME_MAX = 15
IFACE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,15}")
# Letters, digits and the few punctuation marks that host names, IPv4 and IPv6 addresses use.
# Everything else (space, ; | & $ ` ' " < > ( ) * ? [ ] { } ~ ! # \ @ …) could mean something to a
# shell or to ssh, and a leading '-' would be read as an option.
_SAFE_NAME = re.compile(r"[A-Za-z0-9._:%-]+")
# A GPU model as vendors name it ("H100", "MI300X", "NVIDIA H100 80GB HBM3"): shown in output and
# reports, compared to tell kinds of node apart, never put on a command line.
_GPU_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._+()/-]{0,63}")


def gpu_model_problem(value: str) -> str | None:
    """Say why `value` is not a GPU model orch accepts, or None if it is fine."""
    if not _GPU_MODEL.fullmatch(value):
        return "is not a GPU model name (letters, digits, space and ._+()/- only, at most 64)"
    return None


def same_gpu_model(model: str | None) -> str:
    """The comparison key of a GPU model: case and runs of spaces do not count ('' when unknown)."""
    return " ".join((model or "").split()).casefold()


def kind_label(vendor: str, model: str | None) -> str:
    """A kind of node in words: 'cpu', 'nvidia H100', 'amd (model unknown)'."""
    if vendor == "none":
        return "cpu"
    return f"{vendor} {model or '(model unknown)'}"


def interface_name_problem(name: str) -> str | None:
    """Say why `name` is refused as a network interface name, or None if it is valid.

    An allow-list, stricter than the kernel's dev_valid_name() (which takes '$', '(' and ')'):
    1 to 15 characters out of letters, digits, '_', '.', '-' (IFACE_NAME), not '.' or '..', not
    starting with '-' (it reaches ip/tc/iptables argv). Raises nothing.
    """
    if not name:
        return "is empty"
    if len(name.encode("utf-8", "surrogatepass")) > IFNAME_MAX:
        return f"is longer than {IFNAME_MAX} bytes"
    if name in (".", ".."):
        return "is '.' or '..'"
    if name.startswith("-"):
        return "starts with '-'"
    if not IFACE_NAME.fullmatch(name):
        bad = next(ch for ch in name if not IFACE_NAME.fullmatch(ch))
        return f"contains {bad!r} (letters, digits, '_', '.', '-' only)"
    return None


def host_name_problem(name: str) -> str | None:
    """Say why `name` is unsafe as a host name or address, or None if it is fine.

    Allowed: ASCII letters, digits, '.', '_', '-', ':' and '%' (IPv6 and its zone), not starting
    with '-'. Anything else could be read by a shell or by ssh. Raises nothing.
    """
    return shell_word_problem(name, _SAFE_NAME)


def shell_word_problem(word: str, allowed: re.Pattern[str]) -> str | None:
    """Say why `word` cannot stand as one word on a command line, or None: it must be non-empty,
    not start with '-' (it would be read as an option) and match `allowed` (a character class
    with '+'), which leaves out what a shell could read as syntax. Raises nothing."""
    if not word:
        return "is empty"
    if word.startswith("-"):
        return "starts with '-' (it would be read as an option)"
    if not allowed.fullmatch(word):
        bad = sorted({ch for ch in word if not allowed.fullmatch(ch)})
        return "contains " + " ".join(repr(ch) for ch in bad) + " (shell metacharacters are refused)"
    return None


def checked(value: str, problem: Callable[[str], str | None], label: str = "") -> str:
    """value, for a model's validator; raises ValueError "LABEL 'value' WHY" where problem (one of
    the *_problem functions) says why it is refused."""
    if (why := problem(value)) is not None:
        raise ValueError(f"{label} {value!r} {why}" if label else f"{value!r} {why}")
    return value


def _check_ifname(value: str) -> str:
    return checked(value, interface_name_problem, "interface name")


class Node(StrictModel):
    """One host of the inventory with the variables orch reads."""

    name: str
    address: str = Field(description="ansible_host, or the inventory name when unset")
    port: int = Field(default=22, ge=1, le=65535)
    user: str | None = None
    connection: Connection = "ssh"
    ssh_private_key_file: Path | None = None
    known_hosts_file: Path | None = Field(
        default=None, description="from -o UserKnownHostsFile=... in ansible_ssh_common/extra_args"
    )
    python_interpreter: str | None = None
    gpu_vendor: GpuVendor = "none"
    gpus_per_node: int = Field(default=1, ge=1, description="on gpu_vendor none: CPU ranks per node")
    gpu_model: str | None = Field(default=None, description="e.g. H100, MI300X: isolation keeps kinds apart")
    rdma_ifaces: list[str] = Field(default_factory=list)
    mgmt_iface: str | None = None
    fabric_address: IPv4Address | IPv6Address | None = Field(
        default=None, description="the address collective traffic uses"
    )
    container_runtime: ContainerRuntime = "none"
    health_kernel_log: str | None = Field(
        default=None, description="orch_health_kernel_log: a file `orch health` reads as the kernel log"
    )
    health_sysfs: str | None = Field(default=None, description="orch_health_sysfs: its sysfs root (/sys)")
    health_tools_dir: str | None = Field(
        default=None, description="orch_health_tools_dir: saved GPU and RDMA tool outputs it reads"
    )
    groups: list[str] = Field(default_factory=list, description="sorted; without 'all'")

    @field_validator("name", "address")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return checked(value, host_name_problem)

    @field_validator("gpu_model")
    @classmethod
    def _gpu_model(cls, value: str | None) -> str | None:
        return None if value is None else checked(value, gpu_model_problem, "gpu_model")

    @field_validator("rdma_ifaces")
    @classmethod
    def _rdma(cls, value: list[str]) -> list[str]:
        for name in value:
            _check_ifname(name)
        return value

    @field_validator("mgmt_iface")
    @classmethod
    def _mgmt(cls, value: str | None) -> str | None:
        return None if value is None else _check_ifname(value)

    @field_validator("groups")
    @classmethod
    def _sorted(cls, value: list[str]) -> list[str]:
        return sorted(value)

    @property
    def is_local(self) -> bool:
        """True when Ansible runs this node's tasks on the controller itself."""
        return self.connection == "local"


class ClusterVars(StrictModel):
    """Cluster-wide settings, set once in [all:vars] (or group_vars/all)."""

    orch_slurm_conf: Path | None = None
    orch_lab_state: Path | None = None
    orch_partition: str | None = None
    orch_stack: str | None = Field(
        default=None, description="the stack (orchestrator/playbooks/stacks/) the nodes hold"
    )
    orch_fabric_gbps: float | None = Field(
        default=None, gt=0, description="line rate of one rank's fabric link, Gbit/s (reports: busbw / it)"
    )
    orch_gpu_hour_cost: float | None = Field(
        default=None,
        gt=0,
        description="price of one GPU for one hour: serving cost per request and per 1M output tokens "
        "(a plan's price_per_node_hour wins)",
    )
    orch_cost: CostModel | None = Field(default=None, description="orch_cost_* variables (docs/inventory.md)")
    orch_node_dir: Path | None = Field(
        default=None,
        description="each node's own folder for run data, <dir>/<run-id>/ (None: /var/tmp/orch)",
    )
    orch_cert_pubkey: Path | None = Field(
        default=None,
        description="the Ed25519 public key (PEM) `orch check --quick` verifies certificates' signatures "
        "with; None: signatures are not checked",
    )
    orch_max_unavailable: int = Field(
        default=1,
        ge=0,
        description="the failure budget: at most this many of the inventory's nodes out of service (drained, "
        "down); `orch health --drain` drains within it, `orch cert readmit` re-tests within it",
    )
    orch_shared_dirs: list[Path] = Field(
        default_factory=list,
        description="folders every node sees at the same path (NFS): a run directory under one is "
        "written by the nodes directly",
    )


class Cluster(StrictModel):
    """Nodes (in inventory order) and groups of one inventory source."""

    source: Path
    nodes: list[Node]
    groups: dict[str, list[str]] = Field(
        default_factory=dict, description="group name -> node names in inventory order; includes 'all'"
    )
    vars: ClusterVars = Field(default_factory=ClusterVars)
    warnings: list[str] = Field(
        default_factory=list, description="what orch assumed while reading the inventory (shown, not fatal)"
    )

    @property
    def names(self) -> list[str]:
        """Node names in inventory order."""
        return [n.name for n in self.nodes]

    def node(self, name: str) -> Node:
        """Return the node called `name`; raises InventoryError when there is none."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise InventoryError(
            f"{self.source}: no host named {name!r}", hint=f"hosts are: {_preview(self.names)}"
        )

    def select(self, names_or_groups: str | Iterable[str]) -> list[Node]:
        """Return the nodes named, or in the groups named, in inventory order and without repeats.

        Accepts one name, a comma-separated string, or an iterable of names; each name is a group
        (checked first, as in Ansible) or a host. Raises InventoryError naming every unknown name.
        """
        items = names_or_groups.split(",") if isinstance(names_or_groups, str) else list(names_or_groups)
        wanted: set[str] = set()
        unknown: list[str] = []
        hosts = set(self.names)
        for raw in items:
            item = raw.strip()
            if not item:
                continue
            if item in self.groups:
                wanted.update(self.groups[item])
            elif item in hosts:
                wanted.add(item)
            else:
                unknown.append(item)
        if unknown:
            raise InventoryError(
                f"{self.source}: no host or group named {', '.join(map(repr, unknown))}",
                hint=f"groups are: {_preview(sorted(self.groups))}",
            )
        return [n for n in self.nodes if n.name in wanted]


def _preview(names: list[str], limit: int = 8) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … ({len(names)} in all)" if len(names) > limit else "")

"""What a lab is made of: node names, addresses, interface names, ports and paths.

Everything here is pure (no I/O) so that rendering can be unit-tested. Names of namespaces and
links carry the ``orch`` prefix so that nothing else on the machine is touched, and addresses come
from 198.18.0.0/15, the range set aside for network benchmarking.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import Field, field_validator

from orchestrator.errors import ConfigError
from orchestrator.lab.masks import MaskPlan, controller_paths, home_path, plan_masks
from orchestrator.models.base import StrictModel, first_error

DEFAULT_STATE_DIR = Path("/var/lib/orch-lab")
DEFAULT_INVENTORY = Path("inventories/lab.ini")
MAX_NODES = 200

NETNS_PREFIX = "orch-"
LINK_PREFIX = "orch-"
MGMT_BRIDGE = "orch-mgmt"
FABRIC_BRIDGE = "orch-fab"
MGMT_IFACE = "mgmt0"
FABRIC_IFACE = "fab0"
MGMT_NET = ipaddress.IPv4Network("198.18.0.0/24")
FABRIC_NET = ipaddress.IPv4Network("198.18.1.0/24")
FIRST_HOST = 11
CLUSTER_NAME = "orchlab"
PARTITION = "lab"
# The stack the lab's inventory names (orch_stack): what `orch provision` installs on its nodes.
LAB_STACK = "cpu-gloo"

_SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


def bridge_address(net: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    """The bridge (root namespace) end of a lab network: the first host address."""
    return net.network_address + 1


def controller_address() -> str:
    """Where the nodes reach the controller's daemons (slurmctld, slurmdbd): the management
    bridge's address, as a cluster's nodes reach its head node over the management network."""
    return str(bridge_address(MGMT_NET))


class Ports(StrictModel):
    """TCP ports private to the lab, away from the Slurm and MariaDB defaults of the system."""

    slurmctld: int = 6917
    slurmd: int = 6918
    slurmdbd: int = 6919
    mariadb: int = 3316


class NodeSpec(StrictModel):
    """One lab node: its Slurm/inventory name, namespace, links and addresses."""

    index: int = Field(ge=1)
    name: str
    netns: str
    mgmt_veth: str
    fabric_veth: str
    mgmt_address: str
    fabric_address: str

    @classmethod
    def build(cls, index: int) -> NodeSpec:
        """The node numbered ``index`` (1-based)."""
        name = f"node{index}"
        return cls(
            index=index,
            name=name,
            netns=f"{NETNS_PREFIX}{name}",
            mgmt_veth=f"{LINK_PREFIX}m{index}",
            fabric_veth=f"{LINK_PREFIX}f{index}",
            mgmt_address=str(MGMT_NET.network_address + FIRST_HOST + index - 1),
            fabric_address=str(FABRIC_NET.network_address + FIRST_HOST + index - 1),
        )


class LabConfig(StrictModel):
    """Everything `orch lab up` needs to know, fixed before anything is created."""

    nodes: int = Field(default=3, ge=1, le=MAX_NODES)
    state_dir: Path = DEFAULT_STATE_DIR
    inventory_out: Path = DEFAULT_INVENTORY
    accounting: bool = True
    hostname: str = "localhost"
    cpus: int = Field(default=2, ge=1)
    ports: Ports = Field(default_factory=Ports)
    masks: MaskPlan = Field(
        default_factory=MaskPlan, description="what each node's mount namespace hides (lab/masks.py)"
    )

    @field_validator("state_dir")
    @classmethod
    def _state_dir_plain(cls, v: Path) -> Path:
        # The path ends up in slurm.conf, sshd_config and an INI inventory: keep it plain.
        if not v.is_absolute() or not _SAFE_PATH.match(str(v)):
            raise ValueError(f"state dir must be an absolute path of [A-Za-z0-9_./+-], got {str(v)!r}")
        return v

    @property
    def node_specs(self) -> list[NodeSpec]:
        """The lab's nodes, node1..nodeN."""
        return [NodeSpec.build(i) for i in range(1, self.nodes + 1)]

    # Paths inside the state dir; one place so that up, down and the templates agree.
    @property
    def run_dir(self) -> Path:
        """Runtime files (sockets, pid files, mount points); removed by `down`."""
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        """Daemon logs; kept after `down` for post-mortems."""
        return self.state_dir / "log"

    @property
    def slurm_conf(self) -> Path:
        """The lab's slurm.conf; pass it to Slurm commands as SLURM_CONF."""
        return self.state_dir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        """munged's socket, named in slurm.conf AuthInfo."""
        return self.run_dir / "munge" / "munge.socket"

    @property
    def mariadb_socket(self) -> Path:
        """MariaDB's socket (in a folder the mysql user can write)."""
        return self.run_dir / "mysql" / "mysqld.sock"

    @property
    def known_hosts(self) -> Path:
        """known_hosts with every node's host key, for ssh and Ansible."""
        return self.state_dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        """The generated client private key (root on every node accepts it)."""
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def state_inventory(self) -> Path:
        """The inventory's copy in the state dir (written whatever --inventory-out says)."""
        return self.state_dir / "lab.ini"

    @property
    def state_file(self) -> Path:
        """The JSON record of what `up` made (LabState)."""
        return self.state_dir / "state.json"

    def node_dir(self, node: NodeSpec) -> Path:
        """Per-node folder: host key, sshd_config, private /opt, home and scratch."""
        return node_dir(self.state_dir, node.name)

    def node_opt(self, node: NodeSpec) -> Path:
        """The node's own /opt (where provisioning installs its stack), mounted over /opt in the node."""
        return node_opt(self.state_dir, node.name)

    def node_home(self, node: NodeSpec) -> Path:
        """The node's own home, mounted over the user's home in the node (masks.py)."""
        return self.node_dir(node) / "home"

    def node_scratch(self, node: NodeSpec) -> Path:
        """The node's own scratch, mounted on masks.NODE_SCRATCH (where it keeps run data)."""
        return self.node_dir(node) / "scratch"


def nodes_root(state_dir: Path) -> Path:
    """The folder that holds every lab node's own folder."""
    return state_dir / "nodes"


def node_dir(state_dir: Path, name: str) -> Path:
    """A lab node's own folder under the state dir (also for callers that only have an inventory)."""
    return nodes_root(state_dir) / name


def node_opt(state_dir: Path, name: str) -> Path:
    """A lab node's own /opt under the state dir."""
    return node_dir(state_dir, name) / "opt"


def make_config(
    *,
    nodes: int,
    state_dir: Path,
    inventory_out: Path,
    accounting: bool,
    hostname: str,
    cpus: int,
    shared: list[Path] | None = None,
    masks: bool = True,
) -> LabConfig:
    """Validate the user's choices into a LabConfig, with the masks of the nodes decided from
    where orch runs now (lab/masks.py; not with ``masks`` false: for status and down, which read
    the running lab's own); ``shared``: folders the nodes see all the same.

    Raises:
        ConfigError: a value is out of range, a path is unusable, a shared folder does not exist,
            or a folder to hide holds the state dir.
    """
    from pydantic import ValidationError

    try:
        cfg = LabConfig(
            nodes=nodes,
            state_dir=state_dir,
            inventory_out=inventory_out,
            accounting=accounting,
            hostname=hostname,
            cpus=cpus,
        )
    except ValidationError as e:
        where, why = first_error(e)
        raise ConfigError(f"lab option {where}: {why}", hint="see `orch lab up --help`") from e
    if not masks:
        return cfg
    shares = []
    for s in shared or []:
        if not s.expanduser().is_dir():
            raise ConfigError(f"--shared {s}: not a folder", hint="give an existing folder to share")
        shares.append(s.expanduser().resolve())
    plan = plan_masks(controller_paths(), home_path(), shares, cfg.state_dir.resolve())
    return cfg.model_copy(update={"masks": plan})

"""Load the user's Ansible inventory through Ansible's own parser and validate it into a Cluster.

Ansible does the parsing (INI, YAML, ranges like ``node[01:16]``, ``[group:children]``,
``group_vars/`` and ``host_vars/`` beside the file), in process, so that a 4,096-node inventory
loads in about a second. orch then reads only its own host variables and the connection variables
it needs; every other variable belongs to the user's Ansible and is ignored. Every problem found
is collected and reported at once, one per line, naming the file, the host and the variable.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import ipaddress
import logging
import math
import re
import shlex
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from orchestrator.errors import InventoryError
from orchestrator.models.cluster import (
    CONTAINER_RUNTIMES,
    GPU_VENDORS,
    Cluster,
    ClusterVars,
    Node,
    gpu_model_problem,
    host_name_problem,
    interface_name_problem,
)
from orchestrator.models.cost import CostModel
from orchestrator.text import plural

log = logging.getLogger(__name__)

# The embedded default: this machine alone, CPU ranks, no Slurm. Package data, so that a wheel
# install has it; inventories/local.ini in the source tree is the same text, for users to copy.
DEFAULT_INVENTORY = Path(__file__).resolve().parent / "inventories" / "local.ini"

# Host variable by which an inventory opts in to options that make ssh or Ansible run commands on
# this machine (ProxyCommand …, templates in interpreter paths): refused without it.
ALLOW_COMMANDS_VAR = "orch_allow_controller_commands"

# ssh options given on ssh's command line by Ansible.
_SSH_ARGS_VARS = (
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_ssh_args",
    "ansible_sftp_extra_args",
    "ansible_scp_extra_args",
)
# Programs Ansible runs (here or on the node) whose paths it templates first, on this machine.
_EXEC_VARS = ("ansible_shell_executable", "ansible_ssh_executable", "ansible_become_exe")
# per node: where `orch health` reads that node's sources (a lab plants findings per node there)
_HEALTH_PATH_VARS = ("orch_health_kernel_log", "orch_health_sysfs", "orch_health_tools_dir")

# The variables orch reads from each host (after Ansible merged group_vars and host_vars).
# Legacy Ansible spellings come second and are used only when the modern one is unset.
_READ = (
    "ansible_host",
    "ansible_ssh_host",
    "ansible_port",
    "ansible_ssh_port",
    "ansible_user",
    "ansible_ssh_user",
    "ansible_connection",
    "ansible_ssh_private_key_file",
    "ansible_private_key_file",
    *_SSH_ARGS_VARS,
    "ansible_python_interpreter",
    *_EXEC_VARS,
    ALLOW_COMMANDS_VAR,
    "gpu_vendor",
    "gpus_per_node",
    "gpu_model",
    "rdma_ifaces",
    "mgmt_iface",
    "fabric_address",
    "container_runtime",
    "orch_slurm_conf",
    "orch_lab_state",
    "orch_partition",
    "orch_stack",
    "orch_fabric_gbps",
    "orch_gpu_hour_cost",
    *(f"orch_cost_{f}" for f in CostModel.model_fields),
    "orch_node_dir",
    "orch_shared_dirs",
    "orch_cert_pubkey",
    *_HEALTH_PATH_VARS,
    "orch_max_unavailable",
)
_CLUSTER_VARS = (
    "orch_slurm_conf", "orch_lab_state", "orch_partition", "orch_stack", "orch_node_dir", "orch_shared_dirs",
    "orch_cert_pubkey",
)  # fmt: skip
# orch_node_dir and orch_shared_dirs become paths on the nodes, in Slurm --output patterns and
# shell lines (quoted): absolute, plain characters only.
_NODE_PATH = re.compile(r"^/[A-Za-z0-9_./+-]*$")
ORCH_VARS = tuple(sorted(v for v in _READ if v.startswith("orch_")))
_INTERPRETER = re.compile(r"ansible_\w+_interpreter")
# ssh options an inventory may set without opting in (orch_allow_controller_commands): an
# allow-list. Everything else ssh understands can run a command or load a library on this machine
# (ProxyCommand, LocalCommand, KnownHostsCommand, PKCS11Provider, SecurityKeyProvider, -I, -F with
# its own config, ProxyJump/-J through another host's config, Include, -E writing any file ...),
# or is a knob orch has not reviewed: refused, naming the option.
SSH_SAFE_OPTIONS = frozenset(
    k.lower()
    for k in (
        "Port", "User", "IdentityFile", "IdentitiesOnly", "ConnectTimeout", "ConnectionAttempts",
        "ServerAliveInterval", "ServerAliveCountMax", "TCPKeepAlive", "StrictHostKeyChecking",
        "UserKnownHostsFile", "GlobalKnownHostsFile", "HashKnownHosts", "CheckHostIP",
        "HostKeyAlgorithms", "HostKeyAlias", "PubkeyAcceptedAlgorithms", "PubkeyAcceptedKeyTypes",
        "PubkeyAuthentication", "PasswordAuthentication", "KbdInteractiveAuthentication",
        "PreferredAuthentications", "GSSAPIAuthentication", "NumberOfPasswordPrompts", "BatchMode",
        "Compression", "Ciphers", "MACs", "KexAlgorithms", "AddressFamily", "LogLevel",
        "ControlMaster", "ControlPersist", "ControlPath", "RequestTTY", "UpdateHostKeys",
    )
)  # fmt: skip
# ssh's single-letter flags (its getopt string): those that take an argument, and the ones allowed.
_SSH_FLAGS_WITH_ARG = frozenset("bceilmopBDEFIJLOQRSwW")
_SSH_SAFE_FLAGS = frozenset("46CqvTnilpcmo")


def ssh_option_problem(args: list[str]) -> str | None:
    """The first ssh option in args (split like a shell would) that is not on the allow-list
    (SSH_SAFE_OPTIONS for ``-o``, _SSH_SAFE_FLAGS for flags), as ssh would read it: ``-o X=…``,
    ``-oX …``, ``-o "X …"`` and flags clustered (``-vo X=…``, ``-CI lib.so``); None when all are
    allowed. A word that is no option (a host name, ``--``) is refused too. Raises nothing."""
    i = 0
    while i < len(args):
        word = args[i]
        if not word.startswith("-") or word == "-" or word.startswith("--"):
            return f"{word[:60]!r} (not an ssh option)"
        j = 1
        while j < len(word):
            flag = word[j]
            if flag not in _SSH_SAFE_FLAGS:
                return f"-{flag}"
            if flag in _SSH_FLAGS_WITH_ARG:
                value = word[j + 1 :]
                if not value:
                    i += 1
                    value = args[i] if i < len(args) else ""
                if flag == "o":
                    key = value.replace("=", " ", 1).split(" ", 1)[0].strip()
                    if key.lower() not in SSH_SAFE_OPTIONS:
                        return key[:60] or "-o without a value"
                break
            j += 1
        i += 1
    return None


# The one template an interpreter path may hold without opting in: Ansible's own Python.
_PLAYBOOK_PYTHON = re.compile(r"\{\{\s*ansible_playbook_python\s*\}\}")
# Kept as written: Ansible resolves interpreter and program templates itself.
_NOT_TEMPLATED = frozenset({"ansible_python_interpreter", *_EXEC_VARS})

_SSH = frozenset(
    {"ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.builtin.paramiko_ssh"}
)
_LOCAL = frozenset({"local", "ansible.builtin.local"})
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UNDEFINED = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined")
_PLUGIN_FAILED = re.compile(r"Failed to parse inventory with '([^']+)' plugin: (.+)")


@dataclass
class RawHost:
    """One host as Ansible saw it: name, groups (without 'all') and the variables orch reads."""

    name: str
    groups: list[str]
    vars: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # values Ansible could not template
    unknown_orch_vars: list[str] = field(default_factory=list)


def load_inventory(path: Path) -> Cluster:
    """Load an INI or YAML inventory (or a directory Ansible accepts) into a validated Cluster.

    Raises InventoryError (exit 2) when the file is missing or empty, when Ansible cannot parse
    it, when it has no hosts, or when any host variable orch reads is invalid; the message lists
    every problem, one per line, with the file, host and variable named.
    """
    source = path.expanduser().absolute()
    _check_source(source)
    hosts, groups = _parse_with_ansible(source)
    if not hosts:
        raise InventoryError(
            f"{source}: the inventory has no hosts",
            hint="add at least one host, e.g. 'localhost ansible_connection=local'",
        )
    return build_cluster(source, hosts, groups)


def build_cluster(source: Path, hosts: list[RawHost], groups: Mapping[str, list[str]]) -> Cluster:
    """Validate hosts already parsed by Ansible into a Cluster (pure: no Ansible, no files).

    Raises InventoryError listing every problem, one per line.
    """
    problems: list[str] = [line for h in hosts for line in unknown_orch_var_problems(h)]
    nodes = [n for h in hosts if (n := build_node(h, problems)) is not None]
    problems += _cross_checks(nodes)
    cluster_vars = _cluster_vars(source, hosts, problems)
    if problems:
        raise InventoryError(
            f"{source}: {plural(len(problems), 'problem')} in the inventory:\n  " + "\n  ".join(problems),
            hint="fix the host variables named above (see docs/inventory.md)",
        )
    return Cluster(
        source=source, nodes=nodes, groups=dict(groups), vars=cluster_vars, warnings=_assumptions(hosts)
    )


def _assumptions(hosts: list[RawHost]) -> list[str]:
    """What orch assumed for hosts that leave a variable unset (today: gpu_vendor means none)."""
    no_vendor = [h.name for h in hosts if h.vars.get("gpu_vendor") is None]
    if not no_vendor:
        return []
    shown = ", ".join(no_vendor[:8]) + (f" and {len(no_vendor) - 8} more" if len(no_vendor) > 8 else "")
    return [
        f"gpu_vendor is not set on {plural(len(no_vendor), 'host')} ({shown}): taken as 'none' (CPU ranks, "
        "no GPUs); set gpu_vendor=amd|nvidia|none"
    ]


def unknown_orch_var_problems(host: RawHost) -> list[str]:
    """A line for each orch_* variable orch does not know: the orch_ namespace is orch's, so a
    name there that orch would not read is a typo (a setting silently ignored), refused with the
    closest known name."""
    lines = []
    for var in host.unknown_orch_vars:
        close = difflib.get_close_matches(var, ORCH_VARS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"orch knows {', '.join(ORCH_VARS)}"
        lines.append(f"host {host.name}: unknown orch variable {var} ({hint})")
    return lines


def build_node(host: RawHost, problems: list[str]) -> Node | None:
    """Turn one host's variables into a Node, appending a line to `problems` for each bad value.

    Returns None when any value was bad. Raises nothing.
    """
    v = host.vars
    before = len(problems)
    problems.extend(f"host {host.name}: {p}" for p in host.problems)

    def bad(var: str, why: str) -> None:
        shown = f"{var}={v[var]!r}" if var in v else var
        problems.append(f"host {host.name}: {shown} {why}")

    if (why := host_name_problem(host.name)) is not None:
        problems.append(f"host {host.name!r}: the host name {why}")

    host_var = _first(v, "ansible_host", "ansible_ssh_host")
    address = host.name
    if host_var is not None:
        if isinstance(v[host_var], str) and (why := host_name_problem(v[host_var])) is None:
            address = v[host_var]
        else:
            bad(host_var, why or "is not a host name or address")

    port = 22
    if (port_var := _first(v, "ansible_port", "ansible_ssh_port")) is not None:
        parsed = _as_int(v[port_var])
        if parsed is None or not 1 <= parsed <= 65535:
            bad(port_var, "is not a port number (1-65535)")
        else:
            port = parsed

    user = _opt_str(v, _first(v, "ansible_user", "ansible_ssh_user"), bad)
    if user is not None and (why := host_name_problem(user)) is not None:
        bad(_first(v, "ansible_user", "ansible_ssh_user") or "ansible_user", f"(user) {why}")

    connection = "ssh"
    if "ansible_connection" in v:
        conn = str(v["ansible_connection"]).strip().lower()
        if conn in _LOCAL:
            connection = "local"
        elif conn not in _SSH:
            bad("ansible_connection", "is not one orch can use (ssh, local)")

    if not _allows_commands(v, bad):
        _controller_commands(v, bad)

    key_var = _first(v, "ansible_ssh_private_key_file", "ansible_private_key_file")
    key_file = _opt_str(v, key_var, bad)
    known_hosts = _known_hosts_file(v, bad)
    python = _opt_str(v, "ansible_python_interpreter", bad)

    vendor = _choice(v, "gpu_vendor", GPU_VENDORS, bad)

    gpus = 1
    if "gpus_per_node" in v:
        parsed = _as_int(v["gpus_per_node"])
        if parsed is None:
            bad("gpus_per_node", "is not a whole number")
        elif parsed < 1:
            bad("gpus_per_node", "is below 1")
        else:
            gpus = parsed

    model = _opt_str(v, "gpu_model", bad)
    if model is not None and (why := gpu_model_problem(model)) is not None:
        bad("gpu_model", why)

    rdma = _iface_list(v, bad)
    mgmt = _opt_str(v, "mgmt_iface", bad, strip=False)
    if mgmt is not None and (why := interface_name_problem(mgmt)) is not None:
        bad("mgmt_iface", f"is not a valid Linux interface name: it {why}")
    elif mgmt is not None and mgmt in rdma:
        bad("mgmt_iface", "is also listed in rdma_ifaces (the management interface is never a fault target)")

    fabric = _opt_str(v, "fabric_address", bad)
    if fabric is not None:
        try:
            ipaddress.ip_address(fabric)
        except ValueError:
            bad("fabric_address", "is not an IP address")

    runtime = _choice(v, "container_runtime", CONTAINER_RUNTIMES, bad)

    health: dict[str, str] = {}
    for var in _HEALTH_PATH_VARS:
        if var in v:
            value = v[var].strip() if isinstance(v[var], str) else ""
            if not _NODE_PATH.match(value) or ".." in Path(value).parts:
                bad(var, "must be an absolute path of [A-Za-z0-9_./+-] without '..'")
            else:
                health[var.removeprefix("orch_")] = value

    if len(problems) > before:
        return None
    return Node.model_validate(
        {
            "name": host.name,
            "address": address,
            "port": port,
            "user": user,
            "connection": connection,
            "ssh_private_key_file": key_file,
            "known_hosts_file": known_hosts,
            "python_interpreter": python,
            "gpu_vendor": vendor,
            "gpus_per_node": gpus,
            "gpu_model": model,
            "rdma_ifaces": rdma,
            "mgmt_iface": mgmt,
            "fabric_address": fabric,
            "container_runtime": runtime,
            "groups": [g for g in host.groups if g != "all"],
            **health,
        }
    )


# --- reading values -------------------------------------------------------------------------------


def _first(v: Mapping[str, Any], *names: str) -> str | None:
    return next((n for n in names if v.get(n) is not None), None)


def _as_int(value: Any) -> int | None:
    """An int from an int or a decimal string; None for bools, floats and anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    return None


def _opt_str(v: Mapping[str, Any], var: str | None, bad: Any, *, strip: bool = True) -> str | None:
    if var is None or v.get(var) is None:
        return None
    value = v[var]
    if isinstance(value, str) and value.strip():
        return value.strip() if strip else value
    bad(var, "must be a non-empty string")
    return None


def _choice(v: Mapping[str, Any], var: str, choices: tuple[str, ...], bad: Any) -> str:
    """var's value lower-cased, which must be one of choices; "none" when var is not set."""
    if var not in v:
        return "none"
    word = str(v[var]).strip().lower()
    if word not in choices:
        bad(var, f"is not one of {', '.join(choices)}")
    return word


def _iface_list(v: Mapping[str, Any], bad: Any) -> list[str]:
    """rdma_ifaces as a YAML list or a comma-separated string, each a valid Linux interface name."""
    raw = v.get("rdma_ifaces")
    if raw is None:
        return []
    if isinstance(raw, str):
        names = [p.strip() for p in raw.split(",")] if raw.strip() else []
    elif isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        names = list(raw)  # as written: only the comma-separated form is trimmed
    else:
        bad("rdma_ifaces", "must be a list of interface names or a comma-separated string")
        return []
    for name in names:
        if (why := interface_name_problem(name)) is not None:
            bad("rdma_ifaces", f"has {name!r}, not a valid Linux interface name: it {why}")
    seen = [n for i, n in enumerate(names) if n in names[:i]]
    if seen:
        bad("rdma_ifaces", f"lists {seen[0]!r} twice")
    return names


def _known_hosts_file(v: Mapping[str, Any], bad: Any) -> str | None:
    """The file of `-o UserKnownHostsFile=...` in the ssh args (extra args win, as in ssh)."""
    found: str | None = None
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        raw = v.get(var)
        if raw is None:
            continue
        try:
            args = shlex.split(str(raw))
        except ValueError as e:
            bad(var, f"cannot be split like a shell would: {e}")
            continue
        options = [a[2:] for a in args if a.startswith("-o") and len(a) > 2]
        options += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-o"]
        for opt in options:
            key, sep, value = opt.replace("=", " ", 1).partition(" ")
            if key.strip().lower() == "userknownhostsfile" and sep and value.strip():
                found = value.split()[0]
    return found


def _allows_commands(v: Mapping[str, Any], bad: Any) -> bool:
    """The host's orch_allow_controller_commands: true, false (the default), else a problem."""
    raw = v.get(ALLOW_COMMANDS_VAR)
    if raw is None or raw is False:
        return False
    if raw is True:
        return True
    word = str(raw).strip().lower()
    if word in ("true", "yes", "1"):
        return True
    if word not in ("false", "no", "0"):
        bad(ALLOW_COMMANDS_VAR, "is not true or false")
    return False


def _controller_commands(v: Mapping[str, Any], bad: Any) -> None:
    """Refuse what would make ssh or Ansible run a command on this machine during a playbook.

    any ssh option not on the allow-list (ssh_option_problem) in any ssh arguments variable;
    any template left in them after orch's own rendering (a lookup: orch
    never runs one, Ansible would); any template in an interpreter or program path but
    `{{ ansible_playbook_python }}` (Ansible templates it on this machine before running it).
    """
    hint = (
        f"(may run a command or load a library on this machine when ssh connects; "
        f"set {ALLOW_COMMANDS_VAR}=true to allow)"
    )
    for var in _SSH_ARGS_VARS:
        raw = v.get(var)
        if raw is None:
            continue
        text = str(raw)
        if "{{" in text or "{%" in text:
            bad(var, f"has a template orch cannot resolve without running it {hint}")
            continue
        try:
            why = ssh_option_problem(shlex.split(text))
        except ValueError as e:
            bad(var, f"cannot be split like a shell would: {e}")
            continue
        if why is not None:
            bad(var, f"has the ssh option {why}, which is not on orch's list of safe ssh options {hint}")
    for var in sorted(k for k in v if k in _EXEC_VARS or _INTERPRETER.fullmatch(k)):
        text = str(v[var])
        if "{{" in _PLAYBOOK_PYTHON.sub("", text) or "{%" in text:
            bad(var, f"has a template in a program path {hint}")
        elif var == "ansible_ssh_executable" and text.strip() not in ("ssh", shutil.which("ssh")):
            # Ansible runs this program here, on the controller, for every connection.
            bad(var, f"names a program other than ssh, run on this machine {hint}")


# --- checks across hosts --------------------------------------------------------------------------


def _cross_checks(nodes: list[Node]) -> list[str]:
    problems: list[str] = []
    by_address: dict[tuple[str, int], list[str]] = {}
    by_fabric: dict[str, list[str]] = {}
    for n in nodes:
        by_address.setdefault((n.address, n.port), []).append(n.name)
        if n.fabric_address is not None:
            by_fabric.setdefault(str(n.fabric_address), []).append(n.name)
    for (address, port), names in by_address.items():
        if len(names) > 1:
            problems.append(
                f"hosts {', '.join(names)}: the same address {address} port {port}"
                " (ansible_host, ansible_port)"
            )
    for address, names in by_fabric.items():
        if len(names) > 1:
            problems.append(f"hosts {', '.join(names)}: the same fabric_address {address}")
    return problems


def _cluster_vars(source: Path, hosts: list[RawHost], problems: list[str]) -> ClusterVars:
    """orch_* cluster settings: the same on every host that has them, else a problem."""
    base = source if source.is_dir() else source.parent
    values: dict[str, Any] = {}
    for var in _CLUSTER_VARS:
        seen: dict[str, str] = {}  # value -> first host
        for h in hosts:
            value = h.vars.get(var)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                problems.append(f"host {h.name}: {var}={value!r} must be a non-empty string")
                continue
            seen.setdefault(value.strip(), h.name)
        if len(seen) > 1:
            pairs = ", ".join(f"{host} has {value!r}" for value, host in seen.items())
            problems.append(f"{var} differs between hosts ({pairs}); set it once in [all:vars]")
        elif seen:
            values[var] = next(iter(seen))
    for var in ("orch_partition", "orch_stack"):
        if (word := values.get(var)) is not None and (why := host_name_problem(word)):
            problems.append(f"{var}={word!r} {why}")
            values.pop(var)
    for var in ("orch_slurm_conf", "orch_lab_state", "orch_cert_pubkey"):
        if var in values:
            p = Path(values[var]).expanduser()
            values[var] = p if p.is_absolute() else base / p
    if "orch_node_dir" in values:
        values["orch_node_dir"] = _node_path("orch_node_dir", values["orch_node_dir"], problems)
    if "orch_shared_dirs" in values:
        paths = [p.strip() for p in values.pop("orch_shared_dirs").split(",") if p.strip()]
        values["orch_shared_dirs"] = [
            q for p in paths if (q := _node_path("orch_shared_dirs", p, problems)) is not None
        ]
    if (cap := _max_unavailable(hosts, problems)) is not None:
        values["orch_max_unavailable"] = cap
    if (gbps := _positive(hosts, "orch_fabric_gbps", "Gbit/s", problems)) is not None:
        values["orch_fabric_gbps"] = gbps
    if (
        cost := _positive(hosts, "orch_gpu_hour_cost", "price of one GPU for one hour", problems)
    ) is not None:
        values["orch_gpu_hour_cost"] = cost
    if (model := _cost_model(hosts, problems)) is not None:
        values["orch_cost"] = model
    return ClusterVars.model_validate(values)


def _cost_model(hosts: list[RawHost], problems: list[str]) -> CostModel | None:
    """The orch_cost_<field> variables as one CostModel (models/cost.py), each a number >= 0, the
    same on every host; None when none is set or they do not make a model (a problem then)."""
    given = {
        f: v
        for f in CostModel.model_fields
        if (v := _positive(hosts, f"orch_cost_{f}", "0 or more", problems, zero=True)) is not None
    }
    if not given:
        return None
    try:
        return CostModel.model_validate(given)
    except ValidationError as e:
        problems.append(f"orch_cost_*: {'; '.join(str(x['msg']) for x in e.errors())}")
        return None


def _node_path(var: str, value: str, problems: list[str]) -> Path | None:
    """An absolute path of plain characters without '..', else a problem and None."""
    if not _NODE_PATH.match(value) or ".." in Path(value).parts:
        problems.append(f"{var}={value!r} must be an absolute path of [A-Za-z0-9_./+-] without '..'")
        return None
    return Path(value)


def _number(value: Any, *, zero: bool = False) -> float | None:
    """A finite number > 0 (>= 0 with zero), not a bool, else None."""
    if isinstance(value, bool):
        return None
    try:
        n = float(value)
    except (TypeError, ValueError):
        return None
    return abs(n) if math.isfinite(n) and (n > 0 or (zero and n == 0)) else None  # -0 reads as 0


def _whole_number(value: Any) -> int | None:
    """A whole number >= 0, else None."""
    n = _as_int(value)
    return n if n is not None and n >= 0 else None


def _positive(
    hosts: list[RawHost], var: str, unit: str, problems: list[str], *, zero: bool = False
) -> float | None:
    """var (orch_fabric_gbps, orch_gpu_hour_cost, orch_cost_*): a positive number (or 0 with
    zero), the same on every host that has it."""
    what = f"a number ({unit})" if zero else f"a positive number ({unit})"
    return _same_number(hosts, var, lambda v: _number(v, zero=zero), what, problems)


def _max_unavailable(hosts: list[RawHost], problems: list[str]) -> int | None:
    """orch_max_unavailable: a whole number >= 0, the same on every host that has it."""
    return _same_number(hosts, "orch_max_unavailable", _whole_number, "a whole number >= 0", problems)


_N = TypeVar("_N", int, float)


def _same_number(
    hosts: list[RawHost], var: str, parse: Callable[[Any], _N | None], what: str, problems: list[str]
) -> _N | None:
    """var's value on the hosts that set it, read by parse: a problem for each value parse refuses,
    and one when hosts differ (a cluster-wide setting)."""
    seen: dict[_N, str] = {}
    for h in hosts:
        if (value := h.vars.get(var)) is None:
            continue
        if (n := parse(value)) is None:
            problems.append(f"host {h.name}: {var}={value!r} must be {what}")
            continue
        seen.setdefault(n, h.name)
    if len(seen) > 1:
        pairs = ", ".join(f"{host} has {v:g}" for v, host in seen.items())
        problems.append(f"{var} differs between hosts ({pairs}); set it once in [all:vars]")
        return None
    return next(iter(seen), None)


# --- Ansible ---------------------------------------------------------------------------------------


def _check_source(source: Path) -> None:
    if not source.exists():
        raise InventoryError(
            f"{source}: inventory file not found", hint="give an existing file with --inventory"
        )
    if source.is_file():
        try:
            text = source.read_bytes()
        except OSError as e:
            raise InventoryError(f"{source}: cannot read the inventory: {e.strerror}") from e
        if not text.strip():
            raise InventoryError(f"{source}: the inventory file is empty", hint="add at least one host")


@contextlib.contextmanager
def _quiet() -> Iterator[io.StringIO]:
    """Catch what Ansible's Display writes, so that none of it reaches the user's terminal."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield buf


def _parse_with_ansible(source: Path) -> tuple[list[RawHost], dict[str, list[str]]]:
    """Parse `source` with Ansible's InventoryManager; merged vars come from VariableManager."""
    # Imported here, not at module level, to keep `orch --help` fast. Not under _quiet(): on
    # import Ansible's Display wraps the real sys.stdout/sys.stderr for fork safety.
    try:
        import ansible.constants as C
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar
        from ansible.vars.manager import VariableManager
    except ImportError as e:  # pragma: no cover - ansible-core is a dependency
        raise InventoryError(f"cannot import Ansible: {e}", hint="install ansible-core") from e
    with _quiet() as noise:
        # Without these Ansible only warns and carries on with no hosts.
        C.INVENTORY_UNPARSED_IS_FAILED = True
        C.INVENTORY_ANY_UNPARSED_IS_FAILED = True
        try:
            loader = DataLoader()
            inventory = InventoryManager(loader=loader, sources=[str(source)])
            manager = VariableManager(loader=loader, inventory=inventory)
            hosts: list[RawHost] = []
            # One Templar for the whole inventory, made at the first host with a template: each
            # templated host gets its own variables through the public `available_variables`
            # setter (what Templar(variables=...) does), and a template shared by many hosts
            # (group_vars) is compiled once, not once per host.
            templar = None
            for h in inventory.hosts.values():
                merged = manager.get_vars(host=h, include_hostvars=False)
                raw = {k: merged[k] for k in merged if k in _READ or _INTERPRETER.fullmatch(str(k))}
                host_templar = None
                if any(_templated(k, v) for k, v in raw.items()):
                    if templar is None:
                        templar = Templar(loader=loader)
                        _refuse_lookups(templar)
                        _compile_once(templar)
                    templar.available_variables = merged
                    host_templar = templar
                picked: dict[str, Any] = {}
                failed: list[str] = []
                for k, v in raw.items():
                    value, why = _render(host_templar, k, v)
                    if why is None:
                        picked[k] = _plain(value)
                    else:
                        failed.append(why)
                groups = sorted({g.name for g in h.get_groups()})
                unknown = sorted(k for k in merged if k.startswith("orch_") and k not in ORCH_VARS)
                hosts.append(
                    RawHost(
                        name=str(h.name),
                        groups=groups,
                        vars=picked,
                        problems=failed,
                        unknown_orch_vars=unknown,
                    )
                )
            group_map = {
                str(name): [str(h.name) for h in g.get_hosts()]
                for name, g in inventory.groups.items()
                if g.get_hosts()
            }
        except AnsibleError as e:
            raise InventoryError(
                f"{source}: Ansible cannot read the inventory: {_first_line(str(e))}"
                + _reasons(noise.getvalue()),
                hint="check it with: ansible-inventory -i FILE --list",
            ) from e
    if leftover := noise.getvalue().strip():
        log.debug("ansible said while loading %s:\n%s", source, _ANSI.sub("", leftover))
    # Keep inventory order for each group's members.
    order = {h.name: i for i, h in enumerate(hosts)}
    for members in group_map.values():
        members.sort(key=lambda n: order.get(n, len(order)))
    return hosts, group_map


def _refuse_lookup(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("lookups are not run while orch reads an inventory")


def _refuse_lookups(templar: Any) -> None:
    """Make lookup()/query()/q() fail in this templar: reading an inventory must run nothing.

    `{{ lookup('pipe', ...) }}` in a host variable would otherwise run a command on this machine
    each time orch merely loads the inventory (`orch inventory show`, `orch plan show`). Where the
    value is templated here, the host is then refused, naming the variable and the refused lookup;
    ssh arguments and program paths, which Ansible templates itself, are kept as written and
    refused in _controller_commands. Plain expressions (`{{ inventory_hostname }}.mgmt`) still
    render. The environment belongs to this templar alone (one per inventory load, not shared).
    """
    env = getattr(getattr(templar, "_engine", None), "environment", None)
    if env is None or not hasattr(env, "globals"):
        raise InventoryError("this ansible-core has no template environment orch can restrict")
    for name in ("lookup", "query", "q"):
        env.globals[name] = _refuse_lookup


def _compile_once(templar: Any) -> None:
    """Compile each distinct template source once per inventory load instead of once per host.

    ansible-core 2.19 compiles the string again on every Templar.template() call (jinja2's
    from_string has no cache), and that compile was over half of loading 4,096 hosts that share a
    group_vars template. This wraps `_compile_template` (private to ansible-core 2.19's
    TemplateEngine) on this templar's engine alone with a dict keyed by (source text, options):
    the compiled template depends on nothing else but the engine's environment, which is this
    templar's own for the whole load (lookups refused in its globals, which compiled templates
    read at render time). Variables are not compiled in: each render gets the host's variables.
    Only compiled templates are kept; a compile error is not (its message names the value's
    origin). Where the engine has no such method, or its signature differs, nothing is wrapped:
    every value is compiled as before (slower, same result).
    """
    import inspect

    from jinja2 import Template

    engine: Any = getattr(templar, "_engine", None)
    compile_template: Any = getattr(engine, "_compile_template", None)
    try:
        params = list(inspect.signature(compile_template).parameters) if callable(compile_template) else []
    except (TypeError, ValueError):
        params = []
    if params != ["template", "options"]:
        log.debug("ansible-core's TemplateEngine has no _compile_template(template, options): no cache")
        return
    compiled: dict[tuple[str, Any], Any] = {}

    def cached(template: str, options: Any) -> Any:
        try:
            key = (str(template), options)  # str(): the text, without Ansible's tags
            hit = compiled.get(key)
        except TypeError:  # options not hashable: compile as Ansible does
            return compile_template(template, options)
        if hit is None:
            hit = compile_template(template, options)
            if isinstance(hit, Template):
                compiled[key] = hit
        return hit

    engine._compile_template = cached


def _templated(name: str, value: Any) -> bool:
    return (
        name not in _NOT_TEMPLATED
        and not _INTERPRETER.fullmatch(name)
        and isinstance(value, str)
        and ("{{" in value or "{%" in value)
    )


def _render(templar: Any, name: str, value: Any) -> tuple[Any, str | None]:
    """The value templated for its host, or (value, why) when Ansible cannot template it.

    The problem names the variable, the value as written, the file and line it came from (when
    Ansible knows) and, for an undefined variable, that variable: it is not a bad value of ours.
    """
    if templar is None or not _templated(name, value):
        return value, None
    try:
        return templar.template(value), None
    except Exception as e:  # Ansible raises many kinds here (undefined, syntax, refused lookup)
        text = _first_line(str(getattr(e, "message", None) or e))
        where = _origin(value)
        undefined = _UNDEFINED.search(text)
        if undefined:
            why = f"uses the undefined variable {undefined.group(1)!r}"
        else:
            why = f"cannot be templated: {text}"
        return value, f"{name}={str(value)!r}{f' ({where})' if where else ''} {why}"


def _origin(value: Any) -> str | None:
    """'file:line' where Ansible read value, when this ansible-core tags values with it."""
    try:
        from ansible._internal._datatag._tags import Origin  # private to ansible-core 2.19

        tag = Origin.get_tag(value)
    except Exception:  # another ansible-core: the inventory file is named in the header anyway
        return None
    if tag is None or not getattr(tag, "path", None):
        return None
    line = getattr(tag, "line_num", None)
    return f"{tag.path}:{line}" if line else str(tag.path)


def _plain(value: Any) -> Any:
    """Ansible's tagged str/int/list/dict as plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(x) for x in value]
    if isinstance(value, dict):
        return {str(k): _plain(x) for k, x in value.items()}
    return value


def _first_line(text: str) -> str:
    return _ANSI.sub("", text).strip().splitlines()[0] if text.strip() else "unknown error"


def _reasons(noise: str) -> str:
    """The parse failures Ansible printed as warnings: which plugin said what, and where."""
    found: list[str] = []
    for raw in noise.splitlines():
        line = _ANSI.sub("", raw).strip()
        if m := _PLUGIN_FAILED.search(line):
            found.append(f"{m.group(1)} plugin: {m.group(2)}")
        elif line.startswith("Origin:") and re.search(r":\d+", line):
            found.append(line.replace("Origin:", "at", 1))
    unique = list(dict.fromkeys(found))
    return "".join(f"\n  {ln}" for ln in unique[:6])

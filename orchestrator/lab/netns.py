"""Network namespaces, bridges and veths of the lab; every name carries the ``orch`` prefix."""

from __future__ import annotations

import json

from orchestrator.lab import shell
from orchestrator.lab.config import (
    FABRIC_BRIDGE,
    FABRIC_IFACE,
    FABRIC_NET,
    LINK_PREFIX,
    MGMT_BRIDGE,
    MGMT_IFACE,
    MGMT_NET,
    NETNS_PREFIX,
    NodeSpec,
    bridge_address,
)

NETNS_DIR = "/run/netns"


def netns_path(netns: str) -> str:
    """The bind-mounted namespace file that nsenter takes."""
    return f"{NETNS_DIR}/{netns}"


def _ip(*args: str, check: bool = True) -> str:
    return shell.run(["ip", *args], timeout=15, check=check).stdout


def create_bridges() -> None:
    """Create the management and fabric bridges with their .1 addresses (root namespace)."""
    for bridge, net in ((MGMT_BRIDGE, MGMT_NET), (FABRIC_BRIDGE, FABRIC_NET)):
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{bridge_address(net)}/{net.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")


def create_node(node: NodeSpec) -> None:
    """Create the node's namespace, its two veth pairs on the bridges, and its addresses."""
    ns = node.netns
    _ip("netns", "add", ns)
    _ip("-n", ns, "link", "set", "lo", "up")
    for veth, iface, bridge, address, net in (
        (node.mgmt_veth, MGMT_IFACE, MGMT_BRIDGE, node.mgmt_address, MGMT_NET),
        (node.fabric_veth, FABRIC_IFACE, FABRIC_BRIDGE, node.fabric_address, FABRIC_NET),
    ):
        _ip("link", "add", veth, "type", "veth", "peer", "name", iface, "netns", ns)
        _ip("link", "set", veth, "master", bridge)
        _ip("link", "set", veth, "up")
        _ip("-n", ns, "addr", "add", f"{address}/{net.prefixlen}", "dev", iface)
        _ip("-n", ns, "link", "set", iface, "up")


def _lab_names(listing: tuple[str, ...], key: str, prefix: str) -> list[str]:
    """The `key` of each object `ip -j <listing>` prints that starts with the lab's prefix."""
    out = _ip("-j", *listing, check=False).strip()
    if not out:
        return []
    return [str(e[key]) for e in json.loads(out) if str(e.get(key, "")).startswith(prefix)]


def lab_namespaces() -> list[str]:
    """Namespaces of the lab that exist now (named with the lab prefix)."""
    return _lab_names(("netns", "list"), "name", NETNS_PREFIX)


def lab_links() -> list[str]:
    """Links of the lab in the root namespace (bridges and host-side veths) that exist now."""
    return _lab_names(("link", "show"), "ifname", LINK_PREFIX)


def namespace_pids(netns: str) -> list[int]:
    """PIDs of processes running inside ``netns``."""
    out = _ip("netns", "pids", netns, check=False).split()
    return [int(p) for p in out if p.isdigit()]


def delete_namespace(netns: str) -> None:
    """Remove a namespace (its veth ends go with it); absent is fine."""
    _ip("netns", "del", netns, check=False)


def delete_link(name: str) -> None:
    """Remove a link of the root namespace; absent is fine."""
    _ip("link", "del", name, check=False)

"""Render the lab's configuration files from Jinja2 templates (pure: strings in, strings out)."""

from __future__ import annotations

from functools import cache

import jinja2

from orchestrator.lab.config import (
    CLUSTER_NAME,
    FABRIC_IFACE,
    LAB_STACK,
    MGMT_IFACE,
    PARTITION,
    LabConfig,
    NodeSpec,
    controller_address,
)
from orchestrator.lab.masks import NODE_SCRATCH

DB_NAME = "orch_slurm_acct"
DB_USER = "orchslurm"


@cache
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("orchestrator.lab", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # noqa: S701 - config files, not HTML
    )


def _render(name: str, **values: object) -> str:
    return _env().get_template(name).render(**values)


def slurm_conf(cfg: LabConfig) -> str:
    """slurm.conf: controller on the management bridge address, one partition with all nodes."""
    return _render(
        "slurm.conf.j2",
        cfg=cfg,
        nodes=cfg.node_specs,
        cluster_name=CLUSTER_NAME,
        partition=PARTITION,
        ctl_address=controller_address(),
    )


def slurmdbd_conf(cfg: LabConfig, db_password: str) -> str:
    """slurmdbd.conf: slurmdbd on the management bridge (sacct works from the nodes, as on a
    cluster), MariaDB on loopback at the lab's own port (only slurmdbd talks to it)."""
    return _render(
        "slurmdbd.conf.j2",
        cfg=cfg,
        dbd_address=controller_address(),
        db_user=DB_USER,
        db_password=db_password,
        db_name=DB_NAME,
    )


def cgroup_conf() -> str:
    """cgroup.conf: nothing constrained (the lab tracks processes with linuxproc)."""
    return _render("cgroup.conf.j2")


def sshd_config(cfg: LabConfig, node: NodeSpec) -> str:
    """sshd_config of one node: listens on its management address only, keys only."""
    return _render(
        "sshd_config.j2",
        node=node,
        host_key=cfg.node_dir(node) / "ssh_host_ed25519_key",
        authorized_keys=cfg.state_dir / "ssh" / "authorized_keys",
    )


def inventory(cfg: LabConfig) -> str:
    """The Ansible INI inventory of the lab, with orch's host variables."""
    return _render(
        "lab.ini.j2", cfg=cfg, nodes=cfg.node_specs, mgmt_iface=MGMT_IFACE, fabric_iface=FABRIC_IFACE,
        node_dir=NODE_SCRATCH, stack=LAB_STACK,
    )  # fmt: skip


def known_hosts(nodes: list[NodeSpec], host_keys: dict[str, str]) -> str:
    """known_hosts lines ``name,address type key`` from each node's public host key."""
    lines = []
    for node in nodes:
        key_type, key = host_keys[node.name].split()[:2]
        lines.append(f"{node.name},{node.mgmt_address} {key_type} {key}")
    return "\n".join(lines) + "\n"

"""Prove a fresh lab works end to end before `up` calls it up.

Daemons that run are not yet a lab that works: sshd refuses every login when StrictModes dislikes
the folders above authorized_keys, and munged or slurmd can be alive but unusable. So every node
is reached with orch's own SSH connection (the one faults and fingerprints use), asked for a
munge credential round trip and for slurmctld's answer through the management network, and one
Slurm step runs a task on every node. Each failure names the node and what failed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from orchestrator.errors import LabError, RemoteError
from orchestrator.lab import shell
from orchestrator.lab.config import LabConfig, NodeSpec
from orchestrator.models.cluster import Node
from orchestrator.remote.ssh import SshShell

SSH_TIMEOUT_S = 10.0
SRUN_TIMEOUT_S = 30.0


def lab_node(cfg: LabConfig, node: NodeSpec) -> Node:
    """The lab node as an inventory node (what the written inventory says about it)."""
    return Node(
        name=node.name,
        address=node.mgmt_address,
        user="root",
        ssh_private_key_file=cfg.client_key,
        known_hosts_file=cfg.known_hosts,
    )


def _check(sh: SshShell, what: str, script: str) -> str | None:
    res = sh.run_script(script, timeout=SSH_TIMEOUT_S)
    if res.rc == 0:
        return None
    detail = (res.stderr or res.stdout).strip().splitlines()
    return f"{what} failed (exit {res.rc}): {detail[-1] if detail else 'no output'}"


def prove_node(cfg: LabConfig, node: NodeSpec) -> str | None:
    """What fails on ``node`` (SSH login, munge, Slurm from the node), or None when all work."""
    sh = SshShell(lab_node(cfg, node), connect_timeout=SSH_TIMEOUT_S)
    try:
        try:
            sh.connect()
        except RemoteError as e:
            return f"SSH login failed: {e.message.removeprefix(node.name + ': ')}"
        sock = shlex.quote(str(cfg.munge_socket))
        conf = shlex.quote(str(cfg.slurm_conf))
        try:
            return _check(
                sh, "munge credential round trip", f"munge -n -S {sock} | unmunge -S {sock} >/dev/null"
            ) or _check(sh, "Slurm from the node (scontrol ping)", f"SLURM_CONF={conf} scontrol ping")
        except RemoteError as e:
            return f"SSH command failed: {e.message.removeprefix(node.name + ': ')}"
    finally:
        sh.close()


def _prove_srun(cfg: LabConfig, env: Mapping[str, str]) -> None:
    names = [n.name for n in cfg.node_specs]
    argv = [
        "srun", f"--nodes={len(names)}", "--ntasks-per-node=1", f"--nodelist={','.join(names)}",
        "--time=1", "--job-name=orch-lab-proof", "printenv", "SLURMD_NODENAME",
    ]  # fmt: skip
    proc = shell.run(argv, env=env, check=False, timeout=SRUN_TIMEOUT_S)
    seen = set(proc.stdout.split())
    missing = [n for n in names if n not in seen]
    if proc.returncode != 0 or missing:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        where = ", ".join(missing) or "every node"
        raise LabError(
            f"lab not usable: a Slurm step across all nodes did not run on {where}"
            f" (srun exit {proc.returncode}: {detail[-1] if detail else 'no output'})",
            hint=f"see {cfg.log_dir}/slurmctld.log and slurmd-*.log",
        )


def prove(cfg: LabConfig, env: Mapping[str, str]) -> None:
    """Check SSH, munge and Slurm on every node; raise at the first node that fails.

    Raises:
        LabError: names the node and what failed (SSH login, munge, Slurm), with the log to read.
    """
    specs = cfg.node_specs
    with ThreadPoolExecutor(max_workers=min(len(specs), 8)) as pool:
        problems = list(pool.map(lambda n: prove_node(cfg, n), specs))
    for node, problem in zip(specs, problems, strict=True):
        if problem is not None:
            raise LabError(
                f"lab not usable: {node.name}: {problem}",
                hint=f"see {cfg.log_dir}/sshd-{node.name}.stderr.log and {cfg.state_dir}/munge/munged.log",
            )
    _prove_srun(cfg, env)

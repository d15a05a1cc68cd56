"""The lab's three services: up, status, down. The CLI calls these; progress goes to a listener."""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import Field

from orchestrator.errors import LabError
from orchestrator.lab import accounting, daemons, disk, files, masks, netns, preflight, prove, shell
from orchestrator.lab.config import FABRIC_BRIDGE, LAB_STACK, MGMT_BRIDGE, LabConfig
from orchestrator.lab.masks import MaskPlan
from orchestrator.lab.state import DaemonRecord, LabState, load_state, save_state
from orchestrator.models.base import StrictModel
from orchestrator.remote.proctree import stop_processes
from orchestrator.stacks import load_stack

Progress = Callable[[str], None]
IDLE_TIMEOUT_S = 90.0


def _quiet(_: str) -> None:
    return None


class NodeStatus(StrictModel):
    """One node as seen now."""

    name: str
    netns: str
    mgmt_address: str
    fabric_address: str
    netns_present: bool
    slurm_state: str | None = None
    opt_bytes: int | None = Field(default=None, description="what the node's own /opt holds on disk")


class DaemonStatus(StrictModel):
    """One recorded daemon as seen now."""

    name: str
    pid: int
    node: str | None
    alive: bool


class LabStatus(StrictModel):
    """What `orch lab status` shows (and `up` returns)."""

    state_dir: str
    running: bool
    healthy: bool
    accounting: bool | None = None
    slurm_conf: str | None = None
    inventory: str | None = None
    nodes: list[NodeStatus] = []
    daemons: list[DaemonStatus] = []
    leftovers: list[str] = []
    opt_left: dict[str, int] = Field(
        default_factory=dict, description="no lab recorded here: what each node folder's /opt still holds"
    )
    elsewhere: str | None = None
    masks: MaskPlan | None = Field(default=None, description="what the nodes do not see, and what they share")


class UpResult(StrictModel):
    """The outcome of `up`: whether it started a lab or found one running, and how long it took."""

    already_running: bool
    seconds: float
    status: LabStatus


class DownResult(StrictModel):
    """What `down` removed."""

    stopped_pids: list[int]
    namespaces: list[str]
    links: list[str]
    seconds: float
    purged: dict[str, int] = Field(default_factory=dict, description="node -> bytes of its /opt removed")


def slurm_env(cfg: LabConfig) -> dict[str, str]:
    """Environment for Slurm commands against this lab (SLURM_CONF set, plain PATH)."""
    return daemons.daemon_env(cfg.slurm_conf)


def _load(cfg: LabConfig) -> LabState | None:
    try:
        return load_state(cfg.state_file)
    except LabError:
        return None


def _healthy(state: LabState) -> bool:
    if not state.complete or not state.daemons:
        return False
    present = set(netns.lab_namespaces())
    return all(d.alive() for d in state.daemons) and all(n.netns in present for n in state.config.node_specs)


def _sinfo(cfg: LabConfig) -> dict[str, str]:
    proc = shell.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=slurm_env(cfg), check=False, timeout=10)
    states: dict[str, str] = {}
    if proc.returncode == 0:
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
    return states


def status(cfg: LabConfig) -> LabStatus:
    """Describe the lab recorded in ``cfg.state_dir``: nodes, daemons alive or dead, Slurm node states."""
    state = _load(cfg)
    present = set(netns.lab_namespaces())
    if state is None:
        opt_left = disk.opt_sizes(cfg.state_dir, disk.node_names(cfg.state_dir))
        other = _running_elsewhere(cfg)
        if other is not None:
            return LabStatus(state_dir=str(cfg.state_dir), running=False, healthy=False, elsewhere=str(other),
                             opt_left=opt_left)  # fmt: skip
        leftovers = sorted(present) + netns.lab_links()
        return LabStatus(state_dir=str(cfg.state_dir), running=False, healthy=False, leftovers=leftovers,
                         opt_left=opt_left)  # fmt: skip
    scfg = state.config
    ctl = state.daemon("slurmctld")
    slurm = _sinfo(scfg) if ctl is not None and ctl.alive() else {}
    alive = [d.alive() for d in state.daemons]
    opt = disk.opt_sizes(scfg.state_dir, [n.name for n in scfg.node_specs])
    return LabStatus(
        state_dir=str(scfg.state_dir),
        running=any(alive),
        healthy=_healthy(state) and all(slurm.get(n.name, "").rstrip("*") != "" for n in scfg.node_specs),
        accounting=scfg.accounting,
        slurm_conf=str(scfg.slurm_conf),
        inventory=str(scfg.inventory_out),
        masks=scfg.masks,
        nodes=[
            NodeStatus(
                name=n.name,
                netns=n.netns,
                mgmt_address=n.mgmt_address,
                fabric_address=n.fabric_address,
                netns_present=n.netns in present,
                slurm_state=slurm.get(n.name),
                opt_bytes=opt[n.name],
            )
            for n in scfg.node_specs
        ],
        daemons=[
            DaemonStatus(name=d.name, pid=d.pid, node=d.node, alive=a)
            for d, a in zip(state.daemons, alive, strict=True)
        ],
    )


def _running_elsewhere(cfg: LabConfig) -> Path | None:
    """The state dir of a lab whose daemons run now from another state dir than ``cfg``'s."""
    mine = cfg.state_dir.resolve()
    others = [d for d in daemons.running_state_dirs() if d.resolve() != mine]
    return others[0] if others else None


def _refuse_if_elsewhere(cfg: LabConfig, action: str) -> None:
    other = _running_elsewhere(cfg)
    if other is not None:
        raise LabError(
            f"a lab runs from state dir {other}, not {cfg.state_dir}; {action} would destroy it",
            hint=f"pass --state-dir {other} (one lab per machine)",
        )


def _has_remains(cfg: LabConfig) -> bool:
    return bool(
        cfg.state_file.exists()
        or netns.lab_namespaces()
        or netns.lab_links()
        or daemons.stray_processes(cfg.state_dir)
    )


def up(cfg: LabConfig, progress: Progress = _quiet, *, keep_on_failure: bool = False) -> UpResult:
    """Bring the lab up and wait until every node is idle in Slurm; a healthy lab is left as is.

    Remains of a dead lab (namespaces, links, daemons, a stale record) are cleared first. On
    failure, whatever was started is taken down again (unless ``keep_on_failure``, for debugging)
    and the error names the log to read.

    Before it returns, the lab is proven end to end (SSH with orch's own connection, munge and
    Slurm on every node); a lab that fails the proof is taken down like any failed `up`.

    Raises:
        ConfigError: the state dir (or a folder above it) cannot be used by sshd or munged.
        LabError: not root, packages missing, the free disk too small for the lab's stack on every
            node (lab/disk.py), a port taken, another lab running from another state dir, a daemon
            failing, nodes not idle in time, or a node failing the proof (named).
    """
    t0 = time.monotonic()
    preflight.check(cfg.accounting)
    preflight.check_state_dir(cfg.state_dir)
    old = _load(cfg)
    if old is not None and _healthy(old):
        return UpResult(already_running=True, seconds=time.monotonic() - t0, status=status(cfg))
    _refuse_if_elsewhere(cfg, "`up` here")
    disk.check_disk(disk.disk_need(load_stack(LAB_STACK), cfg.state_dir, [n.name for n in cfg.node_specs]))
    if _has_remains(cfg):
        progress("clearing remains of an earlier lab")
        down(old.config if old is not None else cfg, progress)
    taken = accounting.ports_taken(cfg)
    if taken:
        raise LabError(
            f"port(s) {', '.join(map(str, taken))} on this machine are taken by something else",
            hint="stop what listens there (see `ss -ltnp`), then retry",
        )
    state = LabState(config=cfg, started_at=datetime.now(UTC))
    try:
        _start(cfg, state, progress)
    except BaseException:
        if keep_on_failure:
            raise
        progress("up failed; taking down what was started (logs kept in " + str(cfg.log_dir) + ")")
        with contextlib.suppress(Exception):
            down(cfg, _quiet)
        raise
    return UpResult(already_running=False, seconds=time.monotonic() - t0, status=status(cfg))


def _record(cfg: LabConfig, state: LabState, record: DaemonRecord) -> None:
    state.daemons = [*state.daemons, record]
    save_state(state, cfg.state_file)


def _start(cfg: LabConfig, state: LabState, progress: Progress) -> None:
    env = slurm_env(cfg)
    password = secrets.token_hex(16)
    progress(f"writing keys and configs in {cfg.state_dir}")
    files.prepare(cfg, password)
    save_state(state, cfg.state_file)

    progress(f"creating {cfg.nodes} node namespaces on bridges {MGMT_BRIDGE} and {FABRIC_BRIDGE}")
    netns.create_bridges()
    for node in cfg.node_specs:
        netns.create_node(node)

    progress("starting munged")
    munge_log = cfg.state_dir / "munge" / "munged.log"
    _record(
        cfg,
        state,
        daemons.spawn(
            "munged",
            [
                "munged",
                "-F",
                f"--socket={cfg.munge_socket}",
                f"--key-file={files.munge_key(cfg)}",
                f"--pid-file={cfg.munge_socket.parent / 'munged.pid'}",
                f"--seed-file={cfg.state_dir / 'munge' / 'munged.seed'}",
                f"--log-file={munge_log}",
            ],
            log=cfg.log_dir / "munged.stderr.log",
            env=env,
            user="munge",
        ),
    )
    daemons.wait_for("munged", cfg.munge_socket.exists, timeout=15, log=munge_log)

    if cfg.accounting:
        progress("starting MariaDB on loopback")
        _record(cfg, state, accounting.start_mariadb(cfg, env))
        accounting.create_database(cfg, password)
        progress("starting slurmdbd")
        _record(cfg, state, accounting.start_slurmdbd(cfg, env))
        accounting.add_cluster(env)

    progress("starting slurmctld")
    _record(
        cfg,
        state,
        daemons.spawn(
            "slurmctld",
            ["slurmctld", "-D", "-f", str(cfg.slurm_conf)],
            log=cfg.log_dir / "slurmctld.stderr.log",
            env=env,
        ),
    )
    daemons.wait_for(
        "slurmctld",
        lambda: shell.run(["scontrol", "ping"], env=env, check=False, timeout=10).returncode == 0,
        timeout=30,
        log=cfg.log_dir / "slurmctld.log",
    )

    progress(f"starting sshd and slurmd on {cfg.nodes} nodes")
    for node in cfg.node_specs:
        opt = cfg.node_opt(node)
        sshd_argv = ["/usr/sbin/sshd", "-D", "-e", "-f", str(cfg.node_dir(node) / "sshd_config")]
        slurmd_argv = ["slurmd", "-D", "-N", node.name, "-f", str(cfg.slurm_conf)]
        for name, argv in (("sshd", sshd_argv), ("slurmd", slurmd_argv)):
            mounts = masks.mount_lines(
                cfg.masks,
                cfg.node_home(node),
                cfg.node_scratch(node),
                cfg.run_dir / "share" / f"{node.name}-{name}",
            )
            wrapped = daemons.in_node(
                node.netns, cfg.run_dir / "cg" / f"{node.name}-{name}", opt, argv, mounts
            )
            record = daemons.spawn(
                f"{name}@{node.name}",
                wrapped,
                log=cfg.log_dir / f"{name}-{node.name}.stderr.log",
                env=env,
                node=node.name,
            )
            _record(cfg, state, record)

    _wait_idle(cfg, progress)
    t_prove = time.monotonic()
    prove.prove(cfg, env)
    progress(f"SSH, munge and Slurm proven on every node in {time.monotonic() - t_prove:.1f} s")
    state.complete = True
    save_state(state, cfg.state_file)


def _wait_idle(cfg: LabConfig, progress: Progress) -> None:
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    last = ""
    names = [n.name for n in cfg.node_specs]
    while time.monotonic() < deadline:
        states = _sinfo(cfg)
        idle = [n for n in names if states.get(n) == "idle"]
        summary = f"{len(idle)}/{len(names)} nodes idle"
        if summary != last:
            progress(f"waiting for Slurm: {summary}")
            last = summary
        if len(idle) == len(names):
            return
        time.sleep(0.5)
    raise LabError(
        f"nodes not idle in Slurm within {IDLE_TIMEOUT_S:.0f} s: {_sinfo(cfg) or 'sinfo gave no answer'}",
        hint=f"see {cfg.log_dir}/slurmctld.log and slurmd-*.log",
    )


def down(cfg: LabConfig, progress: Progress = _quiet, *, purge: bool = False) -> DownResult:
    """Stop every lab process and remove namespaces, links and runtime files; safe to repeat.

    Works from the record when there is one, and from what exists otherwise (namespaces and links
    with the lab prefix, lab daemons naming the state dir), so it also clears a crashed `up`.
    With ``purge``, each node's own /opt (its provisioned stack, lab/disk.py) is removed too.
    Folders given up with disk.discard() and still being removed in the background are removed
    before it returns.

    Raises:
        LabError: a lab runs from another state dir (down here would kill its daemons and take
            its namespaces, which have fixed names).
    """
    t0 = time.monotonic()
    state = _load(cfg)
    _refuse_if_elsewhere(cfg, "`down` here")
    if state is not None:
        cfg = state.config
    stopped: list[int] = []

    recorded = [p for d in (state.daemons if state else []) if (p := d.process()) is not None]
    if recorded:
        progress(f"stopping {len(recorded)} lab daemons")
        stopped += stop_processes(recorded)

    namespaces = netns.lab_namespaces()
    inside = [pid for ns in namespaces for pid in netns.namespace_pids(ns)]
    if inside:
        progress(f"stopping {len(inside)} processes left in lab namespaces")
        stopped += stop_processes(daemons.pids_to_processes(inside), grace=3)

    strays = daemons.stray_processes(cfg.state_dir)
    if strays:
        progress(f"stopping {len(strays)} unrecorded lab daemons")
        stopped += stop_processes(strays, grace=3)

    if namespaces:
        progress(f"removing {len(namespaces)} namespaces")
    for ns in namespaces:
        netns.delete_namespace(ns)
    links = netns.lab_links()
    # Host-side veths usually vanish with their namespace; bridges go last.
    for link in sorted(links, key=lambda name: name in (MGMT_BRIDGE, FABRIC_BRIDGE)):
        netns.delete_link(link)
    files.remove_runtime(cfg)
    if disk.discarded_root(cfg.state_dir).exists():
        progress(f"removing the folders given up under {disk.discarded_root(cfg.state_dir)}")
    disk.finish_discarded(cfg.state_dir)
    purged: dict[str, int] = {}
    if purge:
        progress(f"removing the nodes' /opt under {cfg.state_dir}")
        purged = disk.purge_opt(cfg.state_dir)
    return DownResult(
        stopped_pids=sorted(set(stopped)),
        namespaces=namespaces,
        links=links,
        seconds=time.monotonic() - t0,
        purged=purged,
    )
